"""Machine specs (issue 8, section 4): `--simulate FILE.yaml` and `vgpu sim reset --machine FILE` take specs
that people share in tickets. Module and parameter names become /sys/module paths, so `../` in them wrote
outside the simulator root; aliases made a billion-laughs spec run out of memory; `total_vfs: 0` on a GIM
GPU was exit 70. Each case writes its spec, runs the real command on a new simulator directory, and checks
exit 5, one line, and that nothing under the test directory changed (no simulator directory, no staging
directory, the decoy beside it untouched).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Watch, assert_refused, special_file, vgpu
from vgpu.inputs import LIMITS

GPU = '  - {address: "0000:85:00.0", kind: gpu, model: MI300X}\n'
NIC = '  - {address: "0000:21:00.0", kind: nic, driver: mlx5_core}\n'


def spec(state: str = "", functions: str = GPU + NIC) -> bytes:
    return (f"version: v1\nname: hostile\ndescription: a shared spec\nfunctions:\n{functions}"
            + (f"state:\n{state}" if state else "")).encode()


ESCAPE = "../../../decoy"

SPECS = {
    "module-name-dotdot": (spec(f"  modules: {{'{ESCAPE}': {{}}}}\n"), "state.modules"),
    "module-name-slash": (spec("  modules: {'a/b': {}}\n"), "state.modules"),
    "module-name-dot": (spec("  modules: {'..': {}}\n"), "state.modules"),
    "module-name-too-long": (spec(f"  modules: {{{'m' * 56}: {{}}}}\n"), "state.modules"),
    "module-name-newline": (spec('  modules: {"gim\\nx": {}}\n'), "state.modules"),
    "param-name-dotdot": (spec(f"  modules: {{gim: {{'{ESCAPE}/pwned': 1}}}}\n"), "state.modules"),
    "param-name-hidden": (spec("  modules: {gim: {'.x': 1}}\n"), "state.modules"),
    "param-name-too-long": (spec(f"  modules: {{gim: {{{'p' * 65}: 1}}}}\n"), "state.modules"),
    "version-module-dotdot": (spec(f"  module_versions: {{'{ESCAPE}': '1.0'}}\n"), "module_versions"),
    "version-value-newline": (spec('  module_versions: {gim: "8.4\\n../x"}\n'), "module_versions"),
    "bind-driver-dotdot": (spec(f"  bind: {{'0000:21:00.0': '{ESCAPE}'}}\n"), "state.bind"),
    "modprobe-d-param-dotdot": (spec("  modules: {mlx5_core: {}}\n  modprobe_d: {'evil.conf': "
                                     f"'options mlx5_core {ESCAPE}/pwned=1'}}\n"), "unknown parameter"),
    "cmdline-param-dotdot": (spec(f"  modules: {{mlx5_core: {{}}}}\n  cmdline: 'ro mlx5_core.{ESCAPE}/pwned=1'\n"),
                             "unknown parameter"),
    "modprobe-d-file-name": (spec("  modprobe_d: {'../../decoy.conf': 'x'}\n"), "modprobe.d file name"),
    "total-vfs-zero-on-gim": (spec("  modules: {gim: {}}\n", '  - {address: "0000:85:00.0", kind: gpu, '
                                   'model: MI300X, sriov: {total_vfs: 0}}\n'), "gim drives this GPU"),
    # issue 24: the host OS and kernel the capability matrix is keyed by land in files and messages
    "os-release-id-newline": (spec('  os_release: {id: "ubuntu\\nID=evil", version_id: "24.04"}\n'), "os_release.id"),
    "os-release-version-space": (spec('  os_release: {id: ubuntu, version_id: "24.04 LTS"}\n'), "os_release.version_id"),
    "os-release-unknown-key": (spec('  os_release: {id: ubuntu, version_id: "24.04", codename: noble}\n'),
                               "os_release.codename"),
    "kernel-release-newline": (spec('  kernel_release: "6.14.0\\n../x"\n'), "kernel_release"),
    "kernel-release-too-long": (spec(f'  kernel_release: "6.{"1" * 80}"\n'), "kernel_release"),
    "gpu-client-device-escape": (spec('  gpu_clients: [{comm: x, device: "/dev/../etc/passwd"}]\n'), "gpu_clients"),
    "gpu-client-unit-slash": (spec('  gpu_clients: [{comm: x, device: /dev/kfd, unit: "../x.service"}]\n'),
                              "gpu_clients"),
    "gpu-client-comm-too-long": (spec(f'  gpu_clients: [{{comm: {"c" * 16}, device: /dev/kfd}}]\n'), "gpu_clients"),
    "billion-laughs": (b"version: v1\nname: &a lol\n" + b"".join(
        b"l%d: &l%d [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n" % ((i, i) + ((b"a" if i == 0 else b"l%d" % (i - 1)),) * 8)
        for i in range(12)), "aliases"),
    "duplicate-key": (spec() + b"name: again\n", "duplicate key"),
    "deep-nesting": (b"version: v1\nname: " + b"[" * 200 + b"]" * 200 + b"\n", "nested deeper"),
    "binary": (spec() + b"\x00\x01", "binary"),
    "not-a-mapping": (b"- just\n- a list\n", "mapping"),
}


def hostile_file(path: Path, how: str) -> None:
    special_file(path, how, LIMITS["machine spec"])


@pytest.fixture
def area(tmp_path):
    (tmp_path / "decoy").mkdir()
    (tmp_path / "decoy" / "precious.txt").write_text("keep\n")
    return tmp_path


@pytest.mark.parametrize("command", ["discover", "sim-reset"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_hostile_spec_is_refused_before_anything_is_built(area, name, command):
    content, needle = SPECS[name]
    path = area / "spec.yaml"
    path.write_bytes(content)
    sim = area / "sim"
    watch = Watch(area)
    if command == "discover":
        proc = vgpu("discover", "--simulate", str(path), "--sim-dir", str(sim), timeout=600)
    else:
        proc = vgpu("sim", "reset", "--machine", str(path), "--sim-dir", str(sim), timeout=600)
    assert_refused(proc, 5, needle)
    watch.unchanged()
    assert not sim.exists() and not (area / "decoy" / "pwned").exists()


@pytest.mark.parametrize("how, needle", [("fifo", "FIFO"), ("directory", "directory"),
                                         ("dev-zero", "character device"), ("over-cap", "1 MiB"),
                                         ("missing", "does not exist")])
def test_spec_path_that_is_not_a_regular_file(area, how, needle):
    path = area / "spec.yaml"
    hostile_file(path, how)
    watch = Watch(area)
    proc = vgpu("discover", "--simulate", str(path), "--sim-dir", str(area / "sim"), timeout=600)
    assert_refused(proc, 5, needle)
    watch.unchanged()


def test_a_sane_spec_with_module_parameters_still_builds(area):
    path = area / "spec.yaml"
    path.write_bytes(spec("  modules: {gim: {vf_num: 4}, mlx5_core: {}}\n  module_versions: {gim: 8.4.0.K}\n"))
    proc = vgpu("discover", "--json", "--simulate", str(path), "--sim-dir", str(area / "sim"), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (area / "sim" / "root" / "sys" / "module" / "gim" / "parameters" / "vf_num").read_text() == "4\n"


# Fields that become sysfs paths besides module names: PCI addresses and driver names.
PATH_FIELDS = {
    "address-dotdot": ('  - {address: "0000:85:00.0/../../../decoy", kind: gpu, model: MI300X}\n', "PCI address"),
    "address-absolute": ('  - {address: "/etc/passwd", kind: gpu, model: MI300X}\n', "PCI address"),
    "address-device-over-1f": ('  - {address: "0000:85:20.0", kind: gpu, model: MI300X}\n', "PCI address"),
    "path-dotdot": ('  - {address: "0000:85:00.0", kind: gpu, model: MI300X, path: ["../../decoy"]}\n',
                    "PCI address"),
    "iommu-group-with-dotdot": ('  - {address: "0000:85:00.0", kind: gpu, model: MI300X, '
                                'iommu_group_with: "../decoy"}\n', "PCI address"),
    "driver-dotdot": ('  - {address: "0000:21:00.0", kind: nic, driver: "../../../decoy"}\n', "driver"),
    "driver-too-long": (f'  - {{address: "0000:21:00.0", kind: nic, driver: {"d" * 56}}}\n', "driver"),
}


@pytest.mark.parametrize("name", sorted(PATH_FIELDS))
def test_spec_fields_that_become_paths_are_checked(area, name):
    functions, needle = PATH_FIELDS[name]
    path = area / "spec.yaml"
    path.write_bytes(spec(functions=functions))
    sim = area / "sim"
    watch = Watch(area)
    proc = vgpu("discover", "--simulate", str(path), "--sim-dir", str(sim), timeout=600)
    assert_refused(proc, 5, needle)
    watch.unchanged()
    assert not sim.exists()


# The same names in a hand-edited state.json of a real simulated host: refused as a damaged state before
# the tree is rendered from it (the generation mark is bumped so that open() re-renders everything).
STATE_EDITS = {
    "module-dotdot": lambda s: s["modules"].__setitem__("../../../../decoy/x", {}),
    "module-slash": lambda s: s["modules"].__setitem__("a/b", {}),
    "param-dotdot": lambda s: s["modules"].setdefault("gim", {}).__setitem__("../../../../../decoy/p", "1"),
    "holder-pid-dotdot": lambda s: s["holders"].__setitem__("../../decoy", {"pid": 1, "comm": "x", "group": 1}),
    "driver-dotdot": lambda s: next(iter(s["functions"].values())).__setitem__("driver", "../../../../decoy"),
    "override-dotdot": lambda s: next(iter(s["functions"].values())).__setitem__("driver_override", "../x"),
    "address-key-dotdot": lambda s: s["functions"].__setitem__(
        "../../../decoy", dict(next(iter(s["functions"].values())), address="../../../decoy")),
    "parent-dotdot": lambda s: next(iter(s["functions"].values())).__setitem__("parent", "../../decoy"),
    "available-module-dotdot": lambda s: s["available_modules"].append("../decoy"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from vgpu.sim import SimHost
    base = tmp_path_factory.mktemp("built")
    SimHost.create(base / "sim")
    return base / "sim"


@pytest.mark.parametrize("name", sorted(STATE_EDITS))
def test_hand_edited_state_names_never_become_paths(area, built, name):
    import json
    import shutil
    sim = area / "sim"
    shutil.copytree(built, sim, symlinks=True)
    state = json.loads((sim / "state.json").read_text())
    STATE_EDITS[name](state)
    (sim / "state.json").write_text(json.dumps(state))
    (sim / "tree-generation").write_text("999999")
    watch = Watch(area)
    proc = vgpu("discover", "--simulate", "--sim-dir", str(sim), timeout=600)
    assert_refused(proc, 5, "state.json is corrupt")
    watch.unchanged()


@pytest.mark.parametrize("path", ["../decoy/x", "/etc/passwd", "sys/../../decoy", "sys/module/../../../x",
                                  "sys/bus/pci/drivers/../../../../../decoy"])
def test_the_tree_writer_refuses_any_path_outside_the_root(area, path):
    from vgpu.errors import InputError
    from vgpu.sim.tree import Tree
    tree = Tree(area / "sim" / "root")
    with pytest.raises(InputError, match="outside the simulated host's root"):
        tree._write(tree.root / path, "pwned\n")
    assert tree._at(tree.root / "sys/module/gim") == tree.root / "sys/module/gim"


def test_a_state_that_skipped_validation_still_cannot_write_outside(area, built):
    """Belt and braces: even a state changed after load_state checked it (records do not check assignments)
    cannot make the tree writer leave the simulator root."""
    import shutil
    from vgpu.errors import InputError
    from vgpu.sim.state import load_state
    from vgpu.sim.tree import Tree
    sim = area / "sim"
    shutil.copytree(built, sim, symlinks=True)
    state = load_state(sim)
    state.modules["../../../../decoy"] = {"pwned": "1"}  # not checked: only load_state checks
    watch = Watch(area / "decoy")
    with pytest.raises(InputError, match="outside the simulated host's root"):
        Tree(sim / "root").render_globals(state)
    watch.unchanged()
    assert not (area / "pwned").exists()
