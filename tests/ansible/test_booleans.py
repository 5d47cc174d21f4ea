"""Every boolean a vgpu.instinct role takes means what it says, whatever its spelling: the AWX survey's answers
("false", "true") and `-e key=value` arrive as strings, and a non-empty string is true in a Jinja test. Before
this was fixed `-e vgpu_allow_reboot=false` walked past the reboot gate's stop and into `Reboot the host`.

- the reboot gate for real (the shared task file, marker under tmp): the survey's answers as AWX passes them
  (extra vars, strings), `-e vgpu_allow_reboot=false`, `=no`, `=0` and the variable unset never reach the
  reboot; only a true value does (the local connection refuses to reboot: proof without rebooting anything);
- each role's argument spec declares every boolean `type: bool` and refuses anything else (ansible-core's own
  validator, the one role argument validation runs);
- no task, template or handler reads a declared boolean without `| bool`.
The Molecule tier (tests/molecule/test_reboot_gate.py) proves the same on a real host with the real playbook.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TEST_PLAYBOOKS, UBUNTU_24

SHARED = TEST_PLAYBOOKS / "shared_task.yml"
COLLECTION = REPO / "collections" / "ansible_collections" / "vgpu" / "instinct"
ROLES = sorted(p.parent.parent.name for p in COLLECTION.glob("roles/*/meta/argument_specs.yml"))
STOP = "Stop, the host needs a reboot that is not allowed"
REBOOT = "Reboot the host"


def survey_answers() -> list[str]:
    """The choices of the AWX survey question that sets vgpu_allow_reboot (awx/controller.yml)."""
    tasks = yaml.safe_load((REPO / "awx" / "controller.yml").read_text())[0]["tasks"]
    for task in tasks:
        for q in (task.get("awx.awx.job_template", {}).get("survey_spec") or {}).get("spec", []):
            if q["variable"] == "vgpu_allow_reboot":
                return q["choices"]
    raise AssertionError("no survey question sets vgpu_allow_reboot")


def gate_host(run_dir: Path, name: str, **allow) -> dict:
    return {**UBUNTU_24, "test_tasks": "reboot_gate.yml", "vgpu_reboot_extra_reasons": ["gim-dkms changed"],
            "vgpu_reboot_marker": str(run_dir / name / "reboot-required"), **allow}


def assert_stopped(res) -> None:
    name, msg = res.failed()
    assert name == STOP and msg.startswith("reboot required: gim-dkms changed."), (name, msg)
    assert REBOOT not in [n for n, r in res.tasks() if not r.get("skipped")]


def assert_reached_reboot(res) -> None:
    # ansible.builtin.reboot refuses the local connection ("would reboot the control node").
    name, msg = res.failed()
    assert name == REBOOT and "would reboot the control node" in msg, (name, msg)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gate")


def test_the_survey_offers_false_and_true_as_strings():
    # What AWX sends: the answer itself, a string, in the job's extra vars.
    assert survey_answers() == ["false", "true"]


@pytest.mark.parametrize("answer", survey_answers())
def test_the_survey_answers_as_awx_passes_them(module_run, run_dir, answer):
    res = module_run(SHARED, {f"survey-{answer}": gate_host(run_dir, f"survey-{answer}")},
                     {"vgpu_allow_reboot": answer})
    (assert_reached_reboot if answer == "true" else assert_stopped)(res)


@pytest.mark.parametrize("value", ["false", "no", "0", "False", "off"])
def test_minus_e_key_false_value_never_reboots(module_run, run_dir, value):
    res = module_run(SHARED, {f"e-{value}": gate_host(run_dir, f"e-{value}")},
                     args=["-e", f"vgpu_allow_reboot={value}"])
    assert_stopped(res)
    assert (run_dir / f"e-{value}" / "reboot-required").read_text() == "gim-dkms changed\n"


@pytest.mark.parametrize("value", ["true", "yes", "1"])
def test_minus_e_key_true_value_reboots(module_run, run_dir, value):
    assert_reached_reboot(module_run(SHARED, {f"e-{value}": gate_host(run_dir, f"e-{value}")},
                                     args=["-e", f"vgpu_allow_reboot={value}"]))


def test_unset_and_host_variable_strings(module_run, run_dir):
    falsy = {"unset": {}, "host-str-false": {"vgpu_allow_reboot": "false"}, "host-str-no": {"vgpu_allow_reboot": "no"},
             "host-bool-false": {"vgpu_allow_reboot": False}, "host-int-0": {"vgpu_allow_reboot": 0}}
    truthy = {"host-str-yes": {"vgpu_allow_reboot": "yes"}, "host-bool-true": {"vgpu_allow_reboot": True}}
    hosts = {h: gate_host(run_dir, h, **v) for h, v in {**falsy, **truthy}.items()}
    res = module_run(SHARED, hosts, {"ansible_become": False})
    for h in falsy:
        assert_stopped(res.on(h))
    for h in truthy:
        assert_reached_reboot(res.on(h))


def test_a_value_that_is_no_boolean_is_refused_before_the_gate(module_run, run_dir):
    res = module_run(SHARED, {"maybe": gate_host(run_dir, "maybe")}, args=["-e", "vgpu_allow_reboot=maybe"])
    name, msg = res.failed()
    assert name.startswith("Validating arguments against arg spec") and "vgpu_allow_reboot" in msg, (name, msg)
    assert not (run_dir / "maybe").exists()


# --- every boolean of every role: declared type bool, refused otherwise, read with | bool ------------------------

def role_specs() -> dict[tuple[str, str], dict]:
    """(role, entry point) -> options."""
    out = {}
    for role in ROLES:
        specs = yaml.safe_load((COLLECTION / "roles" / role / "meta" / "argument_specs.yml").read_text())
        for entry, spec in specs["argument_specs"].items():
            out[(role, entry)] = spec.get("options", {})
    return out


def declared_booleans(role: str) -> set[str]:
    return {name for (r, _), opts in role_specs().items() if r == role
            for name, o in opts.items() if o.get("type") == "bool"}


@pytest.mark.parametrize("role", ROLES)
def test_every_boolean_default_is_declared_bool(role):
    defaults = COLLECTION / "roles" / role / "defaults" / "main.yml"
    values = yaml.safe_load(defaults.read_text()) if defaults.exists() else {}
    bools = {k for k, v in (values or {}).items() if isinstance(v, bool)}
    assert bools <= declared_booleans(role), sorted(bools - declared_booleans(role))


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_accept_only_booleans(role):
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    for (r, entry), opts in role_specs().items():
        if r != role:
            continue
        # As role argument validation builds it: the options, required ones given.
        given = {n: "x" for n, o in opts.items() if o.get("required") and o.get("type", "str") == "str"}
        given |= {n: ["x"] for n, o in opts.items() if o.get("required") and o.get("type") == "list"}
        for name in (n for n, o in opts.items() if o.get("type") == "bool"):
            validator = ArgumentSpecValidator(opts)
            for ok, want in [("false", False), ("no", False), ("0", False), ("true", True), (1, True)]:
                result = validator.validate({**given, name: ok})
                assert not result.error_messages, (role, entry, name, ok, result.error_messages)
                assert result.validated_parameters[name] is want
            for bad in ["maybe", "", 2, ["false"]]:
                msgs = validator.validate({**given, name: bad}).error_messages
                assert any(name in m for m in msgs), (role, entry, name, bad, msgs)


def uses_without_bool(text: str, name: str) -> list[str]:
    """Lines that read ``name`` in a template or condition without ``| bool`` (not comments, not `name=` hints)."""
    pattern = re.compile(rf"\b{re.escape(name)}\b(?!\s*\|\s*bool\b)(?!=)")
    return [ln.strip() for ln in text.splitlines() if not ln.lstrip().startswith("#") and pattern.search(ln)]


def test_the_check_below_finds_a_bare_boolean():
    assert uses_without_bool("  when: not vgpu_allow_reboot\n", "vgpu_allow_reboot")
    assert uses_without_bool("{% if x_y %}", "x_y")
    assert not uses_without_bool("  when: not (vgpu_allow_reboot | bool)\n  msg: set vgpu_allow_reboot=true",
                                 "vgpu_allow_reboot")


@pytest.mark.parametrize("role", ROLES)
def test_no_role_reads_a_boolean_without_bool(role):
    names = set().union(*(declared_booleans(r) for r in ROLES))  # the shared role's are read everywhere
    files = [p for d in ("tasks", "handlers", "templates") for p in (COLLECTION / "roles" / role / d).rglob("*")
             if p.is_file()]
    bad = {f"{p.relative_to(COLLECTION)}: {line}" for p in files for n in names
           for line in uses_without_bool(p.read_text(), n)}
    assert not bad, json.dumps(sorted(bad), indent=1)


def test_the_roles_run_on_the_ansible_core_the_collection_declares():
    """requires_ansible's lower bound is honoured by the ansible-core these tests ran the roles with; under
    make test-ansible-oldest (VGPU_ANSIBLE_EXPECT) that is exactly the oldest one declared."""
    import os
    import subprocess

    from conftest import ANSIBLE_BIN

    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    oldest = tuple(int(x) for x in re.fullmatch(r">=(\d+)\.(\d+)\.\d+", runtime["requires_ansible"]).groups())
    out = subprocess.run([str(ANSIBLE_BIN / "ansible-playbook"), "--version"], capture_output=True, text=True).stdout
    version = tuple(int(x) for x in re.search(r"core (\d+)\.(\d+)\.", out).groups())
    assert version >= oldest, out
    expect = os.environ.get("VGPU_ANSIBLE_EXPECT")
    if expect:
        assert version == tuple(int(x) for x in expect.split(".")), out
