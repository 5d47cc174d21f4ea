"""The collection as ansible and ansible-lint see it: every playbook parses, ansible-lint's production
profile passes offline, and every role documents every variable it defines."""
from __future__ import annotations

import json
import subprocess
import tarfile

import pytest
import yaml

from conftest import PLAYBOOKS, REPO, VENV_BIN

COLLECTION = REPO / "collections" / "ansible_collections" / "vgpu" / "instinct"
ROLES = sorted(p for p in (COLLECTION / "roles").iterdir() if p.is_dir())


def test_every_playbook_passes_syntax_check(ansible_env):
    books = sorted(PLAYBOOKS.glob("*.yml"))
    assert {b.name for b in books} >= {"prepare_kvm_hosts.yml", "prepare_passthrough_hosts.yml",
                                       "install_guest_stack.yml", "site.yml"}
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", *map(str, books)],
                          cwd=REPO, env={**ansible_env, "ANSIBLE_STDOUT_CALLBACK": "default"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production_profile_is_clean_offline(ansible_env):
    lint = VENV_BIN / "ansible-lint"
    if not lint.exists():
        pytest.skip("ansible-lint is not installed: pip install -e '.[test]'")
    env = {**ansible_env, "ANSIBLE_STDOUT_CALLBACK": "default", "PATH": f"{VENV_BIN}:{ansible_env['PATH']}",
           "NO_COLOR": "1"}
    proc = subprocess.run([str(lint), "--offline", "--profile", "production", "-q", "--nocolor"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]


def test_collection_metadata_names_namespace_and_ansible_version():
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    for key in ("repository", "documentation", "issues"):  # what Galaxy shows beside the collection
        assert galaxy[key].startswith("https://"), key
    assert (galaxy["namespace"], galaxy["name"]) == ("vgpu", "instinct")
    assert "community.general" in galaxy["dependencies"]
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"].startswith(">=")


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_in_the_argument_spec_with_a_type_and_description(role):
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(defaults) <= set(spec), f"undocumented: {sorted(set(defaults) - set(spec))}"
    for name, opt in spec.items():
        assert opt.get("type") and opt.get("description"), name


def test_no_hint_points_at_a_playbook_that_does_not_exist():
    for path in [*(REPO / "vgpu").rglob("*.py"), *(REPO / "docs").glob("*.md")]:
        text = path.read_text()
        for word in text.split():
            if "playbooks/" in word:
                name = word[word.index("playbooks/"):].rstrip(").,`'\"|")
                assert (REPO / name).exists(), f"{path}: {name}"


def test_ansible_doc_lists_every_role_with_its_entry_points(ansible_env):
    proc = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", "role", "-l", "vgpu.instinct"], cwd=REPO,
                          env=ansible_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    listed = {line.rstrip(":") for line in proc.stdout.splitlines() if line.startswith("vgpu.instinct.")}
    assert listed == {f"vgpu.instinct.{r.name}" for r in ROLES}
    for entry in ["secure_boot", "kernel_args", "reboot_gate", "dkms_check", "amdgpu_check"]:
        assert f"    {entry}" in proc.stdout


def test_the_collection_builds_with_every_role_and_argument_spec(ansible_env, tmp_path):
    proc = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", str(COLLECTION),
                           "--output-path", str(tmp_path)], cwd=REPO, env=ansible_env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(tmp_path / "vgpu-instinct-0.1.0.tar.gz") as tar:
        names = set(tar.getnames())
    for role in ROLES:
        assert f"roles/{role.name}/meta/argument_specs.yml" in names
    assert {"MANIFEST.json", "README.md", "meta/runtime.yml"} <= names


PLUGINS = sorted((p.parent.name.removesuffix("s"), p.stem) for p in (COLLECTION / "plugins").glob("*/*.py")
                 if p.stem != "__init__")


def test_the_plugin_list_is_not_empty():
    assert ("module", "vgpu_provision") in PLUGINS


@pytest.mark.parametrize("kind,name", PLUGINS, ids=lambda v: str(v))
def test_ansible_doc_reads_every_plugin(ansible_env, kind, name):
    """ansible-doc parses the plugin's DOCUMENTATION, EXAMPLES and RETURN (the execution environment's last build
    step runs it too): invalid YAML there made it exit 1 while ansible-lint, which never reads them, passed."""
    proc = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", kind, "--json", f"vgpu.instinct.{name}"], cwd=REPO,
                          env=ansible_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)[f"vgpu.instinct.{name}"]
    assert doc["doc"]["short_description"] and doc["doc"]["options"] and doc["examples"] and doc["return"]


def test_ansible_test_sanity_passes():
    """ansible-test sanity (validate-modules, pylint, pep8, yamllint, compile, ...) in its own virtualenvs, built
    from PyPI on the first run and cached in .cache/ansible-test; pip's bootstrap script, which comes from a host
    the build machines cannot reach, is replaced by ensurepip (tools/get-pip-offline.py)."""
    proc = subprocess.run([str(REPO / "tools" / "ansible-sanity.sh"), str(VENV_BIN)], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, "\n".join(ln for ln in out.splitlines() if "WARNING: Location" not in ln)[-6000:]
    ran = {ln.split('"')[1] for ln in out.splitlines() if ln.startswith('Running sanity test "')}
    assert {"validate-modules", "pylint", "yamllint", "compile", "ansible-doc", "pep8"} <= ran, sorted(ran)


def test_the_changelog_fragments_pass_antsibull_changelog_lint(tmp_path):
    tool = VENV_BIN / "antsibull-changelog"
    assert tool.exists(), "antsibull-changelog is missing: pip install -e '.[test]'"
    fragments = sorted((COLLECTION / "changelogs" / "fragments").glob("*.yml"))
    assert fragments and (COLLECTION / "changelogs" / "config.yaml").is_file()
    proc = subprocess.run([str(tool), "lint"], cwd=COLLECTION, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
    bad = tmp_path / "bad.yml"
    bad.write_text("not_a_section:\n  - x\n")  # the lint does reject what is wrong
    assert subprocess.run([str(tool), "lint", str(bad)], cwd=COLLECTION, capture_output=True).returncode != 0
    proc = subprocess.run([str(tool), "lint-changelog-yaml", "changelogs/changelog.yaml"], cwd=COLLECTION,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
