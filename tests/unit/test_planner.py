"""The planner (pure): refusals name each problem; an in-sync host plans zero steps."""

import pytest

from vgpu.catalog import Mode
from vgpu.model.inventory import (GroupMember, Gpu, HostFacts, IommuGroup, Inventory, Link, ModuleInfo,
                                  Partition, VirtualFunction)
from vgpu.model.pci import PciAddress
from vgpu.model.plan import BindDevice, BindVfs, InstallPersistence, ReloadGim, SetMemoryPartition, WriteFile
from vgpu.planner import (GIM_CONFIG, check, MODPROBE_CONF, MODULES_LOAD, Desired, Refusal, Target, gim_config_text,
                          make_plan, modprobe_text)
from vgpu.persist import STATE_RECORD, UNIT_LINK, UNIT_LINK_TARGET, UNIT_PATH

A = [PciAddress.parse(f"0000:{b}:00.0") for b in ("05", "85")]


def vf(pf: PciAddress, i: int, driver="vfio-pci"):
    addr = PciAddress(pf.domain, pf.bus, 2, i)
    return VirtualFunction(addr, i, 0x74B5, driver, IommuGroup(100 + pf.bus + i, (GroupMember(addr, 0x1002, 0x74B5, driver),)), 0)


def gpu(addr, *, vfs=1, vf_driver="vfio-pci", driver="gim", total=8, compute="SPX", memory="NPS1", model="MI300X"):
    return Gpu(addr, model, 0x74A1, (0x1002, 0x74A1), driver, 0, IommuGroup(addr.bus, (GroupMember(addr, 0x1002, 0x74A1, driver),)),
               (), Link(None, None), total, vfs, Partition(compute, memory, source="gim"),
               tuple(vf(addr, i, vf_driver) for i in range(vfs)))


def inventory(gpus, gim=True, iommu=True):
    mods = {"gim": ModuleInfo("gim", gim, "8.4.0.K"), "vfio_pci": ModuleInfo("vfio_pci", True)}
    facts = HostFacts(40 if iommu else 0, 1 if iommu else 0, "iommu=pt", mods, 0, 0, ("amdgpu",), ())
    return Inventory(tuple(gpus), facts)


def desired(vf_num=4, compute="QPX", memory="NPS1", mode=Mode.SRIOV, model="MI300X", addrs=A):
    return Desired("p", model, mode, tuple(Target(a, vf_num, compute, memory) for a in addrs), record="{}\n",
                   unit="[Unit]\n")


def synced_files(d, inv):
    return {GIM_CONFIG: gim_config_text(list(inv.gpus), d), MODPROBE_CONF: modprobe_text(d),
            MODULES_LOAD: "gim\nvfio-pci\n", STATE_RECORD: d.record, UNIT_PATH: d.unit, UNIT_LINK: UNIT_LINK_TARGET}


def test_fresh_host_plans_config_reload_bind_and_persistence():
    inv = inventory([gpu(a, vfs=1, vf_driver=None) for a in A])
    plan = make_plan(desired(), inv, {}, {})
    kinds = [type(s) for s in plan.steps]
    assert kinds == [WriteFile, WriteFile, WriteFile, ReloadGim, BindVfs, BindVfs, InstallPersistence]
    reload = plan.steps[3]
    assert reload.vf_num == (4, 4) and reload.disruption.host_wide
    assert set(reload.disruption.functions) == {v.address for g in inv.gpus for v in g.vfs}
    assert plan.steps[0].content == "vf_num=4,4\nmemory_partition_mode=1\n"


def test_in_sync_host_plans_zero_steps():
    inv = inventory([gpu(a, vfs=4, compute="QPX") for a in A])
    d = desired()
    assert make_plan(d, inv, synced_files(d, inv), {}).in_sync


def test_memory_only_change_sets_partition_without_reload():
    inv = inventory([gpu(a, vfs=4, compute="QPX", memory="NPS1") for a in A])
    d = desired(memory="NPS4")
    plan = make_plan(d, inv, synced_files(desired(), inv), {})
    assert not any(isinstance(s, ReloadGim) for s in plan.steps)
    assert [s.mode for s in plan.steps if isinstance(s, SetMemoryPartition)] == ["NPS4", "NPS4"]


def test_reload_disruption_names_holders():
    inv = inventory([gpu(a, vfs=1) for a in A])
    held = inv.gpus[0].vfs[0].address
    plan = make_plan(desired(), inv, {}, {held: ["VM web-01", "pid 42 (qemu-system-x86)"]})
    assert plan.holders() == ("VM web-01", "pid 42 (qemu-system-x86)") and plan.disruptive


def problems_of(d, inv):
    with pytest.raises(Refusal) as info:
        make_plan(d, inv, {}, {})
    return " | ".join(f"{p.subject}: {p.message}" for p in info.value.problems)


def test_refuses_vf_num_above_total_vfs_with_firmware_hint():
    inv = inventory([gpu(a, total=1) for a in A])
    with pytest.raises(Refusal) as info:
        make_plan(desired(vf_num=8, compute="CPX", memory="NPS4"), inv, {}, {})
    assert "8 VFs exceed this PF's TotalVFs of 1" in str(info.value)
    assert "multi-VF firmware" in info.value.problems[0].fix


def test_refuses_vf_count_not_allowed_for_model():
    assert "3 VFs per GPU is not allowed (GIM accepts 1, 2, 4, 8)" in problems_of(desired(vf_num=3, compute=None),
                                                                                   inventory([gpu(A[0])]))


def test_refuses_invalid_partition_pair():
    msg = problems_of(desired(vf_num=2, compute="DPX", memory="NPS4"), inventory([gpu(a) for a in A]))
    assert "silently fall back to NPS1" in msg


def test_refuses_model_mismatch():
    msg = problems_of(desired(), inventory([gpu(a, model="MI325X") for a in A]))
    assert "the profile is for MI300X, this GPU is an MI325X" in msg


def test_refuses_unsupported_combo_on_mi325x():
    msg = problems_of(desired(model="MI325X"), inventory([gpu(a, model="MI325X") for a in A]))
    assert "not supported on MI325X" in msg


def test_refuses_when_iommu_off_and_gim_missing():
    msg = problems_of(desired(), inventory([gpu(a) for a in A], gim=False, iommu=False))
    assert "IOMMU is off" in msg and "gim (AMD's SR-IOV host driver) is not loaded" in msg


def test_refuses_amdgpu_bound_pf_for_sriov():
    msg = problems_of(desired(), inventory([gpu(a, driver="amdgpu") for a in A]))
    assert "bound to amdgpu, but SR-IOV needs gim on the PF" in msg


def test_refuses_gim_on_pf_wanted_for_passthrough():
    msg = problems_of(desired(vf_num=0, compute=None, memory=None, mode=Mode.PASSTHROUGH), inventory([gpu(a) for a in A]))
    assert "gim drives this PF" in msg


def test_refuses_one_vf_cpx_until_accelerator_partition_mode_is_verified():
    assert "accelerator_partition_mode" in problems_of(desired(vf_num=1, compute="CPX", memory="NPS4"),
                                                        inventory([gpu(a) for a in A]))


def test_refuses_missing_gpu_address():
    d = desired(addrs=[PciAddress.parse("0000:aa:00.0")])
    assert "0000:aa:00.0: no such GPU" in problems_of(d, inventory([gpu(A[0])]))


def test_passthrough_binds_pf_and_non_bridge_group_members():
    pf = A[0]
    audio = PciAddress.parse("0000:05:00.1")
    bridge = PciAddress.parse("0000:04:00.0")
    members = (GroupMember(pf, 0x1002, 0x74A1, None), GroupMember(audio, 0x1002, 0xAB28, "snd_hda_intel"),
               GroupMember(bridge, 0x1000, 0xC030, "pcieport", is_bridge=True))
    g = Gpu(pf, "MI300X", 0x74A1, None, None, 0, IommuGroup(3, members), (), Link(None, None), 8, 0, Partition())
    d = desired(vf_num=0, compute=None, memory=None, mode=Mode.PASSTHROUGH, addrs=[pf])
    binds = [s for s in make_plan(d, inventory([g], gim=False), {}, {}).steps if isinstance(s, BindDevice)]
    assert [(s.address, s.previous) for s in binds] == [(pf, None), (audio, "snd_hda_intel")]


def test_partial_selection_keeps_other_gpus_vf_counts_in_gim_config():
    inv = inventory([gpu(A[0], vfs=1), gpu(A[1], vfs=2, compute="DPX")])
    text = gim_config_text(list(inv.gpus), desired(addrs=[A[0]]))
    assert text.startswith("vf_num=4,2\n")


def test_esxi_profile_on_a_linux_host_is_refused_in_one_sentence():
    from dataclasses import replace
    from vgpu.catalog import Hypervisor
    d = replace(desired(vf_num=0, compute=None, memory=None, mode=Mode.PASSTHROUGH), hypervisor=Hypervisor.ESXI)
    problems = check(d, inventory([gpu(a) for a in A]))
    assert len(problems) == 1  # not one "gim drives this PF" per GPU as well
    assert "VMware ESXi 8" in problems[0].message and "Linux KVM host" in problems[0].message
    assert "--esxi" in problems[0].fix  # where to run it instead


def _with_facts(inv, **changes):
    from dataclasses import replace
    return replace(inv, facts=replace(inv.facts, **changes))


def test_refuses_vf_num_set_in_modprobe_d_because_it_overrides_gim_config():
    inv = _with_facts(inventory([gpu(a) for a in A]), modprobe_options={"gim": {"vf_num": "1"}})
    assert "options gim vf_num=...` line in /etc/modprobe.d overrides" in problems_of(desired(), inv)


def test_refuses_gim_vf_num_on_the_kernel_command_line():
    inv = _with_facts(inventory([gpu(a) for a in A]), cmdline="iommu=pt gim.vf_num=2")
    assert "gim.vf_num= on the kernel command line" in problems_of(desired(), inv)


def test_vf_num_override_does_not_matter_for_passthrough():
    inv = _with_facts(inventory([gpu(a, driver="vfio-pci", vfs=0) for a in A], gim=False),
                      modprobe_options={"gim": {"vf_num": "1"}})
    plan = make_plan(desired(vf_num=0, compute=None, memory=None, mode=Mode.PASSTHROUGH), inv, {}, {})
    assert plan.steps


def test_refuses_host_wide_memory_mode_invalid_for_an_unselected_gim_gpu():
    # the profile takes only 05:00.0 at 8 VFs CPX/NPS4; 85:00.0 keeps 1 VF (SPX), and SPX/NPS4 is no GIM pair
    inv = inventory([gpu(a) for a in A])
    msg = problems_of(desired(vf_num=8, compute="CPX", memory="NPS4", addrs=A[:1]), inv)
    assert "0000:85:00.0 (MI300X): not selected, but gim drives it with 1 VF(s) (SPX)" in msg
    assert "0000:05:00.0" not in msg


def test_unselected_gim_gpu_with_a_compatible_count_is_fine():
    inv = inventory([gpu(A[0]), gpu(A[1], vfs=8, compute="CPX", memory="NPS4")])
    plan = make_plan(desired(vf_num=8, compute="CPX", memory="NPS4", addrs=A[:1]), inv, {}, {})
    assert plan.steps


def test_records_with_selections_resolving_to_the_same_gpus_are_the_same_setup():
    from vgpu.persist import state_record
    from vgpu.planner import _same_record
    spec = {"name": "a", "gpu": {"model": "MI300X", "vfs_per_gpu": 4, "select": {"count": 2}}}
    other = {"name": "b", "gpu": {"model": "MI300X", "vfs_per_gpu": 4, "select": {"addresses": [str(a) for a in A]}}}
    gpus = [str(a) for a in A]
    assert _same_record(state_record("a", spec, gpus), state_record("b", other, gpus))
    assert not _same_record(state_record("a", spec, gpus), state_record("b", other, gpus[:1]))
    changed = {**other, "gpu": {**other["gpu"], "vfs_per_gpu": 8}}
    assert not _same_record(state_record("a", spec, gpus), state_record("b", changed, gpus))


def test_a_vms_section_counts_unless_the_vms_already_agree_with_it():
    from vgpu.persist import state_record
    from vgpu.planner import _same_record
    gpu = {"model": "MI300X", "vfs_per_gpu": 4, "select": "all"}
    pattern = {"name": "a", "gpu": gpu, "vms": {"vfs_per_vm": 1, "name_pattern": "gpu-vm-{index:02d}"}}
    explicit = {"name": "b", "gpu": gpu, "vms": {"assign": {"gpu-vm-00": ["0000:05:02.0"]}}}
    assert not _same_record(state_record("a", pattern), state_record("b", explicit))
    assert _same_record(state_record("a", pattern), state_record("b", explicit), vms_settled=True)
    other_gpu = {**explicit, "gpu": {**gpu, "vfs_per_gpu": 8}}
    assert not _same_record(state_record("a", pattern), state_record("b", other_gpu), vms_settled=True)
