"""What a VMware administrator relies on (issue 25): no silent firmware switch, Dynamic DirectPath I/O
holders seen, a task never submitted twice, concurrent edits refused, release undoes only what vgpu did,
a signal's message true, the state directory trusted only when it is this user's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import GPUS, PROFILE, gpu_vms
from vgpu.sim.vcsim import EsxiSpec, VmSpec


def test_a_bios_vm_with_a_disk_is_refused_never_switched_to_efi(esxi):
    vms = gpu_vms()
    vms[3] = VmSpec("gpu-vm-03", disk_mb=2048)  # an installed BIOS guest
    host = esxi(EsxiSpec(vms=vms))
    before = host.snapshot()
    plan = host.run("plan", "--profile", PROFILE)
    assert plan.returncode == 4, plan.stdout + plan.stderr
    assert "VM gpu-vm-03: boots with BIOS firmware and has 1 virtual disk(s)" in plan.stderr
    for extra in ((), ("--force",)):  # --force does not switch it either
        r = host.run("provision", "--profile", PROFILE, "--yes", *extra)
        assert r.returncode == 4, r.stdout + r.stderr
    assert host.snapshot() == before


def _add_dynamic(host, vm_name: str, label: str = "") -> None:
    """What an administrator does for Dynamic DirectPath I/O: a device that names only the allowed ids."""
    from pyVim.task import WaitForTask
    from pyVmomi import vim
    si = host.admin()
    backing = vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo(
        allowedDevice=[vim.vm.device.VirtualPCIPassthrough.AllowedDevice(vendorId=0x1002, deviceId=0x74a1)],
        customLabel=label, deviceName="")
    spec = vim.vm.ConfigSpec(deviceChange=[vim.vm.device.VirtualDeviceSpec(
        operation="add", device=vim.vm.device.VirtualPCIPassthrough(key=-1, backing=backing))])
    WaitForTask(host.vm(si, vm_name).ReconfigVM_Task(spec))


def test_a_dynamic_directpath_holder_is_named_by_discover_plan_and_release(esxi):
    host = esxi(EsxiSpec(vms=[*gpu_vms(), VmSpec("dyn-01")]))
    _add_dynamic(host, "dyn-01", label="mi300x")
    found = [f["message"] for f in json.loads(host.run("discover", "--json").stdout)["findings"] if f["check"] == "vms"]
    assert any("VM dyn-01 (poweredOff): it can take it at power-on (Dynamic DirectPath I/O, allowed 1002:74a1, "
               "label mi300x)" in m for m in found), found
    before = host.snapshot()
    plan = host.run("plan", "--profile", PROFILE)
    assert plan.returncode == 4 and "but VM dyn-01 holds it" in plan.stderr, plan.stdout + plan.stderr
    assert host.snapshot() == before

    forced = host.run("provision", "--profile", PROFILE, "--yes", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    released = host.run("release", "--yes")  # turning passthrough off would strand dyn-01 at its next power-on
    assert released.returncode == 6 and "VM dyn-01" in released.stderr, released.stdout + released.stderr


def test_a_session_that_ends_during_a_task_waits_on_that_task_never_resubmits(esxi):
    host = esxi(EsxiSpec(vms=gpu_vms(), expire_session_on_reconfigure=["gpu-vm-00"]))
    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert host.snapshot()["gpu-vm-00"]["devices"] == [(GPUS[0], "74a1", 0x1002, host.snapshot()["gpu-vm-00"]
                                                        ["devices"][0][3])]  # one device: submitted once


def test_a_vm_changed_by_an_admin_after_vgpu_read_it_is_refused_not_overwritten(esxi, monkeypatch):
    from pyVim.task import WaitForTask
    from pyVmomi import vim

    from vgpu.errors import ApplyError
    from vgpu.esxi.connect import connect, endpoint
    from vgpu.esxi.service import EsxiTarget
    from vgpu.profiles import load_profile

    host = esxi()
    for key, value in host.env.items():
        if key.startswith("VGPU_"):
            monkeypatch.setenv(key, value)
    admin = host.admin()

    def hook(index, step, moment):  # between vgpu's read of gpu-vm-01 and its reconfigure
        if moment == "before" and getattr(step, "vm", None) == "gpu-vm-01":
            spec = vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key="admin.note", value="mine")])
            WaitForTask(host.vm(admin, "gpu-vm-01").ReconfigVM_Task(spec))
    target = EsxiTarget(connect(endpoint(host.url, ca_file=host.sim.ca_file)))
    before = host.snapshot()
    try:
        with pytest.raises(ApplyError, match="VM gpu-vm-01 was changed by someone else since vgpu read it"):
            target.provision(load_profile(PROFILE), hook=hook)
    finally:
        target.close()
    after = host.snapshot()
    assert after["gpu-vm-01"]["extra"]["admin.note"] == "mine" and not after["gpu-vm-01"]["devices"]
    after["gpu-vm-01"]["extra"].pop("admin.note")
    assert after == before  # everything else rolled back, passthrough off again


def test_release_restores_each_gpus_passthrough_state_and_names_powered_off_holders(esxi):
    host = esxi(EsxiSpec(vms=[*gpu_vms(), VmSpec("admin-vm")], enabled=[GPUS[0]]))  # the admin enabled one
    before = host.snapshot()
    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    released = host.run("release", "--yes")
    assert released.returncode == 0, released.stdout + released.stderr
    assert host.snapshot() == before  # 05:00.0 stays enabled as the admin had it; the seven others off again

    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    from test_esxi_cli import _attach_by_hand
    _attach_by_hand(host, "admin-vm", GPUS[1], mmio_gb=None)  # the admin's powered-off VM uses a vgpu GPU too
    refused = host.run("release", "--yes")
    assert refused.returncode == 6 and "VM admin-vm" in refused.stderr, refused.stdout + refused.stderr
    assert host.snapshot()["passthrough"][GPUS[1]] == (True, True)


SIGNALLED = textwrap.dedent("""
    import os, signal, sys
    from vgpu.errors import VgpuError
    from vgpu.esxi.connect import connect, endpoint
    from vgpu.esxi.service import EsxiTarget
    from vgpu.profiles import load_profile
    url, ca, signame = sys.argv[1], sys.argv[2], sys.argv[3]
    target = EsxiTarget(connect(endpoint(url, ca_file=ca)))
    def hook(index, step, moment):
        if step.kind == "attach-passthrough" and moment == "after" and step.vm == "gpu-vm-01":
            os.kill(os.getpid(), getattr(signal, signame))  # the operator presses Ctrl-C, or systemd stops it
    try:
        target.provision(load_profile(sys.argv[4]), hook=hook)
    except VgpuError as exc:
        print(exc.message)
        sys.exit(exc.exit_code)
""")


@pytest.mark.parametrize("signame,code", [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_a_signal_during_the_vm_phase_rolls_back_the_host_phase_too(esxi, signame, code):
    host = esxi()
    before = host.snapshot()
    child = subprocess.run([sys.executable, "-c", SIGNALLED, host.url, str(host.sim.ca_file), signame, PROFILE],
                           env=host.env, capture_output=True, text=True, timeout=120)
    assert child.returncode == code, child.stdout + child.stderr
    assert "the host is as it was before this run" in child.stdout and "host step(s)" in child.stdout
    assert host.snapshot() == before  # passthrough off again on all 8, no VM changed
    status = host.run("status")
    assert status.returncode == 0 and "no profile recorded" in status.stdout, status.stdout


def _host_uuid(host) -> str:
    from pyVmomi import vim
    content = host.admin().RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
    return view.view[0].hardware.systemInfo.uuid


def test_a_state_directory_someone_else_could_write_is_refused(esxi):
    host = esxi()
    before = host.snapshot()
    planted = host.state_dir / "esxi" / _host_uuid(host)
    planted.mkdir(parents=True)
    journal = {"schema": "vgpu.journal/v1", "profile": PROFILE, "steps": 1, "baseline": {}, "entries": [
        {"step": {"kind": "set-passthrough", "address": GPUS[0], "enabled": True}, "info": {"enabled": True},
         "done": True}]}
    (planted / "journal.json").write_text(json.dumps(journal))
    planted.chmod(0o777)  # a shared directory: anyone could have planted that journal
    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 5 and "is writable by others (mode 0777)" in r.stderr, r.stdout + r.stderr
    assert host.snapshot() == before and not (planted / "state.json").exists()
    if os.geteuid() == 0:  # another user's directory (needs root to make one here)
        planted.chmod(0o700)
        os.chown(planted, 65534, 65534)
        r = host.run("release", "--yes")
        assert r.returncode == 5 and "belongs to uid 65534" in r.stderr, r.stdout + r.stderr
        assert host.snapshot() == before


def test_an_unknown_record_schema_and_journal_step_kind_are_exit_5(esxi):
    host = esxi()
    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    state = host.state_dir / "esxi" / _host_uuid(host)
    record = json.loads((state / "state.json").read_text())
    (state / "state.json").write_text(json.dumps({**record, "schema": "vgpu.state/v9"}))
    r = host.run("status")
    assert r.returncode == 5 and "vgpu.state/v9" in r.stderr, r.stdout + r.stderr
    (state / "state.json").write_text(json.dumps(record))
    (state / "journal.json").write_text(json.dumps({"schema": "vgpu.journal/v1", "profile": PROFILE, "steps": 1,
                                                    "entries": [{"step": {"kind": "format-disk"}, "info": {},
                                                                 "done": False}]}))
    (state / "journal.json").chmod(0o600)
    r = host.run("release", "--yes")
    assert r.returncode == 5 and "journal" in r.stderr, r.stdout + r.stderr


def test_a_deeply_nested_previous_value_does_not_stop_release(esxi):
    from pyVim.task import WaitForTask
    from pyVmomi import vim
    host = esxi(EsxiSpec(vms=gpu_vms(1)))
    before = host.snapshot()
    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    spec = vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key="vgpu.previous", value="[" * 50000 + "]" * 50000)])
    WaitForTask(host.vm(host.admin(), "gpu-vm-00").ReconfigVM_Task(spec))  # a VM admin's edit
    r = host.run("release", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    after = host.snapshot()
    assert after["passthrough"] == before["passthrough"] and not after["gpu-vm-00"]["devices"]
    assert "vgpu.previous" not in after["gpu-vm-00"]["extra"]
