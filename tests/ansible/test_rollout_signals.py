"""`vgpu rollout` interrupted for real: SIGTERM while the canary's `vgpu provision` (run by the real
ansible-playbook through ansible-runner, on a local-connection host with a simulated 8x MI300X) is between two
steps. The signal reaches vgpu on the host, which rolls its step back; the roll-out records the canary
`in_progress` and `stopped: rolled back` (read back from the host), and itself `interrupted`, exits 143, and
`resume` finishes both waves. Hosts here have no guests: their gate is provisioning alone, which the roll-out
accepts only with --allow-unvalidated, and says."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import yaml

from conftest import HANG, VENV_BIN, signal_at_pause

VGPU = str(VENV_BIN / "vgpu")


def env(**extra: str) -> dict:
    out = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out.update(NO_COLOR="1", COLUMNS="200", **extra)
    return out


def status(sim: Path) -> dict:
    proc = subprocess.run([VGPU, "status", "--json", "--simulate", "--sim-dir", str(sim)], capture_output=True,
                          text=True, timeout=HANG)
    return json.loads(proc.stdout)


def test_sigterm_mid_canary_is_recorded_and_resume_finishes_the_rollout(tmp_path):
    sims = {}
    for host in ("kvm-a", "kvm-b"):
        sims[host] = tmp_path / "sim" / host
        subprocess.run([VGPU, "sim", "reset", "--sim-dir", str(sims[host])], check=True, capture_output=True,
                       timeout=HANG)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"gim_hosts": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python"),
            "provision_sim_dir": str(s)} for h, s in sims.items()}}}))
    state_dir = tmp_path / "rollout"
    pause = tmp_path / "pause"
    pause.mkdir()
    argv = [VGPU, "rollout", "run", "-i", str(inventory), "--profile", "mi300x-4vf", "--state-dir", str(state_dir),
            "--serial", "1", "--max-unavailable", "1", "--allow-unvalidated", "-e", "ansible_become=false", "-e", "provision_install=none",
            "-e", f"provision_executable={VGPU}", "-e", "provision_simulate=true"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env(VGPU_SIM_PAUSE_AT="2:after", VGPU_SIM_PAUSE_DIR=str(pause)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = signal_at_pause(proc, pause, signal.SIGTERM)
    assert proc.returncode == 143, out + err
    assert "interrupted by SIGTERM" in err and "kvm-a (canary) has no guests" in err
    state = json.loads((state_dir / "state.json").read_text())
    assert state["state"] == "interrupted" and state["waves"][0]["state"] == "running"
    assert {h: (r["state"], r["phase"], r["stopped"]) for h, r in state["hosts"].items()} == {
        "kvm-a": ("in_progress", "provision", "rolled back"), "kvm-b": ("not_started", None, None)}
    assert state["hosts"]["kvm-a"]["reason"] == "provision interrupted by SIGTERM; read back after the stop: " \
        "rolled back", state["hosts"]["kvm-a"]
    provision_json = json.loads(next(state_dir.glob("wave-*/run-*/provision.json")).read_text())
    assert [(h["host"], h["outcome"]) for h in provision_json["hosts"]] == [("kvm-a", "rolled back")]
    assert status(sims["kvm-a"])["profile"] is None  # vgpu on the host rolled its step back, as recorded
    assert status(sims["kvm-b"])["profile"] is None

    shown = subprocess.run([VGPU, "rollout", "status", "--state-dir", str(state_dir)], capture_output=True,
                           text=True, env=env(), timeout=HANG)
    assert shown.returncode == 3 and "interrupted" in shown.stdout and "vgpu rollout resume" in shown.stdout

    done = subprocess.run([VGPU, "rollout", "resume", "--state-dir", str(state_dir), "--json"], capture_output=True,
                          text=True, env=env(), timeout=HANG, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    final = json.loads(done.stdout)
    assert final["state"] == "done" and {r["state"] for r in final["hosts"].values()} == {"done"}
    assert final["hosts"]["kvm-a"]["attempts"] == 2 and final["hosts"]["kvm-b"]["attempts"] == 1
    for sim in sims.values():
        doc = status(sim)
        assert doc["profile"] == "mi300x-4vf" and doc["in_sync"], doc
