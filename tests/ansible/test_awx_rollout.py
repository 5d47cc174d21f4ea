"""The AWX roll-out job (awx/rollout.yml) on a simulated fleet: three KVM hosts (simulated 8x MI300X, provisioned
over Ansible's local connection), one guest each behind a real sshd with strict host keys (vgpu sim fleet).

The job runs `vgpu rollout run` - one safety model with the CLI. A guest that regresses against the baseline in
the SECOND batch (vm-2, slow FP8 and HBM) stops the roll-out there: the job fails naming it, the third host is
never provisioned, the state is published with set_stats. Fixed, the "resume" job finishes the roll-out."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, VENV_BIN

VGPU = str(VENV_BIN / "vgpu")
JOB = REPO / "awx" / "rollout.yml"


def env(ansible_env: dict) -> dict:
    out = {k: v for k, v in ansible_env.items() if k != "ANSIBLE_STDOUT_CALLBACK"}
    out.update(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", NO_COLOR="1", COLUMNS="200",
               PATH=f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return out


def vgpu(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([VGPU, *args], capture_output=True, text=True, timeout=600, check=check)


def profile_of(fleet: Path, host: str):
    doc = json.loads(vgpu("status", "--json", "--simulate", "--sim-dir", str(fleet / "hosts" / host)).stdout)
    return doc["profile"]


@pytest.fixture
def fleet(tmp_path):
    d = tmp_path / "fleet"
    vgpu("sim", "fleet", "create", "--dir", str(d), "--hosts", "3")
    yield d
    vgpu("sim", "fleet", "stop", "--dir", str(d), check=False)


def job(ansible_env, fleet: Path, state: Path, **extra) -> tuple[int, dict, dict]:
    """ansible-playbook awx/rollout.yml as AWX launches it: the job's inventory with -i, survey answers as extra
    vars. Returns (rc, the failing task's message or {}, the published vgpu_rollout)."""
    extra = {"vgpu_rollout_state_dir": str(state), "vgpu_rollout_serial": "1", "vgpu_rollout_max_unavailable": "1",
             "provision_profile": "mi300x-1vf", **extra}
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(fleet / "inventory.yml"),
                           "-e", json.dumps(extra), str(JOB)], cwd=fleet, env=env(ansible_env),
                          capture_output=True, text=True, timeout=1200)
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    failed = {}
    for task in doc["plays"][0]["tasks"]:
        res = task["hosts"].get("localhost", {})
        if res.get("failed"):
            failed = {"task": task["task"]["name"], "msg": res.get("msg", "")}
    return proc.returncode, failed, doc.get("global_custom_stats", {}).get("vgpu_rollout", {})


def test_a_guest_regressing_in_the_second_batch_stops_the_awx_rollout(ansible_env, fleet, tmp_path):
    baseline = tmp_path / "baseline"
    base = vgpu("validate", "--inventory", str(fleet / "inventory.yml"), "--limit", "gpu_guests", "--known-hosts",
                str(fleet / "known_hosts"), "--profile", "mi300x-1vf", "--report-dir", str(baseline), "--quiet",
                check=False)
    assert base.returncode == 0, base.stdout + base.stderr
    vgpu("sim", "fleet", "guest", "--dir", str(fleet), "vm-2", "slow")
    state = tmp_path / "rollout"

    rc, failed, published = job(ansible_env, fleet, state, validate_baseline=str(baseline))
    assert rc != 0 and failed["task"] == "Stop the job when the roll-out stopped", failed
    assert "vgpu rollout run exited 1" in failed["msg"] and "vgpu rollout resume" in failed["msg"], failed
    recorded = json.loads((state / "state.json").read_text())
    assert [w["state"] for w in recorded["waves"]] == ["passed", "failed", "pending"], recorded["waves"]
    assert "vm-2" in failed["msg"], failed  # the guest that regressed, in vgpu's words
    assert {h: r["state"] for h, r in recorded["hosts"].items()}["kvm-3"] == "not_started"
    assert profile_of(fleet, "kvm-1") == "mi300x-1vf" and profile_of(fleet, "kvm-3") is None  # never reached
    assert published.get("state") == recorded["state"], published

    vgpu("sim", "fleet", "guest", "--dir", str(fleet), "vm-2", "healthy")
    rc, failed, published = job(ansible_env, fleet, state, vgpu_rollout_action="resume")
    assert rc == 0 and not failed, failed
    done = json.loads((state / "state.json").read_text())
    assert done["state"] == "done" and {r["state"] for r in done["hosts"].values()} == {"done"}
    assert profile_of(fleet, "kvm-3") == "mi300x-1vf"


def test_run_without_a_profile_is_refused_before_anything(ansible_env, fleet, tmp_path):
    rc, failed, _ = job(ansible_env, fleet, tmp_path / "rollout", provision_profile="")
    assert rc != 0 and failed["task"] == "Check the answers", failed
    assert not (tmp_path / "rollout").exists()
