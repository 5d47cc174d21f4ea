"""Release: the plan that takes a host back to its default state (pure).

Default state: no vgpu config files, gim (if loaded) with its default vf_num=1, no function on
vfio-pci that vgpu put there, no boot persistence. Same Plan/step types as provisioning, so
release gets the same lock, journal, rollback, holder checks and read-back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vgpu.model.inventory import Inventory
from vgpu.model.plan import InstallPersistence, Plan, ReloadGim, UnbindDevice, WriteFile
from vgpu.persist import STATE_RECORD, UNIT_LINK, UNIT_PATH
from vgpu.planner import GIM_CONFIG, MODPROBE_CONF, MODULES_LOAD, VFIO, Holders, disruption_for

GIM_DEFAULT_VF_NUM = 1  # GIM's default when vf_num is not given (docs/hardware.md §3)


def make_release_plan(inv: Inventory, files: Mapping[str, str | None], holders: Holders,
                      profile: str = "default", vm_steps: Sequence = ()) -> Plan:
    """``vm_steps``: the detach steps for VMs vgpu attached functions to (vgpu/vms.py), run first."""
    steps: list = list(vm_steps)
    for gpu in inv.gpus:
        for vf in gpu.vfs:
            if vf.driver == VFIO:
                steps.append(UnbindDevice(vf.address, VFIO, disruption=disruption_for((vf.address,), holders)))
        if gpu.driver == VFIO:
            members = [m for m in (gpu.iommu_group.members if gpu.iommu_group else ()) if m.driver == VFIO]
            for m in members or [gpu]:
                steps.append(UnbindDevice(m.address, VFIO, disruption=disruption_for((m.address,), holders)))
    for path in (GIM_CONFIG, MODPROBE_CONF, MODULES_LOAD):
        if files.get(path) is not None:
            steps.append(WriteFile(path, None, why="vgpu's configuration"))
    gim_pfs = [g for g in inv.gpus if g.driver == "gim"]
    gim = inv.facts.modules.get("gim")
    if gim is not None and gim.loaded and any(len(g.vfs) != _default_vfs(g) for g in gim_pfs):
        every_vf = tuple(vf.address for g in inv.gpus for vf in g.vfs)
        steps.append(ReloadGim(vf_num=tuple(_default_vfs(g) for g in gim_pfs),
                               pfs=tuple(g.address for g in gim_pfs),
                               disruption=disruption_for(every_vf, holders, host_wide=True)))
    if any(files.get(p) is not None for p in (STATE_RECORD, UNIT_PATH, UNIT_LINK)):
        steps.append(InstallPersistence(profile=profile, record=None))
    return Plan(profile=f"release ({profile})", host=inv.source, steps=tuple(steps), action="release")


def _default_vfs(gpu) -> int:
    return min(GIM_DEFAULT_VF_NUM, gpu.total_vfs) if gpu.total_vfs is not None else GIM_DEFAULT_VF_NUM
