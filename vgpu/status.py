"""Status: the recorded profile compared with the host, item by item (pure).

An SRE must be able to trust it, so every item is read from the host as discovered now, never
from what vgpu believes it did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vgpu.catalog import Mode
from vgpu.model.inventory import Inventory
from vgpu.persist import STATE_RECORD, UNIT_LINK, UNIT_PATH
from vgpu.planner import VFIO, Desired, check, desired_files


@dataclass(frozen=True)
class Item:
    subject: str
    what: str
    expected: str
    actual: str
    fix: str | None = None  # what must happen outside vgpu before provision can fix this item

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


def vm_items(planned_vms, domains) -> list[Item]:
    """One item per assigned VM that is defined: does its saved configuration have its functions?
    (VMs not defined are not drift: vgpu attaches to VMs once they exist.)"""
    if planned_vms is None or domains is None:
        return []
    items = []
    for vm, functions in planned_vms:
        domain = domains.get(vm)
        if domain is None:
            continue
        have = [a for a in functions if a in domain.hostdevs]
        # a running VM is never hot-plugged (vgpu/vms.py): provision cannot fix it until the VM is shut down
        fix = "shut it down (GPUs are cold-plugged only)" if domain.active and len(have) < len(functions) else None
        items.append(Item(f"VM {vm}", "attached", ", ".join(str(a) for a in functions),
                          ", ".join(str(a) for a in have) or "none", fix))
    return items


def status_items(desired: Desired, inv: Inventory, files: Mapping[str, str | None]) -> list[Item]:
    items = [Item(p.subject, "capability", "applicable", p.message) for p in check(desired, inv)]
    for target in desired.targets:
        gpu = inv.gpu(target.address)
        if gpu is None:
            items.append(Item(str(target.address), "present", "yes", "no"))
            continue
        s = str(gpu.address)
        if desired.mode is Mode.SRIOV:
            items.append(Item(s, "driver", "gim", gpu.driver or "none"))
            items.append(Item(s, "VFs", str(target.vf_num), str(len(gpu.vfs))))
            if target.compute:
                items.append(Item(s, "compute partition", target.compute, gpu.partition.compute or "unknown"))
            if target.memory:
                items.append(Item(s, "memory partition", target.memory, gpu.partition.memory or "unknown"))
            items += [Item(str(vf.address), "driver", VFIO, vf.driver or "none") for vf in gpu.vfs]
        else:
            items.append(Item(s, "driver", VFIO, gpu.driver or "none"))
            members = gpu.iommu_group.others(gpu.address) if gpu.iommu_group else ()
            items += [Item(str(m.address), "driver (same IOMMU group)", VFIO, m.driver or "none")
                      for m in members if not m.is_bridge]
    for path, content in desired_files(desired, inv).items():
        actual = files.get(path)
        state = "missing" if actual is None else "as vgpu wrote it" if actual == content else "changed"
        items.append(Item("host", f"/etc/{path}", "as vgpu wrote it", state))
    present = "present" if files.get(UNIT_PATH) == desired.unit and files.get(UNIT_LINK) else "missing"
    items.append(Item("host", "boot persistence", "present", present))
    recorded = "recorded" if files.get(STATE_RECORD) is not None else "missing"
    items.append(Item("host", "state record", "recorded", recorded))
    return items
