"""`vgpu provision --json` / `release --json`: one vgpu.provision/v1 document on every outcome.

The Ansible module (vgpu.instinct.vgpu_provision) reads nothing else, so each outcome is run through
the real CLI and checked against the committed schema, the exit code and the host it leaves.
"""

import json
import shlex

import jsonschema

from conftest import REPO, hypervisor_of, inventory, run_cli

SCHEMA = json.loads((REPO / "vgpu" / "schemas" / "provision-v1.json").read_text())


def doc_of(proc) -> dict:
    doc = json.loads(proc.stdout)  # stdout is the document and nothing else
    jsonschema.validate(doc, SCHEMA)
    return doc


def cli(host, *args, rc):
    return run_cli(*args, "--json", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir,
                   check_rc=rc)


def test_apply_then_in_sync_then_planned_then_release(sim):
    host = sim()
    applied = doc_of(cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=0))
    assert (applied["result"], applied["changed"], applied["action"]) == ("applied", True, "apply")
    assert applied["profile"] == "mi300x-4vf" and applied["host"] == "simulated 8xmi300x"
    assert applied["applied"] == [s["description"] for s in applied["plan"]["steps"]]
    assert all(len(g.vfs) == 4 for g in inventory(host).gpus)

    again = doc_of(cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=0))
    assert (again["result"], again["changed"], again["applied"]) == ("in-sync", False, [])
    assert again["plan"]["in_sync"] and again["plan"]["steps"] == []

    before = inventory(host)
    planned = doc_of(cli(host, "provision", "--profile", "mi300x-8vf", "--dry-run", rc=3))
    assert (planned["result"], planned["changed"]) == ("planned", False)
    assert planned["plan"]["disruptive"] and planned["plan"]["steps"]
    assert inventory(host).gpus == before.gpus

    released = doc_of(cli(host, "release", "--yes", rc=0))
    assert (released["action"], released["result"], released["changed"]) == ("release", "applied", True)
    assert not any(vf.driver == "vfio-pci" for g in inventory(host).gpus for vf in g.vfs)
    assert doc_of(cli(host, "release", "--yes", rc=0))["result"] == "in-sync"


def test_refusal_lists_every_problem_and_changes_nothing(sim):
    host = sim("8xmi300x-fw1")
    before = inventory(host)
    doc = doc_of(cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=4))
    assert (doc["result"], doc["changed"], doc["plan"]) == ("refused", False, None)
    assert len(doc["problems"]) == len(before.gpus)
    assert all("exceed this PF's TotalVFs of 1" in p["message"] and p["fix"] for p in doc["problems"])
    assert inventory(host).gpus == before.gpus


def test_bad_profile_is_a_failed_document_and_one_error_line(sim):
    host = sim()
    proc = cli(host, "provision", "--profile", "no-such-profile", "--yes", rc=5)
    doc = doc_of(proc)
    assert (doc["result"], doc["changed"], doc["error"]["exit_code"]) == ("failed", False, 5)
    assert "no-such-profile" in doc["error"]["message"] and doc["error"]["kind"] == "ProfileError"
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == \
        [f"error: {doc['error']['message']}"]


def test_json_never_asks_a_disruptive_plan_needs_yes(sim):
    host = sim()
    before = inventory(host)
    doc = doc_of(cli(host, "provision", "--profile", "mi300x-4vf", rc=1))
    assert doc["result"] == "not-confirmed" and "never ask" in doc["error"]["message"]
    assert "--yes" in doc["error"]["hint"]
    # the review command it names shows this plan on this host (pasted as is)
    review = doc["error"]["hint"].split("`")[1]
    assert review == f"vgpu plan --profile mi300x-4vf --json --sim-dir {host.state_dir} --simulate"
    assert inventory(host).gpus == before.gpus


def test_release_json_without_yes_is_not_confirmed_and_its_hint_shows_the_release_plan(sim):
    host = sim()
    doc_of(cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=0))
    before = inventory(host)
    doc = doc_of(cli(host, "release", rc=1))
    assert (doc["action"], doc["result"], doc["changed"]) == ("release", "not-confirmed", False)
    review = shlex.split(doc["error"]["hint"].split("`")[1])
    assert review[:4] == ["vgpu", "release", "--dry-run", "--json"]
    shown = doc_of(run_cli(*review[1:], sim_dir=host.state_dir, check_rc=3))
    assert (shown["result"], shown["plan"]["action"]) == ("planned", "release") and shown["plan"]["steps"]
    assert inventory(host).gpus == before.gpus


def test_devices_held_by_a_running_vm_fail_with_in_use(sim):
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=False)
    doc_of(cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=0))
    hv.set_state("gpu-vm-00", "running")
    before = inventory(host)
    doc = doc_of(cli(host, "provision", "--profile", "mi300x-8vf", "--yes", rc=6))
    assert doc["error"]["kind"] == "InUseError" and "gpu-vm-00" in doc["error"]["message"]
    assert inventory(host).gpus == before.gpus


def test_failed_step_rolls_back_and_reports_apply_failed(sim):
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=False)
    hv.define_domain("gpu-vm-01", running=False, machine="pc")  # i440fx: the attach step fails
    before = inventory(host)
    doc = doc_of(cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=8))
    assert (doc["result"], doc["changed"], doc["error"]["exit_code"]) == ("failed", False, 8)
    assert "gpu-vm-01" in doc["error"]["message"] and "rolled back" in doc["error"]["message"]
    assert inventory(host).gpus == before.gpus
