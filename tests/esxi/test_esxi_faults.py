"""Crashes and dropped sessions in the middle of an ESXi provision."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import GPUS, PROFILE

CHILD = textwrap.dedent("""
    import os, signal, sys
    from vgpu.esxi.connect import connect, endpoint
    from vgpu.esxi.service import EsxiTarget
    from vgpu.profiles import load_profile
    url, ca, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    target = EsxiTarget(connect(endpoint(url, ca_file=ca)))
    attached = []
    def hook(index, step, moment):
        if step.kind == "attach-passthrough" and moment == "after":
            attached.append(step.vm)
            if len(attached) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # a crash: no rollback, the journal stays
    target.provision(load_profile(sys.argv[4]), hook=hook)
""")


def test_a_crash_mid_run_is_rolled_back_by_the_next_run(esxi):
    host = esxi()
    before = host.snapshot()
    # killed after the second VM got its GPU (the host's passthrough round had completed)
    child = subprocess.run([sys.executable, "-c", CHILD, host.url, str(host.sim.ca_file), "2", PROFILE],
                           env=host.env, capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr
    mid = host.snapshot()
    assert mid["gpu-vm-00"]["devices"] and mid["gpu-vm-01"]["devices"] and not mid["gpu-vm-02"]["devices"]

    status = host.run("status")
    assert status.returncode == 1 and "interrupted" in (status.stdout + status.stderr)
    release = host.run("release", "--dry-run")
    assert release.returncode in (0, 3)

    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recovered" in r.stdout and "undid" in r.stdout
    assert host.run("plan", "--profile", PROFILE).returncode == 0
    assert host.run("release", "--yes").returncode == 0
    assert host.snapshot() == before


def test_a_session_dropped_mid_run_logs_in_again_and_finishes(esxi, monkeypatch):
    from vgpu.esxi.connect import connect, endpoint
    from vgpu.esxi.service import EsxiTarget
    from vgpu.profiles import load_profile

    host = esxi()
    for key, value in host.env.items():
        if key.startswith("VGPU_"):
            monkeypatch.setenv(key, value)
    target = EsxiTarget(connect(endpoint(host.url, ca_file=host.sim.ca_file)))
    admin = host.admin()
    dropped = []

    def hook(index, step, moment):
        if moment == "after" and not dropped:  # an administrator ends every other session
            manager = admin.RetrieveContent().sessionManager
            mine = manager.currentSession.key
            others = [s.key for s in manager.sessionList if s.key != mine]
            manager.TerminateSession(others)
            dropped.extend(others)
    try:
        result = target.provision(load_profile(PROFILE), hook=hook)
    finally:
        target.close()
    assert dropped, "no session was terminated"
    assert not result.pending and len(result.outcome.applied) == 8 + 8 + 1
    after = host.snapshot()
    assert all(after[f"gpu-vm-{i:02d}"]["devices"][0][0] == gpu for i, gpu in enumerate(GPUS))


def test_the_host_going_away_is_one_line_and_the_journal_is_kept(esxi):
    host = esxi()
    child = subprocess.run([sys.executable, "-c", CHILD.replace("os.kill(os.getpid(), signal.SIGKILL)",
                                                                "os.kill(int(os.environ['VCSIM_PID']), signal.SIGKILL)"),
                            host.url, str(host.sim.ca_file), "2", PROFILE],
                           env={**host.env, "VCSIM_PID": str(host.sim.proc.pid)}, capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 1
    assert "stopped answering" in child.stderr or "cannot connect" in child.stderr, child.stderr[-2000:]
    journal = host.state_dir / "esxi"
    assert any(journal.rglob("journal*")), "the journal must stay for the next run to roll back"


def test_a_missing_privilege_is_one_line_naming_the_privilege_and_the_object(esxi):
    from vgpu.sim.vcsim import EsxiSpec
    from conftest import gpu_vms
    for method, privilege, obj in (("UpdatePassthruConfig", "Host.Config.PciPassthru", "HostPciPassthruSystem"),
                                   ("ReconfigVM_Task", "VirtualMachine.Config.AddRemoveDevice", "VirtualMachine vm-")):
        host = esxi(EsxiSpec(vms=gpu_vms(2), deny={method: privilege}))
        before = host.snapshot()
        r = host.run("provision", "--profile", PROFILE, "--yes")
        assert r.returncode == 8, r.stdout + r.stderr
        error = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(error) == 1 and f"user vgpu-operator lacks the privilege {privilege} on {obj}" in error[0], r.stderr
        assert "rolled back" in error[0] and "vmodl" not in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) <= 3, r.stderr  # the line, its hint: no pyVmomi dump
        assert host.snapshot() == before


def test_a_full_state_disk_mid_run_rolls_the_host_back_and_says_so(esxi, tmp_path):
    """The journal is saved before each step; when it cannot be (ENOSPC on a 12 KiB tmpfs: the lock and one
    4 KiB journal fit, the journal's atomic replace past 4 KiB does not), the steps already applied are rolled
    back all the same and the message says so (it said only 'cannot write journal.json', host changed)."""
    import pytest
    host = esxi()
    mnt = host.state_dir
    mnt.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        before = host.snapshot()
        r = host.run("provision", "--profile", PROFILE, "--yes")
        assert r.returncode == 8, r.stdout + r.stderr
        assert "No space left on device" in r.stderr and "rolled back" in r.stderr, r.stderr
        assert host.snapshot() == before
        status = host.run("status")
        assert status.returncode == 0 and "interrupted" not in status.stdout + status.stderr, status.stdout
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_task_that_never_ends_is_reported_by_reference_and_never_blindly_rolled_back(esxi):
    from vgpu.sim.vcsim import EsxiSpec
    from conftest import gpu_vms
    host = esxi(EsxiSpec(vms=gpu_vms(2), hang_reconfigure=["gpu-vm-01"]))
    r = host.run("provision", "--profile", PROFILE, "--yes", env={"VGPU_ESXI_TASK_TIMEOUT": "1"})
    assert r.returncode == 9, r.stdout + r.stderr
    assert "ESXi esxi-sim-01: task task-" in r.stderr and "is still running after 1 s" in r.stderr, r.stderr
    assert "did not roll back" in r.stderr and "Traceback" not in r.stderr
    mid = host.snapshot()
    assert mid["gpu-vm-00"]["devices"] and mid["passthrough"][GPUS[0]] == (True, True)  # not raced by an undo
    assert any((host.state_dir / "esxi").rglob("journal.json"))
    status = host.run("status")
    assert status.returncode == 1 and "interrupted" in status.stdout + status.stderr


def test_a_journal_restore_names_the_hosts_systemid_now_not_the_saved_one(esxi):
    """After an ESXi reinstall the host's systemId changes; a journal written before names the old one, and a
    backing with it is refused by ESXi. The restore puts the device back with the systemId the host has now."""
    import json

    from conftest import gpu_vms
    from vgpu.model.plan import AttachPassthrough
    from vgpu.model.pci import PciAddress
    from vgpu.sim.vcsim import SYSTEM_ID, EsxiSpec
    host = esxi(EsxiSpec(vms=gpu_vms(1), enabled=[GPUS[0]]))
    from test_esxi_admin import _host_uuid
    state = host.state_dir / "esxi" / _host_uuid(host)
    state.mkdir(parents=True, mode=0o700)
    state.parent.chmod(0o700)
    saved = {"firmware": "efi", "locked": True, "extra": {}, "devices": [
        {"id": GPUS[0], "deviceId": "74a1", "vendorId": 0x1002, "systemId": "00000000-stale-after-reinstall",
         "deviceName": "MI300X"}]}
    step = AttachPassthrough("gpu-vm-00", (PciAddress.parse(GPUS[1]),), 512)
    journal = {"schema": "vgpu.journal/v1", "pid": 1, "profile": PROFILE, "steps": 2, "baseline": {},
               "entries": [{"step": step.to_dict(), "info": {"saved": json.dumps(saved), "version": ""},
                            "done": False}]}
    (state / "journal.json").write_text(json.dumps(journal))
    (state / "journal.json").chmod(0o600)
    r = host.run("release", "--yes")
    assert "undid" in r.stdout, r.stdout + r.stderr
    assert host.snapshot()["gpu-vm-00"]["devices"] == [(GPUS[0], "74a1", 0x1002, SYSTEM_ID)]
