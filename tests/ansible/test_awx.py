"""AWX / Automation Controller as code: the execution environment renders with the real ansible-builder,
and every awx.awx task of awx/controller.yml passes that module's own argument spec (taken from the
awx.awx collection of the `ansible` wheel, validated by ansible-core's ArgumentSpecValidator)."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import yaml

from conftest import COLLECTIONS_CACHE, PLAYBOOKS, REPO, VENV_BIN

AWX = REPO / "awx"
CONTROLLER = AWX / "controller.yml"


@pytest.fixture(scope="module")
def ee_context(tmp_path_factory):
    if not (VENV_BIN / "ansible-builder").exists():
        pytest.skip("ansible-builder is not installed: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("ee")
    before = sorted(p.name for p in REPO.iterdir())
    proc = subprocess.run([str(REPO / "tools" / "ee-context.sh"), str(VENV_BIN / "python"), str(out / "dist"),
                           str(out / "context")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in REPO.iterdir()) == before  # no build/ or *.egg-info left in the checkout
    return out / "context"


def test_ee_definition_is_builder_v3_on_an_rpm_base():
    ee = yaml.safe_load((AWX / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert "centos" in ee["images"]["base_image"]["name"] or "ubi" in ee["images"]["base_image"]["name"]
    assert set(ee["dependencies"]) >= {"ansible_core", "ansible_runner", "galaxy", "python", "system"}


def test_ee_context_renders_with_vgpu_and_the_collection(ee_context):
    containerfile = (ee_context / "Containerfile").read_text()
    ee = yaml.safe_load((AWX / "execution-environment.yml").read_text())
    assert f"ARG EE_BASE_IMAGE=\"{ee['images']['base_image']['name']}\"" in containerfile
    built = ee_context / "_build"
    for name in ("requirements.yml", "requirements.txt", "bindep.txt"):
        assert (built / name).read_text() == (AWX / name).read_text()
    wheels = list((built / "vgpu").glob("vgpu-*-py3-none-any.whl"))
    tarballs = list((built / "vgpu").glob("vgpu-instinct-*.tar.gz"))
    assert len(wheels) == 1 and len(tarballs) == 1
    import zipfile
    in_wheel = set(zipfile.ZipFile(wheels[0]).namelist())  # `vgpu playbook` works inside the image
    assert {"vgpu/ansible_content/playbooks/provision.yml", "vgpu/ansible_content/ansible.cfg"} <= in_wheel
    for step in ee["additional_build_steps"]["append_final"]:
        assert step in containerfile
    assert "ansible-galaxy collection install --offline" in containerfile


def test_ee_collection_tarball_carries_the_module_and_every_role(ee_context):
    import tarfile
    (tarball,) = (ee_context / "_build" / "vgpu").glob("vgpu-instinct-*.tar.gz")
    names = set(tarfile.open(tarball).getnames())
    assert "plugins/modules/vgpu_provision.py" in names
    for role in ("gim_host", "passthrough_host", "rocm_guest", "provision", "validate", "vgpu"):
        assert f"roles/{role}/meta/argument_specs.yml" in names


# --- job templates and workflow ---------------------------------------------------------------------------

def _awx_spec(module_name: str) -> dict:
    """(argument_spec, mutually_exclusive, required_if, ...) as the awx.awx module builds them: the module's
    main() is run with its ControllerAPIModule replaced by a class that captures the arguments."""
    if str(COLLECTIONS_CACHE.parent) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS_CACHE.parent))
    mod = importlib.import_module(f"ansible_collections.awx.awx.plugins.modules.{module_name}")
    from ansible_collections.awx.awx.plugins.module_utils.controller_api import ControllerModule

    class Captured(Exception):
        pass

    class Capture:
        def __init__(self, argument_spec, **kwargs):
            spec = dict(ControllerModule.AUTH_ARGSPEC)
            spec.update(argument_spec)
            raise Captured({"argument_spec": spec, **kwargs})

    original = mod.ControllerAPIModule
    mod.ControllerAPIModule = Capture
    try:
        mod.main()
    except Captured as exc:
        return exc.args[0]
    finally:
        mod.ControllerAPIModule = original
    raise AssertionError(f"awx.awx.{module_name} built no module")


def _render(args, play_vars):
    """The task's arguments as Ansible would pass them: templates rendered with the play's vars."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    try:  # ansible-core 2.19+: only trusted strings are templates (a playbook's are)
        from ansible.template import trust_as_template
    except ImportError:  # older ansible-core templates every string
        def trust_as_template(value):
            return value

    def trusted(value):
        if isinstance(value, str):
            return trust_as_template(value)
        if isinstance(value, dict):
            return {k: trusted(v) for k, v in value.items()}
        if isinstance(value, list):
            return [trusted(v) for v in value]
        return value
    return Templar(loader=DataLoader(), variables=play_vars).template(trusted(args))


def check_task(task: dict, play_vars: dict) -> list[str]:
    """The argument-spec errors of one awx.awx task (empty: valid)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    (action,) = [k for k in task if k.startswith("awx.awx.")]
    spec = _awx_spec(action.split(".")[-1])
    validator = ArgumentSpecValidator(spec["argument_spec"], mutually_exclusive=spec.get("mutually_exclusive"),
                                      required_together=spec.get("required_together"),
                                      required_one_of=spec.get("required_one_of"),
                                      required_if=spec.get("required_if"), required_by=spec.get("required_by"))
    result = validator.validate(_render(task[action], play_vars))
    return [str(e) for e in result.errors]


def controller_tasks():
    (play,) = yaml.safe_load(CONTROLLER.read_text())
    return play["vars"], play["tasks"]


@pytest.fixture(scope="module")
def awx_collection():
    if not (COLLECTIONS_CACHE / "awx" / "awx" / "MANIFEST.json").exists():
        pytest.fail("awx.awx is missing: run tools/fetch-collections.sh (make test-ansible does)")


def test_every_controller_task_passes_its_modules_argument_spec(awx_collection):
    play_vars, tasks = controller_tasks()
    assert len(tasks) >= 10
    for task in tasks:
        assert check_task(task, play_vars) == [], task["name"]


@pytest.mark.parametrize("bad", [
    {"awx.awx.job_template": {"name": "x", "playbook": "p.yml", "ask_limit_on_launch": "maybe"}},
    {"awx.awx.job_template": {"name": "x", "surveys": {}}},
    {"awx.awx.workflow_job_template_node": {"workflow_job_template": "w", "identifier": "n",
                                            "unified_job_template": "t", "approval_node": {"name": "a"}}},
    {"awx.awx.workflow_job_template_node": {"workflow_job_template": "w", "identifier": "n", "job_type": "apply"}},
])
def test_the_checker_catches_wrong_types_unknown_options_and_conflicts(awx_collection, bad):
    assert check_task({"name": "bad", **bad}, {}) != []


def test_job_templates_name_shipped_playbooks_and_ask_for_the_limit(awx_collection):
    _, tasks = controller_tasks()
    templates = [t["awx.awx.job_template"] for t in tasks if "awx.awx.job_template" in t]
    assert {t["playbook"] for t in templates} == {
        "playbooks/prepare_kvm_hosts.yml", "playbooks/prepare_passthrough_hosts.yml", "playbooks/provision.yml",
        "playbooks/install_guest_stack.yml", "playbooks/validate.yml", "awx/rollout.yml"}
    for t in templates:
        assert (REPO / t["playbook"]).is_file()
        assert t["ask_limit_on_launch"] is (t["playbook"] != "awx/rollout.yml")
    surveys = {t["playbook"]: {q["variable"] for q in t["survey_spec"]["spec"]} for t in templates
               if t.get("survey_enabled")}
    assert surveys["playbooks/provision.yml"] == {"provision_profile"}
    assert surveys["playbooks/validate.yml"] == {"validate_profile"}


def test_survey_variables_are_the_roles_arguments():
    _, tasks = controller_tasks()
    roles = REPO / "collections" / "ansible_collections" / "vgpu" / "instinct" / "roles"
    known = set()
    for spec in roles.glob("*/meta/argument_specs.yml"):
        known |= set(yaml.safe_load(spec.read_text())["argument_specs"]["main"]["options"])
    known |= {"vgpu_allow_reboot"}  # the shared role's (vgpu.instinct.vgpu)
    known |= set(yaml.safe_load((REPO / "awx" / "rollout.yml").read_text())[0]["vars"]) | {"provision_profile"}
    for task in tasks:
        body = next(iter(v for k, v in task.items() if k.startswith("awx.awx.")))
        for q in (body.get("survey_spec") or {}).get("spec", []):
            assert q["variable"] in known, q["variable"]


def test_the_ee_installs_exactly_the_tested_python_packages(ee_context):
    """awx/constraints.txt pins vgpu's whole run-time closure to the versions the tests ran with (this venv); the
    EE's requirements, ansible-core and ansible-runner are exact pins agreeing with it; the constraints reach the
    build context and the wheel's install."""
    import importlib.metadata as md
    import re

    from packaging.requirements import Requirement

    def key(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    def closure(name, seen):
        if key(name) in seen:
            return seen
        dist = md.distribution(name)
        seen[key(name)] = dist.version
        for r in map(Requirement, dist.requires or []):
            if not r.marker or r.marker.evaluate({"extra": ""}):
                closure(r.name, seen)
        return seen

    def pins(path):
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert all("==" in ln for ln in lines), lines
        return {key(ln.split("==")[0]): ln.split("==")[1] for ln in lines}

    tested = closure("vgpu", {})
    tested.pop("vgpu")
    constraints = pins(AWX / "constraints.txt")
    assert constraints == tested
    assert pins(AWX / "requirements.txt").items() <= constraints.items()
    ee = yaml.safe_load((AWX / "execution-environment.yml").read_text())["dependencies"]
    assert ee["ansible_core"]["package_pip"].split()[0] == f"ansible-core=={constraints['ansible-core']}"
    assert ee["ansible_runner"]["package_pip"] == f"ansible-runner=={constraints['ansible-runner']}"
    assert (ee_context / "_build" / "vgpu" / "constraints.txt").read_text() == (AWX / "constraints.txt").read_text()
    assert "pip install --no-cache-dir -c /build/vgpu/constraints.txt" in (ee_context / "Containerfile").read_text()


def test_every_collection_used_is_listed_at_the_version_tested():
    """The EE's requirements name each collection the roles use (and only those), pinned to what the tests ran;
    awx.awx, which controller.yml uses, is in controller-requirements.yml at the version checked here."""
    import json
    import re

    def pins(path):
        return {c["name"]: c["version"] for c in yaml.safe_load(path.read_text())["collections"]}

    tested = {f"{ns}.{n}": json.loads((COLLECTIONS_CACHE / ns / n / "MANIFEST.json").read_text())
              ["collection_info"]["version"] for ns, n in [("community", "general"), ("awx", "awx")]}
    roles = REPO / "collections" / "ansible_collections" / "vgpu" / "instinct"
    used = {m.group(1) for p in [*roles.rglob("*.yml"), *PLAYBOOKS.glob("*.yml")]
            for m in re.finditer(r"\b((?!vgpu\.)[a-z_]+\.[a-z_]+)\.[a-z_]+:", p.read_text())} - {"ansible.builtin"}
    assert set(pins(AWX / "requirements.yml")) == used, used
    assert pins(AWX / "requirements.yml") == {"community.general": "==" + tested["community.general"]}
    assert pins(AWX / "controller-requirements.yml") == {"awx.awx": "==" + tested["awx.awx"]}


def test_the_workflow_is_vgpu_rollout_with_an_approved_resume(awx_collection):
    """One safety model: the roll-out is ONE job running `vgpu rollout run` (awx/rollout.yml, tested on a simulated
    fleet in test_awx_rollout.py); the only other nodes are an approval after it FAILED and the resume."""
    _, tasks = controller_tasks()
    nodes = {t["awx.awx.workflow_job_template_node"]["identifier"]: t["awx.awx.workflow_job_template_node"]
             for t in tasks if "awx.awx.workflow_job_template_node" in t}
    templates = {t["awx.awx.job_template"]["name"]: t["awx.awx.job_template"] for t in tasks
                 if "awx.awx.job_template" in t}
    assert set(nodes) == {"rollout", "approve-resume", "resume"}
    assert nodes["rollout"]["unified_job_template"] == "vgpu rollout"
    assert nodes["rollout"]["failure_nodes"] == ["approve-resume"] and "success_nodes" not in nodes["rollout"]
    assert "approval_node" in nodes["approve-resume"] and nodes["approve-resume"]["success_nodes"] == ["resume"]
    assert nodes["resume"]["unified_job_template"] == "vgpu rollout resume"
    for name in ("vgpu rollout", "vgpu rollout resume"):
        assert templates[name]["playbook"] == "awx/rollout.yml" and templates[name]["ask_limit_on_launch"] is False
    assert templates["vgpu rollout resume"]["extra_vars"]["vgpu_rollout_action"] == "resume"
    # no workflow node provisions or validates by itself (that would be a second, weaker gate)
    assert all(n.get("unified_job_template") in (None, "vgpu rollout", "vgpu rollout resume") for n in nodes.values())


def test_controller_playbook_passes_syntax_check(ansible_env):
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", str(CONTROLLER)],
                          cwd=REPO, env={**ansible_env, "ANSIBLE_STDOUT_CALLBACK": "default"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert PLAYBOOKS.is_dir()
