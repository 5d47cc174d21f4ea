"""Who holds a device: processes with /dev/vfio/<group> open, and VMs whose config names it.

AMD's GPU operator and Proxmox both refuse to touch a device that is in use; unbinding a VF under
a running QEMU blocks on the vfio device request, and reloading gim removes every VF. We look
before we leap and name the holders.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from vgpu.host.paths import HostPaths
from vgpu.model.inventory import Inventory
from vgpu.model.pci import PciAddress


def vfio_processes(paths: HostPaths) -> dict[int, list[str]]:
    """{iommu group: ["pid 4242 (qemu-system-x86)", ...]} from <proc>/<pid>/fd links."""
    out: dict[int, list[str]] = {}
    if paths.proc is None:
        return out
    try:
        pids = [p for p in os.listdir(paths.proc) if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        for group in _vfio_groups_of(paths, pid):
            out.setdefault(group, []).append(f"pid {pid} ({_comm(paths, pid)})")
    return out


def _vfio_groups_of(paths: HostPaths, pid: str) -> set[int]:
    fd_dir = paths.proc / pid / "fd"
    groups: set[int] = set()
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # gone, or not ours to read
        return groups
    for fd in fds:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        head, _, tail = target.rpartition("/")
        if head.endswith("/vfio") and tail.isdigit():
            groups.add(int(tail))
    return groups


def _comm(paths: HostPaths, pid: str) -> str:
    try:
        return (paths.proc / pid / "comm").read_text().strip() or "?"
    except OSError:
        return "?"


def function_holders(paths: HostPaths, inv: Inventory, vm_holders: dict[PciAddress, Iterable[str]] | None = None
                     ) -> dict[PciAddress, list[str]]:
    """Every GPU function (PF or VF) that someone holds, with who: processes first, then VMs."""
    by_group = vfio_processes(paths)
    out: dict[PciAddress, list[str]] = {}
    for gpu in inv.gpus:
        for fn in (gpu, *gpu.vfs):
            names = list(by_group.get(fn.iommu_group.number, ())) if fn.iommu_group else []
            names += [n for n in (vm_holders or {}).get(fn.address, ()) if n not in names]
            if names:
                out[fn.address] = names
    return out
