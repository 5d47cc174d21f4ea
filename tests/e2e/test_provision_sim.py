"""Provisioning simulated hosts: every shipped KVM profile converges, re-plans to zero, and says what it disrupts."""

import json

import pytest

from vgpu.errors import InUseError, RefusedError
from vgpu.planner import Refusal
from vgpu.profiles import load_profile
from vgpu.provision import plan_profile, provision, release

from conftest import hypervisor_of, inventory, kvm_profiles, machine_for, run_cli, target_of


def test_every_shipped_kvm_profile_is_covered():
    # the parametrized tests below run each of these on the machine it fits; a new shipped profile joins them
    assert {"mi300x-1vf", "mi300x-4vf", "mi300x-8vf", "mi300x-passthrough", "mi325x-1vf", "mi355x-1vf",
            "mi355x-passthrough"} <= set(kvm_profiles())


@pytest.mark.parametrize("name", kvm_profiles())
def test_shipped_profile_provisions_verifies_and_replans_to_zero(sim, name, tmp_path):
    host = sim(machine_for(name, tmp_path))
    target = target_of(host)
    profile = load_profile(name)
    result = provision(target, profile)
    assert result.outcome is not None and result.outcome.applied
    inv = inventory(host)
    assert inv.gpus and all(g.model == profile.gpu.model for g in inv.gpus)
    if profile.gpu.mode.value == "passthrough":
        assert all(g.driver == "vfio-pci" and not g.vfs for g in inv.gpus)
        for g in inv.gpus:
            assert (host.root / "dev" / "vfio" / str(g.iommu_group.number)).exists()
    else:
        want = profile.gpu.vfs_per_gpu
        assert all(g.driver == "gim" and len(g.vfs) == want for g in inv.gpus)
        assert all(vf.driver == "vfio-pci" for g in inv.gpus for vf in g.vfs)
        assert all(g.partition.compute == profile.gpu.compute_partition.value for g in inv.gpus)
        assert all(g.partition.memory == profile.gpu.memory_partition.value for g in inv.gpus)
    assert plan_profile(target, profile).plan.in_sync
    assert provision(target, profile).outcome is None  # nothing to do the second time


def test_esxi_profile_is_refused_on_a_kvm_host_and_changes_nothing(sim):
    host = sim()
    before = inventory(host)
    proc = run_cli("provision", "--profile", "mi300x-esxi-passthrough", "--yes", "--simulate", "--sim-dir",
                   str(host.state_dir), sim_dir=host.state_dir, check_rc=4)
    assert "VMware ESXi 8" in proc.stderr + proc.stdout
    assert inventory(host).gpus == before.gpus


def test_passthrough_refused_while_gim_drives_the_pfs(sim):
    with pytest.raises(Refusal, match="gim drives this PF"):
        plan_profile(target_of(sim()), load_profile("mi300x-passthrough"))


def test_standard_firmware_refuses_multi_vf_with_firmware_hint(sim):
    with pytest.raises(Refusal) as info:
        plan_profile(target_of(sim("8xmi300x-fw1")), load_profile("mi300x-4vf"))
    assert "exceed this PF's TotalVFs of 1" in str(info.value) and "multi-VF firmware" in info.value.hint


def test_wrong_model_profile_is_refused(sim):
    with pytest.raises(RefusedError):
        plan_profile(target_of(sim("8xmi325x")), load_profile("mi300x-4vf"))


def test_export_then_plan_of_the_export_is_in_sync(sim, tmp_path):
    host = sim()
    target = target_of(host)
    provision(target, load_profile("mi300x-4vf"))
    out = tmp_path / "exported.yaml"
    run_cli("export", "--simulate", "--sim-dir", str(host.state_dir), "--name", "node-17", "-o", str(out),
            sim_dir=host.state_dir, check_rc=0)
    assert "vfs_per_gpu: 4" in out.read_text()
    assert plan_profile(target, load_profile(str(out))).plan.in_sync


def test_release_returns_to_default_and_removes_persistence(sim):
    host = sim()
    target = target_of(host)
    before = inventory(host)
    provision(target, load_profile("mi300x-4vf"))
    assert (host.root / "etc/systemd/system/vgpu-reapply.service").exists()
    release(target)
    assert inventory(host).gpus == before.gpus
    assert not (host.root / "etc/systemd/system/vgpu-reapply.service").exists()
    assert not (host.root / "etc/gim_config").exists()
    assert release(target).outcome is None  # released twice: nothing to do


def test_process_holding_a_vf_blocks_the_reload_without_force(sim):
    host = sim()
    target = target_of(host)
    provision(target, load_profile("mi300x-1vf"))
    vf = inventory(host).gpus[0].vfs[0]
    host.add_holder(vf.iommu_group.number, "qemu-system-x86")
    before = inventory(host)
    with pytest.raises(InUseError, match="qemu-system-x86"):
        provision(target, load_profile("mi300x-4vf"))
    assert inventory(host).gpus == before.gpus


def test_plan_names_holders_and_every_vf_of_a_host_wide_reload(sim):
    host = sim()
    target = target_of(host)
    vf = inventory(host).gpus[3].vfs[0]
    host.add_holder(vf.iommu_group.number, "qemu-kvm")
    plan = plan_profile(target, load_profile("mi300x-4vf")).plan
    reload = next(s for s in plan.steps if s.kind == "reload-gim")
    assert reload.disruption.host_wide and len(reload.disruption.functions) == 8
    assert any("qemu-kvm" in h for h in plan.holders())


def test_recorded_profile_reapplies_after_a_simulated_reboot(sim):
    host = sim()
    target = target_of(host)
    provision(target, load_profile("mi300x-4vf"))
    host.kernel.unload_module("gim")  # what a reboot does to the VFs
    host.kernel.load_module("gim")  # modules-load.d brings gim back, reading /etc/gim_config
    run_cli("status", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=1)
    run_cli("provision", "--recorded", "--yes", "--simulate", "--sim-dir", str(host.state_dir),
            sim_dir=host.state_dir, check_rc=0)
    run_cli("status", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=0)


def test_plan_output_names_every_vf_and_vm_a_reload_takes_away(sim):
    # an SRE reads this before a maintenance window: the table abbreviates, the list below it must not
    host = sim()
    target = target_of(host)
    provision(target, load_profile("mi300x-1vf"))
    vfs = [vf.address for g in inventory(host).gpus for vf in g.vfs]
    hypervisor_of(host).define_domain("train-07", [vfs[5]], running=True)
    proc = run_cli("plan", "--profile", "mi300x-4vf", "--simulate", "--sim-dir", str(host.state_dir),
                   sim_dir=host.state_dir, check_rc=3)
    section = proc.stdout.split("disrupts (host-wide", 1)[1]
    assert all(f"  - {a}\n" in section for a in vfs), proc.stdout
    assert "VM train-07 (loses its device)" in section
    plan = json.loads(run_cli("plan", "--profile", "mi300x-4vf", "--json", "--simulate", "--sim-dir",
                              str(host.state_dir), sim_dir=host.state_dir, check_rc=3).stdout)
    reload = next(s for s in plan["steps"] if s["kind"] == "reload-gim")
    assert sorted(reload["disruption"]["functions"]) == sorted(str(a) for a in vfs)
    assert reload["disruption"]["vms"] == ["train-07"]


@pytest.mark.parametrize("change, state", [("remove", "missing"), ("edit", "changed")])
def test_status_reports_a_config_file_changed_behind_its_back(sim, change, state):
    host = sim()
    provision(target_of(host), load_profile("mi300x-4vf"))
    conf = host.root / "etc/modprobe.d/vgpu.conf"
    if change == "remove":
        conf.unlink()
    else:
        conf.write_text(conf.read_text() + "options gim vf_num=1\n")
    proc = run_cli("status", "--json", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir,
                   check_rc=1)
    items = {i["what"]: i for i in json.loads(proc.stdout)["items"] if i["subject"] == "host"}
    assert items["/etc/modprobe.d/vgpu.conf"]["actual"] == state
    assert items["/etc/gim_config"]["ok"] and items["/etc/modules-load.d/vgpu.conf"]["ok"]


@pytest.mark.parametrize("name", ["mi300x-4vf", "mi300x-8vf", "mi300x-1vf"])
def test_plan_names_each_vms_functions_before_gim_creates_them(sim, name):
    # VF addresses come from each PF's SR-IOV offset and stride; the prediction must match what appears
    host = sim()
    target = target_of(host)
    profile = load_profile(name)
    predicted = plan_profile(target, profile).plan.vms
    provision(target, profile)
    vfs = [vf for g in inventory(host).gpus for vf in g.vfs]
    actual = tuple((vm, tuple(fns)) for vm, fns in profile.vm_assignment(vfs).items())
    assert predicted == actual and len(predicted) == len(vfs) // profile.vms.vfs_per_vm


@pytest.mark.parametrize("base, vms, message", [
    ("mi300x-8vf", {"assign": {"train-01": ["0000:99:02.0"]}, "vfs_per_vm": None, "name_pattern": None},
     "assigns 0000:99:02.0 to VM train-01, but it is not one of the 64 VFs"),
    ("mi300x-4vf", {"vfs_per_vm": 32, "numa_policy": "required"}, "NUMA policy required: NUMA node 0 has 16 VFs"),
])
def test_profile_whose_vms_cannot_be_assigned_on_this_host_is_refused(sim, tmp_path, base, vms, message):
    import yaml
    host = sim()
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"version": "v1", "name": "vm-test", "extends": base, "vms": vms}))
    before = inventory(host)
    proc = run_cli("plan", "--profile", str(path), "--json", "--simulate", "--sim-dir", str(host.state_dir),
                   sim_dir=host.state_dir, check_rc=4)
    problems = json.loads(proc.stdout)["problems"]
    assert any(p["subject"] == "vms" and message in p["message"] for p in problems), problems
    run_cli("provision", "--profile", str(path), "--yes", "--simulate", "--sim-dir", str(host.state_dir),
            sim_dir=host.state_dir, check_rc=4)
    assert inventory(host).gpus == before.gpus


def test_export_after_provisioning_part_of_the_gpus_describes_that_part(sim, tmp_path):
    import yaml
    host = sim()
    target = target_of(host)
    part = tmp_path / "part.yaml"
    part.write_text(yaml.safe_dump({"version": "v1", "name": "half", "extends": "mi300x-4vf",
                                    "gpu": {"select": {"count": 4}}}))
    provision(target, load_profile(str(part)))
    out = tmp_path / "exported.yaml"
    run_cli("export", "--simulate", "--sim-dir", str(host.state_dir), "-o", str(out), sim_dir=host.state_dir,
            check_rc=0)
    exported = yaml.safe_load(out.read_text())
    assert exported["gpu"]["select"] == {"addresses": ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0",
                                                       "0000:65:00.0"]}
    assert plan_profile(target, load_profile(str(out))).plan.in_sync


def test_a_process_holding_a_vfs_iommufd_cdev_blocks_the_reload(sim):
    # QEMU with iommufd opens /dev/vfio/devices/vfioN, not /dev/vfio/<group>; the kernel links the
    # function to it through <device>/vfio-dev/vfioN
    import os
    from vgpu.host.holders import function_holders
    host = sim()
    target = target_of(host)
    provision(target, load_profile("mi300x-1vf"))
    vf = inventory(host).gpus[2].vfs[0].address
    device = (host.root / "sys/bus/pci/devices" / str(vf)).resolve()
    (device / "vfio-dev" / "vfio7").mkdir(parents=True)
    fd_dir = host.root / "proc" / "4242" / "fd"
    fd_dir.mkdir(parents=True)
    os.symlink("/dev/vfio/devices/vfio7", fd_dir / "31")
    os.symlink("/dev/iommu", fd_dir / "30")
    (host.root / "proc" / "4242" / "comm").write_text("qemu-system-x86\n")
    assert function_holders(target.paths, inventory(host)) == {vf: ["pid 4242 (qemu-system-x86)"]}
    before = inventory(host)
    with pytest.raises(InUseError, match="pid 4242"):
        provision(target, load_profile("mi300x-4vf"))
    assert inventory(host).gpus == before.gpus


def test_the_mi350p_profile_on_a_host_without_one_is_refused_naming_what_it_found(tmp_path):
    """MI350P's PCI ids are UNVERIFIED (docs/hardware.md §1), so no simulated machine has one: the profile ships,
    and on any other host it is one refusal that names the GPUs the host has."""
    proc = run_cli("plan", "--profile", "mi350p-1vf", "--simulate", "8xmi355x", sim_dir=tmp_path / "sim")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    text = " ".join((proc.stdout + proc.stderr).split())
    assert "wants MI350P GPUs, but the host has none (found: 8 x MI355X)" in text, text
