"""An interrupted fleet run has one defined outcome per host (issue 20; the contract: docs/ansible.md, "Interrupted
runs"): every host ends applied (its run verified before the stop reached it) or rolled back, never half, and vgpu
reports which, read back from the host after the stop. The stop is injected at start-up, inside a begun step and
after the last one, through the simulator's pause hook (vgpu/sim/hooks.py): each move of the test
waits for the event it depends on (the provision paused, the signal arrived on the host), never for a time, and
the runs go beside a CPU-burning process per core.

Hosts are local-connection hosts with simulated 8x MI300X; the controller-loss case kills ansible-playbook itself
(as a dropped SSH session or a killed AWX job does to the module's connection) and checks that vgpu on the host
rolls back on its own."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import HANG, PLAYBOOKS, REPO, VENV_BIN, signal_at_pause, signalled, wait_until

VGPU = str(VENV_BIN / "vgpu")
SCHEMA = json.loads((REPO / "vgpu" / "schemas" / "playbook-run-v1.json").read_text())
PROFILE = "mi300x-4vf"
# start-up (before planning); step 4 (reload-gim) begun and journaled, not yet applied; after the last step (7),
# not yet verified: each one rolls back. The boundary after a step: test_playbook_cli.py (2:after); every point
# of the plan on the host alone: tests/hostile/test_signals.py.
POINTS = ["start", "3:before", "6:after"]
EXTRA = ["-e", "ansible_become=false", "-e", "provision_install=none", "-e", f"provision_executable={VGPU}",
         "-e", "provision_simulate=true", "-e", f"provision_profile={PROFILE}", "-e", "vgpu_serial=[1]"]


def fleet(tmp_path: Path, names: tuple[str, ...]) -> tuple[Path, dict[str, Path]]:
    sims = {h: tmp_path / "sim" / h for h in names}
    for sim in sims.values():
        subprocess.run([VGPU, "sim", "reset", "--sim-dir", str(sim)], check=True, capture_output=True, timeout=HANG)
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"gim_hosts": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python"),
            "provision_sim_dir": str(s)} for h, s in sims.items()}}}))
    return inv, sims


def status(sim: Path) -> dict:
    proc = subprocess.run([VGPU, "status", "--json", "--wait", str(HANG), "--simulate", "--sim-dir", str(sim)],
                          capture_output=True, text=True, timeout=HANG)
    return json.loads(proc.stdout)


def env_for(tmp_path: Path, pause: Path, point: str, only: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pause.mkdir()
    env.update(NO_COLOR="1", COLUMNS="200", TMPDIR=str(tmp), VGPU_SIM_PAUSE_AT=point, VGPU_SIM_PAUSE_DIR=str(pause),
               VGPU_SIM_PAUSE_ONLY=str(only))
    return env


@pytest.mark.parametrize("point", POINTS)
def test_a_stop_anywhere_leaves_each_host_applied_or_rolled_back_and_says_which(tmp_path, point, cpu_burners):
    """Two hosts, one at a time: kvm-a is provisioned and verified, then SIGTERM lands while kvm-b's provision is
    at ``point``. kvm-a keeps its verified profile and is reported applied; kvm-b rolls back and is reported rolled
    back; what vgpu reports is what the hosts say afterwards."""
    inv, sims = fleet(tmp_path, ("kvm-a", "kvm-b"))
    pause = tmp_path / "pause"
    proc = subprocess.Popen([VGPU, "playbook", "run", "provision", "-i", str(inv), *EXTRA, "--json"], cwd=tmp_path,
                            env=env_for(tmp_path, pause, point, sims["kvm-b"]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = signal_at_pause(proc, pause, signal.SIGTERM)
    assert proc.returncode == 143, out + err
    assert signalled(pause)[0] == "SIGTERM", signalled(pause)
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    outcomes = {h["host"]: h["outcome"] for h in doc["hosts"]}
    assert outcomes == {"kvm-a": "applied", "kvm-b": "rolled back"}, doc["hosts"]
    assert "applied: kvm-a; rolled back: kvm-b" in err, err
    a, b = status(sims["kvm-a"]), status(sims["kvm-b"])
    assert (a["profile"], a["in_sync"], a["unfinished_run"]) == (PROFILE, True, None), a
    assert (b["profile"], b["in_sync"], b["unfinished_run"]) == (None, True, None), b
    assert not (sims["kvm-b"] / "root" / "var" / "lib" / "vgpu" / "journal.json").exists()
    reported = {h["host"]: h["read_back"] for h in doc["hosts"]}
    assert reported["kvm-a"]["profile"] == PROFILE and reported["kvm-b"]["profile"] is None


def test_the_controller_going_away_makes_vgpu_on_the_host_roll_back_on_its_own(tmp_path, ansible_env, cpu_burners):
    """ansible-playbook run directly (as AWX runs it) dies with SIGKILL while the module's `vgpu provision` is
    between two steps: no signal is passed on to anybody, but the module's output connection closes (what a dropped
    SSH session does to it), so the module stops vgpu, which finishes its step and rolls back; the host is as it
    was, with no journal left."""
    inv, sims = fleet(tmp_path, ("kvm-a",))
    pause = tmp_path / "pause"
    env = {**env_for(tmp_path, pause, "2:after", sims["kvm-a"]), **ansible_env}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    plain = [a if a != "vgpu_serial=[1]" else "vgpu_serial=1" for a in EXTRA]  # -e KEY=VALUE is a string here
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inv), *plain, str(PLAYBOOKS / "provision.yml")]
    with (tmp_path / "ansible.err").open("w") as errors:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    wait_until(lambda: (pause / "ready").exists(), proc, "the provision paused")
    for pid in _ansible_playbook_of(inv):  # the controller: ansible-playbook and its workers, nothing below them
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=HANG)
    wait_until(lambda: "SIGTERM" in signalled(pause), None, "the module stopped vgpu when its controller went away")
    (pause / "go").write_text("")
    doc = status(sims["kvm-a"])  # --wait: once vgpu on the host has finished rolling back
    assert (doc["profile"], doc["in_sync"], doc["unfinished_run"]) == (None, True, None), doc
    assert not (sims["kvm-a"] / "root" / "var" / "lib" / "vgpu" / "journal.json").exists()


def _ansible_playbook_of(inv: Path) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"ansible-playbook") for a in args[:2]) and str(inv).encode() in args:
            pids.append(int(cmdline.parent.name))
    return pids
