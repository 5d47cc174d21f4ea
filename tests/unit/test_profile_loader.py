"""Loading profiles: malformed and hostile files, extends, the shipped set, the JSON schema."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml
from profile_helpers import BASE

from vgpu.errors import ExitCode, InputError
from vgpu.profiles import (MAX_BYTES, ProfileError, dump_profile, list_profiles, load_profile, load_profile_text,
                           profile_json_schema, schema_text, shipped_names)

REPO = Path(__file__).resolve().parents[2]
GOOD = "version: v1\nname: t\ngpu:\n  model: MI300X\n"


def _bomb() -> str:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        lines.append(f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


# (case, file content, the start of the error line). Every case must fail with exactly this text.
MALFORMED = [
    ("empty file", "", "bad.yaml: empty; a profile is a YAML mapping starting with 'version: v1'"),
    ("only a comment", "# nothing\n", "bad.yaml: empty;"),
    ("a list, not a mapping", "- version: v1\n", "bad.yaml: a profile is a YAML mapping (key: value lines), not a list"),
    ("a scalar", "mi300x-4vf\n", "bad.yaml: a profile is a YAML mapping (key: value lines), not a str"),
    ("two documents", GOOD + "---\n" + GOOD, "bad.yaml: line 5, column 1: not valid YAML (expected a single document in the stream but found another document)"),
    ("broken YAML", "version: v1\ngpu: {model: [\n", "bad.yaml: line 3, column 1: not valid YAML"),
    ("tab indentation", "version: v1\ngpu:\n\tmodel: MI300X\n", "bad.yaml: line 3, column 1: not valid YAML"),
    ("duplicate key", GOOD + "name: u\n", "bad.yaml: line 5, column 1: not valid YAML (duplicate key 'name')"),
    ("missing version", "name: t\ngpu: {model: MI300X}\n", "bad.yaml: version: missing; this vgpu reads profile format v1"),
    ("version as a number", "version: 1\ngpu: {model: MI300X}\n", "bad.yaml: version: 1; this vgpu reads"),
    ("unknown top-level key", GOOD + "hypervisr: kvm\n",
     "bad.yaml: hypervisr: unknown key; did you mean 'hypervisor'? (allowed here: version, name, description"),
    ("unknown nested key", GOOD + "  vf_per_gpu: 4\n",
     "bad.yaml: gpu.vf_per_gpu: unknown key; did you mean 'vfs_per_gpu'? (allowed here: model, mode, vfs_per_gpu"),
    ("missing gpu", "version: v1\nname: t\n", "bad.yaml: gpu: is required"),
    ("missing model", "version: v1\ngpu: {vfs_per_gpu: 1}\n", "bad.yaml: gpu.model: is required"),
    ("gpu not a mapping", "version: v1\ngpu: MI300X\n", "bad.yaml: gpu: must be a mapping of keys (got 'MI300X')"),
    ("vfs as a word", GOOD + "  vfs_per_gpu: four\n", "bad.yaml: gpu.vfs_per_gpu: must be a whole number (got 'four')"),
    ("vfs as a boolean", GOOD + "  vfs_per_gpu: yes\n", "bad.yaml: gpu.vfs_per_gpu: must be a whole number (got True)"),
    ("vfs as a float", GOOD + "  vfs_per_gpu: 4.0\n", "bad.yaml: gpu.vfs_per_gpu: must be a whole number (got 4.0)"),
    ("huge vf count", GOOD + "  vfs_per_gpu: 99999999999999999999\n",
     "bad.yaml: gpu.vfs_per_gpu: 99999999999999999999 VFs per GPU is not allowed for MI300X"),
    ("mode misspelt", GOOD + "  mode: sr-iov\n", "bad.yaml: gpu.mode: should be 'sriov' or 'passthrough' (got 'sr-iov')"),
    ("numa nodes not a list", GOOD + "  select: {numa_nodes: 0}\n", "bad.yaml: gpu.select.numa_nodes: must be a list"),
    ("address as a number", GOOD + "  select: {addresses: [850000]}\n",
     "bad.yaml: gpu.select.addresses[0]: a PCI address must be a string like 0000:85:00.0, not int"),
    ("address with a newline", GOOD + "  select: {addresses: [\"0000:85:00.0\\nrm\"]}\n",
     "bad.yaml: gpu.select.addresses[0]: not a PCI address: '0000:85:00.0\\nrm'"),
    ("address device above 0x1f", GOOD + "  select: {addresses: [\"0000:85:20.0\"]}\n",
     "bad.yaml: gpu.select.addresses[0]: not a PCI address: '0000:85:20.0' (device number 0x20 is above 0x1f)"),
    ("profile name with a slash", "version: v1\nname: ../../etc/passwd\ngpu: {model: MI300X}\n",
     "bad.yaml: name: profile name '../../etc/passwd' is not allowed"),
    ("profile name with a newline", "version: v1\nname: \"a\\nb\"\ngpu: {model: MI300X}\n",
     "bad.yaml: name: profile name 'a\\nb' is not allowed"),
    ("very long profile name", f"version: v1\nname: {'a' * 5000}\ngpu: {{model: MI300X}}\n",
     "bad.yaml: name: profile name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is not allowed"),
    ("shell in a VM name", GOOD + "vms:\n  assign: {\"$(reboot)\": [\"85:02.0\"]}\n",
     "bad.yaml: vms.assign.'$(reboot)': VM name '$(reboot)' is not allowed"),
    ("VM name key is a number", GOOD + "vms:\n  assign: {1: [\"85:02.0\"]}\n",
     "bad.yaml: vms.assign[1]: must be a string (got 1)"),
    ("format string attack", GOOD + "vms: {name_pattern: \"{index.__init__.__globals__}\"}\n",
     "bad.yaml: vms.name_pattern: name pattern '{index.__init__.__globals__}' must contain {index} exactly once"),
    ("unbalanced pattern", GOOD + "vms: {name_pattern: \"vm-{index\"}\n",
     "bad.yaml: vms.name_pattern: name pattern 'vm-{index' is not a valid format string"),
    ("description with a terminal escape", GOOD + "description: \"ok\\e[2J\"\n",
     "bad.yaml: description: the description must be one line"),
    ("impossible combination", GOOD + "  vfs_per_gpu: 8\n  compute_partition: SPX\n",
     "bad.yaml: gpu.compute_partition: SPX with 8 VFs per GPU is not a combination GIM accepts"),
    ("sriov on esxi", GOOD + "hypervisor: esxi\n", "bad.yaml: hypervisor: esxi takes GPUs only whole"),
    ("YAML alias bomb", _bomb(), "bad.yaml: line 2: YAML aliases (*a) are not allowed"),
    ("merge key through an alias", "base: &b {model: MI300X}\nversion: v1\ngpu:\n  <<: *b\n",
     "bad.yaml: line 4: YAML aliases (*b) are not allowed"),
    ("deep nesting", "version: v1\nx: " + "[" * 5000 + "]" * 5000 + "\n", "bad.yaml: line 2: nested deeper than 16"),
    ("python object tag", GOOD + "description: !!python/object/apply:os.system [\"true\"]\n",
     "bad.yaml: line 5, column 14: not valid YAML (could not determine a constructor for the tag"),
    ("binary tag", GOOD + "description: !!binary aGVsbG8=\n", "bad.yaml: description: must be a string (got b'hello')"),
    ("unhashable key", "version: v1\n? [a, b]\n: 1\n", "bad.yaml: line 2, column 3: not valid YAML"),
    ("extends not a string", GOOD + "extends: [a, b]\n",
     "bad.yaml: extends: must be a shipped profile name or a path to a .yaml file, not \"['a', 'b']\""),
    ("extends a missing shipped profile", GOOD + "extends: mi300x-16vf\n",
     "bad.yaml: extends: no shipped profile named 'mi300x-16vf' (shipped: mi300x-1vf"),
]


@pytest.mark.parametrize("case,text,message", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_profile_gives_one_clear_line(tmp_path, case, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path))
    line = str(caught.value).replace(str(tmp_path) + "/", "")
    assert "\n" not in line
    assert line.startswith(message), line
    assert caught.value.exit_code == ExitCode.BAD_INPUT and isinstance(caught.value, InputError)


def test_at_least_thirty_malformed_cases():
    assert len(MALFORMED) >= 30


@pytest.mark.parametrize("content,message", [
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "holds binary data (NUL bytes), not text"),
    (b"version: v1\nname: \xff\xfe\n", "is not UTF-8 text (bad byte 0xff at offset 18)"),
    (b"version: v1\n" + b"# padding\n" * (MAX_BYTES // 10 + 1), "is larger than the limit of 256 KiB for a profile"),
])
def test_binary_and_huge_files_are_refused_before_parsing(tmp_path, content, message):
    path = tmp_path / "junk.yaml"
    path.write_bytes(content)
    with pytest.raises(ProfileError, match="junk.yaml: " + message.replace("(", r"\(").replace(")", r"\)")):
        load_profile(path)


def test_missing_file_and_directory_are_clear(tmp_path):
    with pytest.raises(ProfileError, match=r"nope.yaml: does not exist$"):
        load_profile(str(tmp_path / "nope.yaml"))
    with pytest.raises(ProfileError, match="dir.yaml: is a directory, not a regular file"):
        load_profile(tmp_path / "dir.yaml" if (tmp_path / "dir.yaml").mkdir() is None else "")


def test_unknown_bare_name_lists_the_shipped_profiles():
    with pytest.raises(ProfileError, match=r"^mi300x-3vf: no shipped profile and no file of that name \(shipped: "
                                           r"mi300x-1vf, mi300x-4vf"):
        load_profile("mi300x-3vf")


def test_every_problem_is_reported_on_its_own_line():
    text = GOOD + "  mode: bogus\nhypervisor: hyperv\nguest: {os: dos}\n"
    with pytest.raises(ProfileError) as caught:
        load_profile_text(text, source="p.yaml")
    assert [p.split(":")[1].strip() for p in caught.value.problems] == ["hypervisor", "gpu.mode", "guest.os"]


# extends ---------------------------------------------------------------------------------------------


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_extends_merges_mappings_and_null_removes_a_key(tmp_path):
    _write(tmp_path / "base.yaml", {**BASE, "name": "base", "description": "the base",
                                    "gpu": {"model": "MI300X", "vfs_per_gpu": 4, "compute_partition": "QPX"},
                                    "guest": {"os": "rhel-9.6"}})
    child = _write(tmp_path / "child.yaml", {"version": "v1", "extends": "./base.yaml",
                                             "gpu": {"compute_partition": None, "memory_partition": "NPS4"}})
    profile = load_profile(child)
    assert profile.name == "child" and profile.description is None  # neither is inherited
    assert (profile.gpu.vfs_per_gpu, profile.gpu.compute_partition.value, profile.gpu.memory_partition.value) == \
        (4, "QPX", "NPS4")
    assert profile.guest.os.value == "rhel-9.6"
    assert profile.lineage == (str(child), str(tmp_path / "base.yaml"))


def test_extends_replaces_the_gpu_selection_whole(tmp_path):
    _write(tmp_path / "base.yaml", {**BASE, "gpu": {"model": "MI300X", "select": {"numa_nodes": [0]}}})
    child = _write(tmp_path / "c.yaml", {"version": "v1", "extends": "base.yaml", "gpu": {"select": {"count": 2}}})
    select = load_profile(child).gpu.select
    assert (select.count, select.numa_nodes) == (2, None)


def test_extends_a_shipped_profile_by_name(tmp_path):
    child = _write(tmp_path / "mine.yaml", {"version": "v1", "extends": "mi300x-4vf", "guest": {"os": "rocky-9"}})
    profile = load_profile(child)
    assert (profile.gpu.vfs_per_gpu, profile.guest.os.value) == (4, "rocky-9")
    assert profile.lineage[1:] == ("profiles/mi300x-4vf.yaml", "profiles/mi300x-1vf.yaml")


def test_error_names_the_parent_file_that_set_the_bad_value(tmp_path):
    _write(tmp_path / "base.yaml", {**BASE, "gpu": {"model": "MI300X", "vfs_per_gpu": 3}})
    child = _write(tmp_path / "c.yaml", {"version": "v1", "extends": "base.yaml", "hypervisor": "kvm"})
    with pytest.raises(ProfileError) as caught:
        load_profile(child)
    assert str(caught.value) == (f"{tmp_path}/base.yaml: gpu.vfs_per_gpu: 3 VFs per GPU is not allowed for MI300X "
                                 "(GIM accepts 1, 2, 4, 8)")


def test_error_names_the_child_when_it_overrides_the_value(tmp_path):
    _write(tmp_path / "base.yaml", BASE)
    child = _write(tmp_path / "c.yaml", {"version": "v1", "extends": "base.yaml", "gpu": {"vfs_per_gpu": 5}})
    with pytest.raises(ProfileError, match=r"c.yaml: gpu.vfs_per_gpu: 5 VFs per GPU"):
        load_profile(child)


def test_extends_cycle_is_named(tmp_path):
    _write(tmp_path / "a.yaml", {**BASE, "extends": "b.yaml"})
    _write(tmp_path / "b.yaml", {**BASE, "extends": "./a.yaml"})
    with pytest.raises(ProfileError) as caught:
        load_profile(str(tmp_path / "a.yaml"))
    assert str(caught.value).endswith(f"extends: cycle {tmp_path}/a.yaml -> {tmp_path}/b.yaml -> {tmp_path}/a.yaml")


def test_extends_itself_is_a_cycle(tmp_path):
    _write(tmp_path / "self.yaml", {**BASE, "extends": "self.yaml"})
    with pytest.raises(ProfileError, match="extends: cycle .*self.yaml -> .*self.yaml$"):
        load_profile(tmp_path / "self.yaml")


def test_missing_parent_file_is_named(tmp_path):
    child = _write(tmp_path / "c.yaml", {**BASE, "extends": "../elsewhere/base.yaml"})
    with pytest.raises(ProfileError, match=r"c.yaml: extends: parent file '.*/elsewhere/base.yaml' not found"):
        load_profile(child)


def test_long_extends_chain_is_refused(tmp_path):
    for i in range(12):
        _write(tmp_path / f"p{i}.yaml", {**BASE, "extends": f"p{i + 1}.yaml"})
    _write(tmp_path / "p12.yaml", BASE)
    with pytest.raises(ProfileError, match="extends: chain longer than 8 profiles"):
        load_profile(tmp_path / "p0.yaml")


def test_parent_version_is_checked_too(tmp_path):
    _write(tmp_path / "base.yaml", {**BASE, "version": "v0"})
    child = _write(tmp_path / "c.yaml", {**BASE, "extends": "base.yaml"})
    with pytest.raises(ProfileError, match=r"base.yaml: version: 'v0'"):
        load_profile(child)


# the shipped profiles --------------------------------------------------------------------------------

SHIPPED = ["mi300x-1vf", "mi300x-4vf", "mi300x-8vf", "mi300x-esxi-passthrough", "mi300x-passthrough",
           "mi325x-1vf", "mi350p-1vf", "mi350x-8vf", "mi355x-1vf", "mi355x-2vf", "mi355x-8vf", "mi355x-passthrough"]


def test_the_issue_lists_exactly_the_shipped_profiles():
    assert shipped_names() == SHIPPED
    assert sorted(p.stem for p in (REPO / "profiles").glob("*.yaml")) == SHIPPED


@pytest.mark.parametrize("name,model,mode,vfs,parts,hyp,support", [
    ("mi300x-1vf", "MI300X", "sriov", 1, "SPX/NPS1", "kvm", "supported"),
    ("mi300x-4vf", "MI300X", "sriov", 4, "QPX/NPS1", "kvm", "unvalidated"),
    ("mi300x-8vf", "MI300X", "sriov", 8, "CPX/NPS4", "kvm", "preview"),
    ("mi300x-passthrough", "MI300X", "passthrough", None, None, "kvm", "unvalidated"),
    ("mi300x-esxi-passthrough", "MI300X", "passthrough", None, None, "esxi", "supported"),
    ("mi325x-1vf", "MI325X", "sriov", 1, "SPX/NPS1", "kvm", "supported"),
    ("mi355x-1vf", "MI355X", "sriov", 1, "SPX/NPS1", "kvm", "supported"),
    # issue 24: what AMD ships now (GIM 9.1.0.K+: "2*-DPX-NPS2", "8*-CPX-NPS2"; 9.4.0.K: MI350P 1-SPX-NPS1)
    ("mi355x-2vf", "MI355X", "sriov", 2, "DPX/NPS2", "kvm", "preview"),
    ("mi355x-8vf", "MI355X", "sriov", 8, "CPX/NPS2", "kvm", "preview"),
    ("mi350x-8vf", "MI350X", "sriov", 8, "CPX/NPS2", "kvm", "preview"),
    ("mi350p-1vf", "MI350P", "sriov", 1, "SPX/NPS1", "kvm", "supported"),
    ("mi355x-passthrough", "MI355X", "passthrough", None, None, "kvm", "supported"),
])
def test_shipped_profile_says_what_the_issue_asks(name, model, mode, vfs, parts, hyp, support):
    p = load_profile(name)
    combo = f"{p.combo.compute.value}/{p.combo.memory.value}" if p.combo else None
    assert (p.name, p.gpu.model, p.gpu.mode.value, p.gpu.vfs_per_gpu, combo, p.hypervisor.value, p.support.value) \
        == (name, model, mode, vfs, parts, hyp, support)
    assert p.description and p.source == f"profiles/{name}.yaml"


def test_mi300x_4vf_warns_it_is_not_in_amds_matrix():
    assert "4 VFs per GPU (QPX/NPS1) on MI300X is accepted by GIM but not in AMD's validated matrix" in \
        load_profile("mi300x-4vf").warnings()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_round_trips_through_show(name):
    profile = load_profile(name)
    again = load_profile_text(dump_profile(profile), source=f"{name}.yaml")
    assert again.to_dict() == profile.to_dict()


def test_shipped_profiles_load_by_path_as_well(monkeypatch):
    monkeypatch.chdir(REPO)
    assert load_profile("profiles/mi300x-8vf.yaml").to_dict() == load_profile("mi300x-8vf").to_dict()


def test_shipped_profiles_come_from_the_package_resources():
    folder = resources.files("vgpu").joinpath("shipped_profiles")
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".yaml")) == [f"{n}.yaml" for n in SHIPPED]
    assert folder.joinpath("mi300x-1vf.yaml").read_bytes() == (REPO / "profiles" / "mi300x-1vf.yaml").read_bytes()


def test_list_profiles_validates_all_shipped():
    assert [p.name for p in list_profiles()] == SHIPPED


# JSON schema -----------------------------------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(profile_json_schema())


def test_committed_schema_matches_the_model():
    committed = (REPO / "vgpu" / "schemas" / "profile-v1.json").read_text()
    assert committed == schema_text(), "run: vgpu profiles schema > vgpu/schemas/profile-v1.json"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_files_and_resolved_profiles_pass_the_schema(name):
    schema = profile_json_schema()
    raw = yaml.safe_load((REPO / "profiles" / f"{name}.yaml").read_text())
    jsonschema.validate(raw, schema)
    jsonschema.validate(json.loads(json.dumps(load_profile(name).to_dict())), schema)


@pytest.mark.parametrize("bad", [{"version": "v1", "gpux": {}}, {"version": "v2"}, {"name": "x"},
                                 {"version": "v1", "gpu": {"mode": "sr-iov"}},
                                 {"version": "v1", "gpu": {"select": {"addresses": ["85:00.9"]}}}])
def test_schema_flags_what_editors_should_flag(bad):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, profile_json_schema())


def test_null_name_pattern_means_the_default_pattern(tmp_path):
    # found by the fuzzer: `name_pattern: null` (as `extends` uses to drop a key) crashed the validator
    path = tmp_path / "p.yaml"
    path.write_text(GOOD + "vms: {name_pattern: null}\n")
    profile = load_profile(path)
    assert "{index" in profile.vms.name_pattern
