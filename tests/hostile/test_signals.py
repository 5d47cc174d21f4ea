"""Interrupted runs (issue 8, section 5): real SIGINT / SIGTERM / SIGHUP / SIGKILL sent to a real
``vgpu provision`` process at every step of a real plan, then what ``vgpu status`` says.

The executor pauses at step N when VGPU_SIM_PAUSE_AT=N:before|after and VGPU_SIM_PAUSE_DIR are set
(simulated hosts only): it writes DIR/ready and waits for DIR/go, so the signal lands exactly there.
One small simulated host (2 x MI300X: every step kind of the mi300x-4vf plan, 7 steps) is built per
module and copied per case. After SIGINT/SIGTERM the host tree must equal the one before the run,
except the files a run always leaves (HOST_LOG below: the lock file and the simulated kernel log).
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import HANG, REPO, assert_refused, signalled, tree_digest, two_gpu_spec, vgpu, wait_until

PROFILE = "mi300x-4vf"
# write-file x3, reload-gim, bind-vfs x2, install-persistence (test_the_plan_has_the_steps_we_signal)
STEPS = 7
# What any run leaves in the host tree, even one that changed nothing: the host lock (and the
# directories holding it) and the simulated kernel log (gim's reload messages stay in dmesg).
HOST_LOG = {"var", "var/lib", "var/lib/vgpu", "var/lib/vgpu/lock", "dmesg.log"}

SPEC = two_gpu_spec("sig2xmi300x", "2 x MI300X, for the signal tests")

# every point a signal can land: before each step, and after the last one (all applied, not yet verified)
POINTS = [f"{i}:before" for i in range(STEPS)] + [f"{STEPS - 1}:after"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("signals")
    (base / "m.yaml").write_text(SPEC)
    proc = vgpu("sim", "reset", "--machine", str(base / "m.yaml"), "--sim-dir", str(base / "sim"))
    assert proc.returncode == 0, proc.stderr
    # plan once, so the simulated hypervisor's state (var/lib/libvirt-sim, made on first use) exists
    # in every copy: a case then compares only what the interrupted run did
    planned = vgpu("plan", "--profile", PROFILE, "--simulate", env={"VGPU_SIM_DIR": str(base / "sim")})
    assert planned.returncode == 3, planned.stderr
    status = vgpu("status", "--simulate", "--json", env={"VGPU_SIM_DIR": str(base / "sim")})
    assert status.returncode == 0, status.stderr
    return base / "sim", json.loads(status.stdout)


@pytest.fixture
def sim(built, tmp_path):
    copy = tmp_path / "sim"
    shutil.copytree(built[0], copy, symlinks=True)
    return copy


def host_tree(sim: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(sim / "root").items() if k not in HOST_LOG}


def env_of(sim: Path, **extra: str) -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", COLUMNS="200", VGPU_SIM_DIR=str(sim), **extra)


def provision_paused(sim: Path, point: str, pause: Path, *, yes: bool = True) -> subprocess.Popen:
    """Start `vgpu provision` and return once it is paused at ``point`` (its ready file exists)."""
    pause.mkdir()
    args = [sys.executable, "-m", "vgpu", "provision", "--profile", PROFILE, "--simulate"]
    args += ["--yes"] if yes else []
    proc = subprocess.Popen(args, env=env_of(sim, VGPU_SIM_PAUSE_AT=point, VGPU_SIM_PAUSE_DIR=str(pause)),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: (pause / "ready").exists(), proc, f"the pause point {point}")
    return proc


def interrupt(proc: subprocess.Popen, pause: Path, sig: int, nth: int = 1) -> None:
    """Send ``sig`` to the paused provision and wait until it has arrived there (the hook notes it), not for a time."""
    os.kill(proc.pid, sig)
    wait_until(lambda: len(signalled(pause)) >= nth, proc, f"{signal.Signals(sig).name} noted by the paused run")


def status_of(sim: Path) -> tuple[int, dict]:
    proc = vgpu("status", "--simulate", "--json", env={"VGPU_SIM_DIR": str(sim)})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_the_plan_has_the_steps_we_signal(built):
    proc = vgpu("plan", "--profile", PROFILE, "--simulate", "--json", env={"VGPU_SIM_DIR": str(built[0])})
    assert proc.returncode == 3, proc.stderr
    kinds = [s["kind"] for s in json.loads(proc.stdout)["steps"]]
    assert len(kinds) == STEPS
    assert {"write-file", "reload-gim", "bind-vfs", "install-persistence"} <= set(kinds)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", POINTS)
def test_signal_at_every_step_rolls_back_and_status_tells_the_truth(built, sim, tmp_path, point, sig):
    signal_at_point_rolls_back(built, sim, tmp_path, point, sig)


@pytest.mark.parametrize("attempt", [1, 2])
@pytest.mark.parametrize("point", POINTS)
def test_sigterm_at_every_step_under_load_repeated(built, sim, tmp_path, point, attempt, cpu_burners):
    """The same beside a CPU-burning process per core, twice: nothing in it waits for a time."""
    signal_at_point_rolls_back(built, sim, tmp_path, point, signal.SIGTERM)


def signal_at_point_rolls_back(built, sim, tmp_path, point, sig) -> None:
    before = host_tree(sim)
    proc = provision_paused(sim, point, tmp_path / "pause")
    interrupt(proc, tmp_path / "pause", sig)
    (tmp_path / "pause" / "go").touch()
    out, err = proc.communicate(timeout=HANG)
    index, _, _ = point.partition(":")
    line = assert_refused(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 128 + sig,
                          f"interrupted by {sig.name}", f"rolled back {int(index) + 1} step(s)")
    assert "as it was before this run" in line
    assert err.count("received: finishing the current step") == 1, err
    assert host_tree(sim) == before
    assert not (sim / "root/var/lib/vgpu/journal.json").exists()
    code, as_json = status_of(sim)
    assert code == 0 and as_json == built[1], as_json


def test_sighup_mid_plan_rolls_back_like_sigterm_and_under_nohup_the_run_goes_on(built, sim, tmp_path):
    """The operator's terminal or SSH session going away (SIGHUP) mid-plan: the step finishes, the run's steps are
    rolled back, exit 129 (it used to end vgpu mid-step, leaving a journal). Under nohup (SIGHUP ignored, inherited
    by vgpu) the same signal changes nothing: the run completes."""
    before = host_tree(sim)
    proc = provision_paused(sim, "4:after", tmp_path / "pause")  # gim reloaded with VFs, one bound
    interrupt(proc, tmp_path / "pause", signal.SIGHUP)
    (tmp_path / "pause" / "go").touch()
    out, err = proc.communicate(timeout=HANG)
    line = assert_refused(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 129,
                          "interrupted by SIGHUP", "rolled back 5 step(s)")
    assert "as it was before this run" in line and err.count("SIGHUP received: finishing the current step") == 1
    assert host_tree(sim) == before
    assert not (sim / "root/var/lib/vgpu/journal.json").exists()

    pause = tmp_path / "pause-nohup"
    pause.mkdir()
    nohup = subprocess.Popen([sys.executable, "-m", "vgpu", "provision", "--profile", PROFILE, "--simulate", "--yes"],
                             env=env_of(sim, VGPU_SIM_PAUSE_AT="4:after", VGPU_SIM_PAUSE_DIR=str(pause)), cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_until(lambda: (pause / "ready").exists(), nohup, "the pause point 4:after")
    os.kill(nohup.pid, signal.SIGHUP)  # ignored: the hook notes nothing, so nothing to wait for but the run's end
    (pause / "go").touch()
    out, err = nohup.communicate(timeout=HANG)
    assert nohup.returncode == 0 and "SIGHUP" not in err, out + err
    code, as_json = status_of(sim)
    assert code == 0 and as_json["profile"] == PROFILE and as_json["in_sync"], as_json


def test_repeated_ctrl_c_never_abandons_the_rollback(sim, tmp_path):
    before = host_tree(sim)
    proc = provision_paused(sim, "4:after", tmp_path / "pause")  # gim reloaded with VFs, one bound
    for n in range(1, 5):  # each one arrived before the next is sent
        interrupt(proc, tmp_path / "pause", signal.SIGINT, nth=n)
    (tmp_path / "pause" / "go").touch()
    out, err = proc.communicate(timeout=HANG)
    assert_refused(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 130,
                   "interrupted by SIGINT", "rolled back 5 step(s)")
    assert err.count("interrupting again is ignored until the host is consistent") == 1, err
    assert host_tree(sim) == before


def at_the_question(sim, answer) -> tuple[int, str]:
    """`vgpu provision` on a terminal (a pty: stdin, stdout and stderr) up to its confirmation question; then
    ``answer(proc, leader)`` and the exit code and what it wrote after the question."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "vgpu", "provision", "--profile", PROFILE, "--simulate"],
                            env=env_of(sim), cwd=REPO, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    seen, deadline = b"", time.monotonic() + HANG

    def read(timeout: float) -> bytes:
        try:
            return os.read(leader, 65536) if select.select([leader], [], [], timeout)[0] else b""
        except OSError:  # EIO: the process exited and closed the terminal
            return b""
    try:
        while b"Apply these disruptive steps?" not in seen:
            assert time.monotonic() < deadline and proc.poll() is None, seen[-2000:]
            seen += read(0.1)
        mark = len(seen)
        answer(proc, leader)
        proc.wait(timeout=HANG)
        while chunk := read(0.2):
            seen += chunk
    finally:
        os.close(leader)
    return proc.returncode, seen[mark:].decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_at_the_confirmation_question_changes_nothing(sim, sig):
    before = host_tree(sim)

    def interrupt_reading(proc, _leader) -> None:
        # once it is blocked reading the answer: a signal landing between the prompt's write and the read
        # is noticed only at the next key or signal (CPython's readline), a window no hand hits
        wait_until(lambda: blocked_on_input(proc.pid), proc, "vgpu waiting for the answer")
        os.kill(proc.pid, sig)
    code, err = at_the_question(sim, interrupt_reading)
    assert_refused(subprocess.CompletedProcess([], code, "", err), 128 + sig,
                   "confirmation question", "nothing was changed")
    assert "aborted" not in err
    assert host_tree(sim) == before


# read, poll, select, pselect6, ppoll (x86_64): how CPython waits for a line from a terminal, with or without readline
WAITING_SYSCALLS = {"0", "7", "23", "270", "271"}


def blocked_on_input(pid: int) -> bool:
    """The process sleeps in a system call waiting for its terminal (/proc/PID/syscall: number, first argument)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        call = Path(f"/proc/{pid}/syscall").read_text().split()
    except (OSError, IndexError):
        return False
    return state == "S" and bool(call) and call[0] in WAITING_SYSCALLS


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_at_start_up_exits_128_plus_the_signal_and_changes_nothing(sim, tmp_path, sig):
    """Ctrl-C (or SIGTERM, SIGHUP) while provision starts up, before it plans (under load the first 0.3 s or more):
    click turned the KeyboardInterrupt into Abort, so it printed 'aborted' and exited 1, and SIGTERM killed it
    outright; docs/exit-codes.md promises 128 + the signal wherever it arrives. The simulator holds the command
    where it opens the host (VGPU_SIM_PAUSE_AT=start), so the signal lands there whatever the load."""
    before = host_tree(sim)
    proc = provision_paused(sim, "start", tmp_path / "pause")
    os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=HANG)
    assert signalled(tmp_path / "pause") == [sig.name]
    assert_refused(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 128 + sig,
                   f"interrupted by {sig.name}", "no step was running")
    assert "aborted" not in err
    assert host_tree(sim) == before
    assert not (sim / "root/var/lib/vgpu/journal.json").exists()


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_every_step_status_says_not_in_sync_then_provision_recovers(sim, tmp_path, point):
    proc = provision_paused(sim, point, tmp_path / "pause")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=HANG)
    assert proc.returncode == -signal.SIGKILL
    index = int(point.partition(":")[0])
    human = vgpu("status", "--simulate", env={"VGPU_SIM_DIR": str(sim)})
    assert human.returncode == 1 and "NOT in sync" in human.stdout, human
    code, as_json = status_of(sim)
    assert code == 1 and as_json["in_sync"] is False, as_json
    why = as_json["unfinished_run"]
    assert PROFILE in why, why
    if point == f"{STEPS - 1}:after":
        assert "applied all its steps" in why, why
    else:
        assert f"after starting {index + 1} step(s)" in why, why
    again = vgpu("provision", "--profile", PROFILE, "--yes", "--simulate", env={"VGPU_SIM_DIR": str(sim)})
    assert again.returncode == 0, again.stderr[-2000:]
    code, as_json = status_of(sim)
    assert code == 0 and as_json["in_sync"] is True and as_json["unfinished_run"] is None, as_json


def test_end_of_input_at_the_confirmation_question_changes_nothing(sim):
    """Ctrl-D (or a terminal that closes without SIGHUP) at the question: click's Abort printed a bare
    'aborted'; now one error line saying nothing was changed, exit 1 (not confirmed), host untouched."""
    before = host_tree(sim)
    code, err = at_the_question(sim, lambda _proc, leader: os.write(leader, b"\x04"))  # the end-of-file key
    assert_refused(subprocess.CompletedProcess([], code, "", err), 1, "confirmation question", "nothing was changed")
    assert "aborted" not in err
    assert host_tree(sim) == before


def test_status_wait_reads_the_host_only_once_the_run_changing_it_has_ended(sim, tmp_path):
    """`status --wait` (the read-back of an interrupted fleet run, docs/ansible.md): with a provision holding the
    host lock, --wait 0 is refused at once (exit 7, naming the holder) and changes nothing; a longer wait answers
    only after the run has ended, so it shows the run's result, never 'a run is changing this host now'."""
    proc = provision_paused(sim, "0:before", tmp_path / "pause")
    before = host_tree(sim)
    refused = vgpu("status", "--simulate", "--json", "--wait", "0", env={"VGPU_SIM_DIR": str(sim)})
    assert_refused(refused, 7, "still locked by vgpu pid")
    assert host_tree(sim) == before
    waiting = subprocess.Popen([sys.executable, "-m", "vgpu", "status", "--simulate", "--json", "--wait", str(HANG)],
                               env=env_of(sim), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (tmp_path / "pause" / "go").touch()
    assert proc.wait(timeout=HANG) == 0
    out, err = waiting.communicate(timeout=HANG)
    doc = json.loads(out)
    assert waiting.returncode == 0 and (doc["profile"], doc["in_sync"], doc["unfinished_run"]) == \
        (PROFILE, True, None), out + err
