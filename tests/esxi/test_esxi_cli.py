"""discover / plan / provision / status / release / export --esxi against the vSphere API simulator."""

from __future__ import annotations

import json

from conftest import GPUS, PROFILE, gpu_vms
from vgpu.sim.vcsim import SYSTEM_ID, EsxiSpec, VmSpec


def test_discover_reports_the_gpus_in_the_inventory_schema(esxi):
    import jsonschema

    from vgpu.catalog import DEFAULT
    host = esxi()
    r = host.run("discover", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    from pathlib import Path

    import vgpu
    schema = json.loads((Path(vgpu.__file__).parent / "schemas" / "inventory-v2.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["platform"] == "esxi" and doc["source"] == "ESXi esxi-sim-01"
    assert [g["address"] for g in doc["gpus"]] == list(GPUS)  # the NVIDIA and the Radeon are not ours
    assert {g["model"] for g in doc["gpus"]} == {"MI300X"}
    assert [g["numa_node"] for g in doc["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]  # hardware.numaInfo pciId
    bar = [b for b in doc["gpus"][0]["bars"] if b["is_64bit"]][0]["size"]
    assert bar == 256 << 30 and DEFAULT.by_name("MI300X").hbm_gb == 192  # HBM rounded up to a power of two


def test_full_cycle_provision_in_sync_status_release_restores(esxi):
    host = esxi()
    before = host.snapshot()
    plan = host.run("plan", "--profile", PROFILE)
    assert plan.returncode == 3, plan.stderr
    assert "enable passthrough (DirectPath I/O) on 0000:05:00.0" in plan.stdout
    assert "attach 0000:05:00.0 to VM gpu-vm-00" in plan.stdout and "64-bit MMIO 512 GB" in plan.stdout
    assert host.snapshot() == before  # plan changes nothing

    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verified" in r.stdout
    after = host.snapshot()
    for i, gpu in enumerate(GPUS):
        assert after["passthrough"][gpu] == (True, True)
        vm = after[f"gpu-vm-{i:02d}"]
        # the backing as the API wants it: deviceId hex without 0x, the host's systemId (docs/hardware.md §6)
        assert vm["devices"] == [(gpu, "74a1", 0x1002, SYSTEM_ID)]
        assert vm["firmware"] == "efi" and vm["locked"]
        assert vm["extra"]["pciPassthru.use64bitMMIO"] == "TRUE"
        assert vm["extra"]["pciPassthru.64bitMMIOSizeGB"] == "512"  # 2 x 256 GiB BAR, a power of two
        assert vm["extra"]["vgpu.assigned"] == gpu

    again = host.run("plan", "--profile", PROFILE)
    assert again.returncode == 0 and "in sync" in again.stdout, again.stdout
    found = [f["message"] for f in json.loads(host.run("discover", "--json").stdout)["findings"] if f["check"] == "vms"]
    assert "0000:05:00.0 is in the configuration of VM gpu-vm-00 (poweredOff, attached by vgpu)" in found
    status = host.run("status", "--json")
    assert status.returncode == 0, status.stdout
    items = json.loads(status.stdout)["items"]
    assert len(items) == 8 + 16 and all(i["ok"] for i in items)

    # the VMs really start: the simulator refuses power-on when the MMIO window cannot hold the BARs
    si = host.admin()
    from pyVim.task import WaitForTask
    WaitForTask(host.vm(si, "gpu-vm-00").PowerOn())
    WaitForTask(host.vm(si, "gpu-vm-00").PowerOff())

    released = host.run("release", "--yes")
    assert released.returncode == 0, released.stdout + released.stderr
    restored = host.snapshot()
    assert restored == before  # every VM exactly as it was: devices, firmware, memory lock, extraConfig
    gone = host.run("status")
    assert gone.returncode == 0 and "no profile recorded" in gone.stdout


def test_export_writes_a_profile_that_plans_in_sync(esxi, tmp_path):
    host = esxi()
    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    out = tmp_path / "exported.yaml"
    r = host.run("export", "--name", "from-esxi", "-o", str(out))
    assert r.returncode == 0, r.stderr
    import yaml
    data = yaml.safe_load(out.read_text())
    assert data["hypervisor"] == "esxi" and data["gpu"]["mode"] == "passthrough"
    assert data["gpu"]["select"] == "all"


def test_a_host_that_activates_passthrough_at_boot_stops_with_a_pending_reboot(esxi):
    host = esxi(EsxiSpec(vms=gpu_vms(), reboot_to_apply=True))
    before = host.snapshot()
    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 3, r.stdout + r.stderr  # applied, but not finished: no surprise reboot
    assert "reboot esxi-sim-01 to activate passthrough" in r.stdout and "not finished" in r.stdout
    now = host.snapshot()
    assert all(now["passthrough"][g] == (True, False) for g in GPUS)
    assert all(now[f"gpu-vm-{i:02d}"] == before[f"gpu-vm-{i:02d}"] for i in range(8))  # no VM touched
    plan = host.run("plan", "--profile", PROFILE, "--json")
    assert plan.returncode == 3
    doc = json.loads(plan.stdout)
    assert doc["pending"] and not doc["in_sync"]
    status = host.run("status")
    assert status.returncode == 1 and "active after a reboot" in status.stdout

    again = host.run("provision", "--profile", PROFILE, "--yes", "--json")
    assert again.returncode == 3
    doc = json.loads(again.stdout)
    assert doc["plan"]["pending"] and doc["plan"]["in_sync"] is False

    host.sim.reboot()  # the operator reboots the host in a maintenance window
    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert host.run("plan", "--profile", PROFILE).returncode == 0


def test_a_powered_on_vm_is_refused_by_name_and_force_skips_it(esxi):
    vms = gpu_vms()
    vms[2] = VmSpec("gpu-vm-02", powered_on=True)
    host = esxi(EsxiSpec(vms=vms))
    before = host.snapshot()
    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "VM gpu-vm-02: is poweredOn" in r.stderr
    assert host.snapshot() == before  # refused before anything changed

    forced = host.run("provision", "--profile", PROFILE, "--yes", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "gpu-vm-02 is poweredOn: it was skipped" in forced.stdout
    after = host.snapshot()
    assert after["gpu-vm-02"] == before["gpu-vm-02"]
    assert after["gpu-vm-03"]["devices"]


def test_a_gpu_in_another_vms_configuration_is_refused_by_name(esxi):
    host = esxi(EsxiSpec(vms=[*gpu_vms(), VmSpec("legacy-01")], enabled=[GPUS[0]]))
    _attach_by_hand(host, "legacy-01", GPUS[0], mmio_gb=None)
    before = host.snapshot()
    r = host.run("plan", "--profile", PROFILE)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "0000:05:00.0" in r.stderr and "legacy-01" in r.stderr
    assert host.snapshot() == before


def test_a_vm_whose_mmio_window_is_too_small_is_fixed_so_it_powers_on(esxi):
    from pyVim.task import WaitForTask
    from pyVmomi import vim
    host = esxi(EsxiSpec(vms=gpu_vms(1), enabled=[GPUS[0]]))
    _attach_by_hand(host, "gpu-vm-00", GPUS[0], mmio_gb=256)  # the BAR alone is 256 GiB + 2 MiB
    si = host.admin()
    try:
        WaitForTask(host.vm(si, "gpu-vm-00").PowerOn())
        raise AssertionError("power-on should fail with a too small MMIO window")
    except vim.fault.GenericVmConfigFault as exc:
        assert "Module 'DevicePowerOn' power on failed" in (exc.reason or "")
    plan = host.run("plan", "--profile", "mi300x-esxi-passthrough")
    assert "set EFI firmware, all memory reserved, 64-bit MMIO 512 GB on VM gpu-vm-00" in plan.stdout
    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    WaitForTask(host.vm(si, "gpu-vm-00").PowerOn())
    assert host.vm(si, "gpu-vm-00").runtime.powerState == "poweredOn"


def test_a_task_failing_mid_run_rolls_back_every_vm_and_the_host(esxi):
    host = esxi(EsxiSpec(vms=gpu_vms(), fail_reconfigure=["gpu-vm-05"]))
    before = host.snapshot()
    r = host.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 8, r.stdout + r.stderr
    assert "injected fault: reconfiguring gpu-vm-05 failed" in r.stderr and "rolled back" in r.stderr
    assert host.snapshot() == before  # gpu-vm-00..04 put back exactly, passthrough off again
    assert host.run("status").returncode == 0  # nothing recorded


def test_wrong_credentials_are_one_line_and_never_echo_the_password(esxi):
    host = esxi()
    r = host.run("plan", "--profile", PROFILE, env={"VGPU_ESXI_PASSWORD": "hunter2-wrong"})
    assert r.returncode == 9
    assert r.stderr.startswith("error: 127.0.0.1:") and "not accepted" in r.stderr
    assert "hunter2" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    missing = host.run("discover", env={"VGPU_ESXI_PASSWORD": ""})
    assert missing.returncode == 5 and "no password" in missing.stderr
    in_url = host.run("discover", tls=["--esxi", host.url.replace("https://", "https://root:pw@"), "--insecure"])
    assert in_url.returncode == 5 and "credentials" in in_url.stderr and "pw" not in in_url.stderr.split("error")[0]


def test_password_file_is_read_safely(esxi, tmp_path):
    host = esxi()
    good = tmp_path / "pw"
    good.write_text(host.sim.spec.password + "\n")
    good.chmod(0o600)
    ok = host.run("discover", "--esxi-password-file", str(good), env={"VGPU_ESXI_PASSWORD": ""})
    assert ok.returncode == 0, ok.stderr
    for bad in ("/dev/zero", str(tmp_path)):
        r = host.run("discover", "--esxi-password-file", bad, env={"VGPU_ESXI_PASSWORD": ""}, timeout=20)
        assert r.returncode == 5 and r.stderr.startswith("error:"), (bad, r.stderr)
    import os
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = host.run("discover", "--esxi-password-file", str(fifo), env={"VGPU_ESXI_PASSWORD": ""}, timeout=20)
    assert r.returncode == 5


def test_hostile_ca_files_are_refused_without_hanging(esxi, tmp_path):
    import os
    host = esxi()
    fifo = tmp_path / "ca-fifo"
    os.mkfifo(fifo)
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"\x00\xff" * 1000)
    for bad in (str(fifo), "/dev/zero", str(junk), str(tmp_path / "missing.pem")):
        r = host.run("discover", tls=["--esxi", host.url, "--esxi-ca", bad], timeout=20)
        assert r.returncode == 5 and r.stderr.startswith("error:") and "Traceback" not in r.stderr, (bad, r.stderr)


def test_tls_is_verified_by_default_pinning_and_insecure_are_explicit(esxi):
    host = esxi()
    untrusted = host.run("discover", tls=["--esxi", host.url])
    assert untrusted.returncode == 9 and "not trusted" in untrusted.stderr
    pinned = host.run("discover", tls=["--esxi", host.url, "--esxi-thumbprint", host.sim.thumbprint])
    assert pinned.returncode == 0, pinned.stderr
    wrong = "00:" * 31 + "00"
    mismatch = host.run("discover", tls=["--esxi", host.url, "--esxi-thumbprint", wrong])
    assert mismatch.returncode == 9 and "not the pinned one" in mismatch.stderr
    malformed = host.run("discover", tls=["--esxi", host.url, "--esxi-thumbprint", "abc"])
    assert malformed.returncode == 5
    insecure = host.run("discover", tls=["--esxi", host.url, "--insecure"])
    assert insecure.returncode == 0 and "not verified (--insecure)" in insecure.stderr


def test_unreachable_host_old_api_and_maintenance_mode_are_one_sentence(esxi, tmp_path):
    host = esxi()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = host.run("discover", tls=["--esxi", f"https://127.0.0.1:{port}", "--insecure"])
    assert down.returncode == 9 and "cannot connect" in down.stderr

    old = esxi(EsxiSpec(vms=gpu_vms(1), api_version="7.0.3.0"))
    r = old.run("plan", "--profile", PROFILE)
    assert r.returncode == 4 and "needs ESXi 8.0" in r.stderr

    # maintenance mode is the administrator's change window (issue 25 item 9): prepared, with a warning
    maint = esxi(EsxiSpec(vms=gpu_vms(1), maintenance=True))
    r = maint.run("provision", "--profile", PROFILE, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "esxi-sim-01 is in maintenance mode: vgpu prepares the host and the powered-off VMs" in r.stdout
    assert maint.snapshot()["gpu-vm-00"]["devices"]


def test_profiles_cross_platform_are_refused_with_where_to_run_them(esxi):
    host = esxi()
    r = host.run("plan", "--profile", "mi300x-passthrough")
    assert r.returncode == 4 and "is for kvm" in r.stderr and "hypervisor: esxi" in r.stderr


def _attach_by_hand(host, vm_name: str, address: str, mmio_gb: int | None) -> None:
    """What an administrator does without vgpu (vSphere client): a passthrough device, maybe an MMIO size."""
    from pyVim.task import WaitForTask
    from pyVmomi import vim
    si = host.admin()
    vm = host.vm(si, vm_name)
    target = vm.environmentBrowser.QueryConfigTarget(None)
    p = next(x for x in target.pciPassthrough if x.pciDevice.id == address)
    backing = vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo(
        id=address, deviceId=format(p.pciDevice.deviceId & 0xFFFF, "x"), vendorId=p.pciDevice.vendorId,
        systemId=p.systemId, deviceName=p.pciDevice.deviceName)
    spec = vim.vm.ConfigSpec(deviceChange=[vim.vm.device.VirtualDeviceSpec(
        operation="add", device=vim.vm.device.VirtualPCIPassthrough(key=-1, backing=backing))])
    if mmio_gb:
        spec.extraConfig = [vim.option.OptionValue(key="pciPassthru.use64bitMMIO", value="TRUE"),
                            vim.option.OptionValue(key="pciPassthru.64bitMMIOSizeGB", value=str(mmio_gb))]
        spec.memoryReservationLockedToMax = True
        spec.firmware = "efi"
    WaitForTask(vm.ReconfigVM_Task(spec))


def test_metrics_of_an_esxi_host(esxi):
    from prometheus_client.parser import text_string_to_metric_families
    from pyVim.task import WaitForTask
    host = esxi()
    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    WaitForTask(host.vm(host.admin(), "gpu-vm-03").PowerOn())
    r = host.run("metrics")
    assert r.returncode == 0, r.stderr
    fams = {f.name: f.samples for f in text_string_to_metric_families(r.stdout)}
    modes = {s.labels["gpu"]: (s.labels["mode"], s.labels["platform"]) for s in fams["vgpu_gpu_info"]}
    assert modes == {g: ("passthrough", "esxi") for g in GPUS}
    held = {(s.labels["function"], s.labels["vm"]) for s in fams["vgpu_function_in_use"]}
    assert held == {(GPUS[3], "gpu-vm-03")}
    assert [s.value for s in fams["vgpu_profile_in_sync"]] == [1.0]


def test_discover_shows_the_checks_and_release_says_released(esxi):
    host = esxi(EsxiSpec(vms=gpu_vms(1)))
    shown = host.run("discover")
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout.split("Host readiness", 1)[1]  # issue 20: it was printed with no row at all
    assert "VMware ESXi 8.0.3" in table and "vSphere API 8.0.3.0" in table
    assert host.run("provision", "--profile", PROFILE, "--yes").returncode == 0
    released = host.run("release", "--yes")
    assert released.returncode == 0, released.stderr
    assert released.stdout.rstrip().endswith("ESXi esxi-sim-01 is released (read back from the host)")
    assert "(release)" not in released.stdout


def test_the_line_vgpu_sim_esxi_prints_works_when_pasted(tmp_path, vcsim_binary):
    import os
    import shlex
    import signal
    import subprocess
    import sys

    from conftest import REPO
    env = {k: v for k, v in os.environ.items() if not k.startswith("VGPU_")}
    env.update(PYTHONPATH=str(REPO), VGPU_STATE_DIR=str(tmp_path / "state"))
    sim = subprocess.Popen([sys.executable, "-m", "vgpu", "sim", "esxi", "--dir", str(tmp_path / "sim"),
                            "--vm", "gpu-vm-00"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = sim.stderr.readline()  # printed once it serves
        assert "reach it with" in line, line
        args = shlex.split(line.split("reach it with", 1)[1])
        r = subprocess.run([sys.executable, "-m", "vgpu", "discover", *args], capture_output=True, text=True,
                           env=env, timeout=120)
        assert r.returncode == 0, r.stderr  # it was exit 9: the user defaulted to root
    finally:
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=60)


def test_the_hosts_own_version_and_connection_state_are_checked_not_the_endpoints(esxi):
    old_host = esxi(EsxiSpec(vms=gpu_vms(1), api_version="7.0.3.0", vcenter_api_version="8.0.3.0"))
    r = old_host.run("plan", "--profile", PROFILE)  # an ESXi 7 host behind a vCenter 8
    assert r.returncode == 4 and "host esxi-sim-01 runs vSphere API 7.0.3.0 (VMware ESXi 7.0.3" in r.stderr, r.stderr
    shown = esxi(EsxiSpec(vms=gpu_vms(1), vcenter_api_version="8.0.2.0")).run("discover")
    assert "VMware ESXi 8.0.3" in shown.stdout and "vCenter" not in shown.stdout, shown.stdout
    lost = esxi(EsxiSpec(vms=gpu_vms(1), connection_state="notResponding"))
    r = lost.run("discover")
    assert r.returncode == 9 and "host esxi-sim-01 is notResponding" in r.stderr, r.stderr
