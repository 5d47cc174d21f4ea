"""Reviewing a change before a maintenance window, and the questions provision asks before it disrupts."""

import json
import os
import pty
import select
import subprocess
import sys

import pytest

from vgpu.errors import ApplyError
from vgpu.profiles import load_profile
from vgpu.provision import provision

from conftest import REPO, hypervisor_of, inventory, run_cli, target_of


def _sim_args(host):
    return ("--simulate", "--sim-dir", str(host.state_dir))


def test_plan_and_status_on_a_snapshot_and_a_sysfs_capture_match_the_live_host(sim, tmp_path):
    host = sim()
    snap = tmp_path / "before.tar.gz"
    run_cli("host", "snapshot", "-o", str(snap), *_sim_args(host), sim_dir=host.state_dir, check_rc=0)
    pending = json.loads(run_cli("plan", "--profile", "mi300x-4vf", "--json", "--snapshot", str(snap),
                                 sim_dir=host.state_dir, check_rc=3).stdout)
    live = json.loads(run_cli("plan", "--profile", "mi300x-4vf", "--json", *_sim_args(host),
                              sim_dir=host.state_dir, check_rc=3).stdout)
    assert [s["description"] for s in pending["steps"]] == [s["description"] for s in live["steps"]]
    provision(target_of(host), load_profile("mi300x-4vf"))
    snap2 = tmp_path / "after.tar.gz"
    run_cli("host", "snapshot", "-o", str(snap2), *_sim_args(host), sim_dir=host.state_dir, check_rc=0)
    # everything plan and status read of /etc travels in the snapshot: the capture is in sync too
    run_cli("plan", "--profile", "mi300x-4vf", "--snapshot", str(snap2), sim_dir=host.state_dir, check_rc=0)
    status = json.loads(run_cli("status", "--json", "--snapshot", str(snap2), sim_dir=host.state_dir,
                                check_rc=0).stdout)
    assert status["profile"] == "mi300x-4vf" and status["in_sync"]
    run_cli("plan", "--profile", "mi300x-4vf", "--sysfs-root", str(host.root / "sys"), sim_dir=host.state_dir,
            check_rc=0)


def test_a_capture_can_be_dry_run_but_never_changed(sim, tmp_path):
    host = sim()
    snap = tmp_path / "s.tar.gz"
    run_cli("host", "snapshot", "-o", str(snap), *_sim_args(host), sim_dir=host.state_dir, check_rc=0)
    run_cli("provision", "--profile", "mi300x-4vf", "--dry-run", "--snapshot", str(snap), sim_dir=host.state_dir,
            check_rc=3)
    proc = run_cli("provision", "--profile", "mi300x-4vf", "--yes", "--snapshot", str(snap),
                   sim_dir=host.state_dir, check_rc=5)
    assert "is a capture: it can be read, not changed" in proc.stderr


def test_sysfs_capture_without_etc_never_reads_this_machines_etc(sim, tmp_path):
    host = sim()
    capture = tmp_path / "capture"
    capture.mkdir()
    os.symlink(host.root / "sys", capture / "sys")  # a bare sysfs tree: no etc/ beside it
    proc = run_cli("plan", "--profile", "mi300x-4vf", "--sysfs-root", str(capture / "sys"), sim_dir=host.state_dir,
                   check_rc=3)
    assert "has no etc/ beside it" in proc.stdout + proc.stderr


def test_dry_run_shows_the_plan_and_changes_nothing(sim):
    host = sim()
    before = inventory(host)
    proc = run_cli("provision", "--profile", "mi300x-4vf", "--dry-run", *_sim_args(host), sim_dir=host.state_dir,
                   check_rc=3)
    assert "reload gim with" in proc.stdout
    assert inventory(host).gpus == before.gpus
    assert not (host.root / "etc/gim_config").exists()


def test_disruptive_plan_without_yes_and_without_a_terminal_is_not_applied(sim):
    host = sim()
    before = inventory(host)
    proc = run_cli("provision", "--profile", "mi300x-4vf", *_sim_args(host), sim_dir=host.state_dir, check_rc=1)
    assert "no terminal is attached to confirm it" in proc.stderr
    assert inventory(host).gpus == before.gpus


def _run_on_a_terminal(args, answer: str, env: dict) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "vgpu", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=REPO, env=env, close_fds=True)
    os.close(slave)
    out, answered = b"", False
    while True:
        ready, _, _ = select.select([master], [], [], 600)  # a hang guard: silence that long is a hang
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"Apply these disruptive steps?" in out:
            os.write(master, answer.encode() + b"\n")
            answered = True
    os.close(master)
    return proc.wait(timeout=600), out.decode(errors="replace")


@pytest.mark.parametrize("answer, rc", [("n", 1), ("y", 0)])
def test_the_question_on_a_terminal_decides(sim, answer, rc):
    host = sim()
    before = inventory(host)
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", COLUMNS="200")
    code, out = _run_on_a_terminal(("provision", "--profile", "mi300x-4vf", *_sim_args(host)), answer, env)
    assert "Apply these disruptive steps?" in out
    assert code == rc, out[-1500:]
    changed = inventory(host).gpus != before.gpus
    assert changed is (answer == "y")


def test_release_refuses_while_a_running_vm_holds_a_vf(sim):
    host = sim()
    target = target_of(host)
    provision(target, load_profile("mi300x-4vf"))
    vf = inventory(host).gpus[6].vfs[1].address
    hypervisor_of(host).define_domain("infer-03", [vf], running=True)
    before = inventory(host)
    proc = run_cli("release", "--yes", *_sim_args(host), sim_dir=host.state_dir, check_rc=6)
    assert "infer-03" in proc.stderr
    assert inventory(host).gpus == before.gpus and (host.root / "etc/gim_config").exists()


def test_vfs_that_never_appear_time_out_with_a_clear_message_and_roll_back(sim):
    host = sim()
    target = target_of(host)
    before = inventory(host)

    def sabotage(i, step, moment):  # someone rewrites gim_config between our write and the reload
        if step.kind == "write-file" and step.path == "gim_config" and moment == "after":
            (host.root / "etc/gim_config").write_text("vf_num=1\nmemory_partition_mode=1\n")

    with pytest.raises(ApplyError, match=r"gim did not create 4 VF\(s\) on 0000:05:00.0 within 0.5 s \(it has 1\)") as info:
        provision(target, load_profile("mi300x-4vf"), hook=sabotage, vf_timeout=0.5)
    assert "rolled back" in info.value.message and "dmesg" in info.value.hint
    assert inventory(host).gpus == before.gpus


def test_verification_that_finds_a_difference_rolls_everything_back(sim):
    host = sim()
    target = target_of(host)
    before = inventory(host)
    plan_len = {}

    def drift(i, step, moment):  # a config file changed behind our back after we wrote it
        plan_len["n"] = i
        if step.kind == "write-file" and step.path == "modprobe.d/vgpu.conf" and moment == "after":
            (host.root / "etc/modprobe.d/vgpu.conf").write_text("# edited by hand\n")

    with pytest.raises(ApplyError, match="verification failed") as info:
        provision(target, load_profile("mi300x-4vf"), hook=drift)
    assert f"rolled back {plan_len['n'] + 1} step(s)" in info.value.message
    assert inventory(host).gpus == before.gpus
    assert not (host.root / "etc/gim_config").exists()


def test_snapshot_of_a_host_with_masked_config_files_opens(sim, tmp_path):
    # `ln -s /dev/null /etc/modules-load.d/x.conf` masks a file; an absolute link must not break the archive
    host = sim()
    os.symlink("/dev/null", host.root / "etc/modprobe.d/masked.conf")
    (host.root / "etc/modules-load.d").mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/null", host.root / "etc/modules-load.d/masked.conf")
    snap = tmp_path / "s.tar.gz"
    run_cli("host", "snapshot", "-o", str(snap), *_sim_args(host), sim_dir=host.state_dir, check_rc=0)
    run_cli("plan", "--profile", "mi300x-4vf", "--snapshot", str(snap), sim_dir=host.state_dir, check_rc=3)


def test_plan_as_a_normal_user_says_what_it_could_not_see(sim, monkeypatch):
    from vgpu.host.paths import HostPaths
    from vgpu.host.target import HostTarget
    from vgpu.provision import plan_profile
    import vgpu.provision
    host = sim()
    monkeypatch.setattr(vgpu.provision.os, "geteuid", lambda: 1000)
    as_if_live = HostTarget(HostPaths.under(host.root, label="this host"))  # neither simulated nor a capture
    warnings = plan_profile(as_if_live, load_profile("mi300x-4vf")).warnings
    assert any("not running as root" in w for w in warnings)
