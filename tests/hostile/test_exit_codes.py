"""docs/exit-codes.md is the contract: every code its table documents is produced by at least one
real command line here (a subprocess, as an operator runs it), and every case's code is in the
table, so the code and the doc cannot drift apart (issue 8, section 9)."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO, assert_refused, copy_sim, planned_sim, two_gpu_spec, vgpu

PROFILE = "mi300x-4vf"
SPEC = two_gpu_spec("codes2xmi300x", "2 x MI300X whose firmware allows 1 VF (gim refuses vf_num 4)", first_vf_limit=1)


def documented() -> dict[int, str]:
    """code -> name, from the table in docs/exit-codes.md."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*([A-Z_]+)\s*\|", (REPO / "docs/exit-codes.md").read_text(), re.M)
    return {int(code): name for code, name in rows}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    spec = tmp_path_factory.mktemp("codes-spec") / "m.yaml"
    spec.write_text(SPEC)
    return planned_sim(tmp_path_factory, "codes", machine=spec)


@pytest.fixture
def sim(base, tmp_path):
    return copy_sim(base, tmp_path)


def on(sim: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return vgpu(*args, "--simulate", env={"VGPU_SIM_DIR": str(sim)}, **kw)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def paused_then(sim: Path, tmp_path: Path, profile: str, sig: signal.Signals) -> subprocess.CompletedProcess:
    """`provision` paused before its first step (the executor's test hook), then sent ``sig``."""
    pause = tmp_path / "pause"
    pause.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", VGPU_SIM_DIR=str(sim),
               VGPU_SIM_PAUSE_AT="0:before", VGPU_SIM_PAUSE_DIR=str(pause))
    args = [sys.executable, "-m", "vgpu", "provision", "--profile", profile, "--yes", "--simulate"]
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 600  # a hang guard: no outcome depends on it
    while not (pause / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    os.kill(proc.pid, sig)
    (pause / "go").touch()
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def case_ok(sim, tmp_path):  # never provisioned, no run pending: in sync with nothing recorded
    return on(sim, "status"), None


def case_failure(sim, tmp_path):  # disruptive, no terminal to confirm it, no --yes
    return on(sim, "provision", "--profile", PROFILE, input=""), "no terminal"


def case_usage(sim, tmp_path):
    return vgpu("plan", "--no-such-option"), None


def case_changes_pending(sim, tmp_path):
    return on(sim, "plan", "--profile", "mi300x-1vf"), None


def case_refused(sim, tmp_path):  # an MI355X profile on MI300X GPUs
    return on(sim, "plan", "--profile", "mi355x-1vf"), None


def case_bad_input(sim, tmp_path):  # /proc has bus/pci, but it is not a sysfs tree
    return vgpu("discover", "--sysfs-root", "/proc"), "not a sysfs tree"


def case_in_use(sim, tmp_path):  # a process holds the first VF's VFIO group
    root = sim / "root"
    vf = next((root / "sys/bus/pci/devices").glob("0000:05:02.*"))
    group = os.path.basename(os.readlink(vf / "iommu_group"))
    (root / "proc/4242/fd").mkdir(parents=True)
    (root / "proc/4242/comm").write_text("qemu-kvm\n")
    os.symlink(f"/dev/vfio/{group}", root / "proc/4242/fd/7")
    return on(sim, "provision", "--profile", PROFILE, "--yes"), "qemu-kvm"


def case_locked(sim, tmp_path):
    state = sim / "root/var/lib/vgpu"
    state.mkdir(parents=True, exist_ok=True)
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"vgpu pid 1 since 00:00:00\n")
        proc = on(sim, "provision", "--profile", PROFILE, "--yes", "--lock-timeout", "0")
        return proc, "locked by vgpu pid 1"
    finally:
        os.close(fd)


def case_apply_failed(sim, tmp_path):  # gim refuses vf_num 4 on the first GPU (its vf_limit is 1)
    return on(sim, "provision", "--profile", PROFILE, "--yes", "--vf-timeout", "0.3"), "rolled back"


def case_remote(sim, tmp_path):
    guests = tmp_path / "guests.yaml"
    guests.write_text(f"version: v1\nguests:\n  - {{name: vm, host: 127.0.0.1, port: {closed_port()}}}\n")
    return vgpu("validate", "--report-dir", str(tmp_path / "reports"), "--known-hosts", str(tmp_path / "kh"),
                "--profile", PROFILE, "--connect-timeout", "1", "-q", "--guests", str(guests)), None


def case_internal(sim, tmp_path):  # a command module that cannot be imported: a bug, not "No such command"
    code = ("import sys; sys.modules['vgpu.cli.common'] = None\n"
            "from vgpu.cli import main; main(['plan', '--profile', 'mi300x-4vf'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600)
    return proc, "internal error"


def case_hangup(sim, tmp_path):  # the terminal went away: handled as SIGTERM, the run rolled back
    return paused_then(sim, tmp_path, PROFILE, signal.SIGHUP), "interrupted by SIGHUP"


def case_interrupted(sim, tmp_path):
    return paused_then(sim, tmp_path, PROFILE, signal.SIGINT), "interrupted by SIGINT"


def case_terminated(sim, tmp_path):
    return paused_then(sim, tmp_path, PROFILE, signal.SIGTERM), "interrupted by SIGTERM"


CASES = {"OK": (0, case_ok), "FAILURE": (1, case_failure), "USAGE": (2, case_usage),
         "CHANGES_PENDING": (3, case_changes_pending), "REFUSED": (4, case_refused),
         "BAD_INPUT": (5, case_bad_input), "IN_USE": (6, case_in_use), "LOCKED": (7, case_locked),
         "APPLY_FAILED": (8, case_apply_failed), "REMOTE": (9, case_remote), "INTERNAL": (70, case_internal),
         "HANGUP": (129, case_hangup), "INTERRUPTED": (130, case_interrupted), "TERMINATED": (143, case_terminated)}


def test_every_documented_code_has_a_case_and_every_case_is_documented():
    doc = documented()
    assert {name: code for name, (code, _) in CASES.items()} == {name: code for code, name in doc.items()}


@pytest.mark.parametrize("name", sorted(CASES, key=lambda n: CASES[n][0]))
def test_documented_code_is_what_the_cli_exits_with(sim, tmp_path, name):
    code, case = CASES[name]
    assert documented().get(code) == name, f"docs/exit-codes.md has no row {code} {name}"
    proc, needle = case(sim, tmp_path)
    if needle is not None:
        assert_refused(proc, code, needle)
    else:
        assert proc.returncode == code, (proc.returncode, proc.stdout[-1500:], proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("blocked", ["vgpu.cli.plan", "vgpu.cli.common", "vgpu.planner"])
def test_a_command_module_that_cannot_be_imported_is_exit_70_not_no_such_command(tmp_path, blocked):
    """A broken install (a module missing or failing to import) injected through PYTHONPATH:
    sitecustomize blocks the module, as a deleted or syntax-broken file would."""
    (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{blocked!r}] = None\n")
    proc = vgpu("plan", "--profile", PROFILE, env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    line = assert_refused(proc, 70, "internal error", blocked)
    assert "No such command" not in proc.stderr, line
    assert "rerun with --debug" in proc.stderr
