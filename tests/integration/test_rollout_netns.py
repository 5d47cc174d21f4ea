"""`vgpu rollout` for real: three KVM hosts and their three guests, each an sshd in its own network namespace,
driven by the real ansible-playbook (through ansible-runner) over SSH with strict host keys.

Each host runs the vgpu.instinct.provision role's module against its own simulated 8x MI300X (a simulator
directory per host); each guest is a simulated MI300X VF behind a real sshd (vgpu's simulated agent tools).
The canary passes, wave 2's guest is slow (FP8 below AMD's figure and below the baseline): the roll-out stops
there with the fleet's state recorded per host and wave 3's host untouched; the guest is fixed and `resume`
runs wave 2 again, then wave 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vgpu.sim.guests import sim_guest_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
VGPU = str(Path(sys.executable).parent / "vgpu")
HOSTS = ("kvm-1", "kvm-2", "kvm-3")
GUESTS = {"vm-1": "kvm-1", "vm-2": "kvm-2", "vm-3": "kvm-3"}
PROFILE = "mi300x-1vf"  # what the simulated guests present: one whole-GPU VF (SPX/NPS1)


@pytest.fixture
def fleet(tmp_path, sshd_namespaces):
    """Six namespaces with an sshd each (conftest.sshd_namespaces): yields (client namespace, {name: address})."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    with sshd_namespaces([*HOSTS, *GUESTS], letter="r", first=20, base_dir=tmp_path / "sshd") as (client, servers):
        (tmp_path / "known_hosts").write_text("".join(s.host_key_line for s in servers.values()))
        yield client, {name: s.address for name, s in servers.items()}


def vgpu(client: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(NO_COLOR="1", ANSIBLE_HOME=env.get("ANSIBLE_HOME", "/tmp/vgpu-rollout-ansible-home"))
    return subprocess.run(["ip", "netns", "exec", client, VGPU, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def sim_host(path: Path) -> Path:
    proc = subprocess.run([VGPU, "sim", "reset", "--machine", "8xmi300x", "--sim-dir", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return path


def in_sync(sim: Path) -> bool:
    proc = subprocess.run([VGPU, "status", "--json", "--simulate", "--sim-dir", str(sim)],
                          capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout).get("in_sync") is True


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def guest_env(tmp_path: Path, name: str, scenario: str) -> dict[str, str]:
    return sim_guest_env(tmp_path / "guests" / name, scenario=scenario, hostname=name)


def test_canary_then_a_wave_that_fails_validation_stops_the_rollout_and_resume_finishes_it(
        tmp_path, fleet, client_key):
    client, addr = fleet
    sims = {h: sim_host(tmp_path / "sim" / h) for h in HOSTS}
    envs = {g: guest_env(tmp_path, g, "healthy") for g in GUESTS}
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": str(client_key), "ansible_become": False,
                 "ansible_python_interpreter": sys.executable,
                 "ansible_ssh_common_args": f"-o UserKnownHostsFile={tmp_path / 'known_hosts'} "
                                            "-o StrictHostKeyChecking=yes"},
        "children": {
            "gim_hosts": {"hosts": {h: {"ansible_host": addr[h], "provision_sim_dir": str(sims[h])} for h in HOSTS}},
            "gpu_guests": {"hosts": {g: {"ansible_host": addr[g], "vgpu_host": h, "vgpu_guest_env": envs[g]}
                                     for g, h in GUESTS.items()}}}}}))
    extra = ["-e", "provision_simulate=true", "-e", "provision_install=none", "-e", f"provision_executable={VGPU}",
             "-e", f"validate_executable={VGPU}", "-e", f"validate_known_hosts={tmp_path / 'known_hosts'}",
             "-e", "validate_connect_timeout=5"]
    # the baseline: the same guests validated before the roll-out (on ROCm 6.4, in a real migration)
    gfile = tmp_path / "guests.yaml"
    gfile.write_text(yaml.safe_dump({"version": "v1", "guests": [
        {"name": g, "host": addr[g], "user": "root", "identity": str(client_key), "profile": PROFILE, "env": envs[g]}
        for g in GUESTS]}))
    base = vgpu(client, "validate", "--guests", str(gfile), "--known-hosts", str(tmp_path / "known_hosts"),
                "--report-dir", str(tmp_path / "baseline"), "--quiet")
    assert base.returncode == 0, base.stdout + base.stderr
    state_dir = tmp_path / "rollout"
    common = ["--inventory", str(inventory), "--profile", PROFILE, "--state-dir", str(state_dir),
              "--serial", "1", "--max-unavailable", "1", "--baseline", str(tmp_path / "baseline"), *extra]
    before = {h: tree(sims[h]) for h in HOSTS}

    dry = vgpu(client, "rollout", "run", *common, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert [(w["canary"], w["hosts"]) for w in plan["waves"]] == [(True, ["kvm-1"]), (False, ["kvm-2"]),
                                                                  (False, ["kvm-3"])]
    assert plan["waves"][1]["guests"] == {"kvm-2": ["vm-2"]} and not plan["warnings"]
    assert not state_dir.exists() and {h: tree(sims[h]) for h in HOSTS} == before  # a dry run changes nothing

    guest_env(tmp_path, "vm-2", "slow")  # wave 2's guest runs FP8 far below the baseline
    first = vgpu(client, "rollout", "run", *common)
    assert first.returncode == 1, first.stdout + first.stderr
    state = json.loads((state_dir / "state.json").read_text())
    assert state["state"] == "stopped" and state["reason"] == "wave 2 failed"
    assert {h: r["state"] for h, r in state["hosts"].items()} == {"kvm-1": "done", "kvm-2": "failed",
                                                                  "kvm-3": "not_started"}
    assert [w["state"] for w in state["waves"]] == ["passed", "failed", "pending"]
    reason = state["hosts"]["kvm-2"]["reason"]
    assert reason.startswith("guest vm-2: validation fail: ") and "fp8.hipblaslt" in reason, reason
    regressed = reason.split("; guest vm-2 regressed: ", 1)  # and by how much, one line per guest
    assert len(regressed) == 2 and "fp8.hipblaslt measured " in regressed[1], reason
    assert state["hosts"]["kvm-2"]["phase"] == "validate"
    assert in_sync(sims["kvm-1"]) and in_sync(sims["kvm-2"])  # provisioned: the guest, not the host, failed
    assert tree(sims["kvm-3"]) == before["kvm-3"]  # the wave after the failure never started
    wave2 = state_dir / "wave-02" / "run-1"
    report = json.loads((wave2 / "validate" / "validation-report.json").read_text())
    assert [(g["name"], g["verdict"]) for g in report["guests"]] == [("vm-2", "fail")]
    comparison = json.loads((wave2 / "compare" / "comparison.json").read_text())
    assert comparison["summary"]["regressions"] >= 1 and comparison["only_baseline"] == []
    assert oct((state_dir / "state.json").stat().st_mode & 0o777) == "0o600"
    assert "resume: vgpu rollout resume --state-dir" in first.stdout

    status = vgpu(client, "rollout", "status", "--state-dir", str(state_dir), "--json")
    assert status.returncode == 1 and json.loads(status.stdout)["hosts"] == state["hosts"]

    guest_env(tmp_path, "vm-2", "healthy")  # the operator fixes the guest
    second = vgpu(client, "rollout", "resume", "--state-dir", str(state_dir))
    assert second.returncode == 0, second.stdout + second.stderr
    state = json.loads((state_dir / "state.json").read_text())
    assert state["state"] == "done" and all(r["state"] == "done" for r in state["hosts"].values())
    assert [(w["state"], w["runs"]) for w in state["waves"]] == [("passed", 1), ("passed", 2), ("passed", 1)]
    assert state["hosts"]["kvm-1"]["attempts"] == 1 and state["hosts"]["kvm-2"]["attempts"] == 2
    assert all(in_sync(s) for s in sims.values())
