"""Who holds a device: processes with /dev/vfio/<group> or its VFIO cdev open, and VMs whose config names it.

AMD's GPU operator and Proxmox both refuse to touch a device that is in use; unbinding a VF under
a running QEMU blocks on the vfio device request, and reloading gim removes every VF. We look
before we leap and name the holders.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from vgpu.host.paths import HostPaths
from vgpu.inputs import read_optional
from vgpu.model.inventory import Inventory
from vgpu.model.pci import PciAddress


def vfio_processes(paths: HostPaths) -> dict[int | str, list[str]]:
    """Who has VFIO open, from <proc>/<pid>/fd links: {iommu group number: [...]} for the legacy group
    interface (/dev/vfio/<group>) and {"vfioN": [...]} for per-device cdevs (/dev/vfio/devices/vfioN,
    what QEMU opens with iommufd). Entries read "pid 4242 (qemu-system-x86)"."""
    out: dict[int | str, list[str]] = {}
    if paths.proc is None:
        return out
    try:
        pids = [p for p in os.listdir(paths.proc) if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        for key in _vfio_files_of(paths, pid):
            out.setdefault(key, []).append(f"pid {pid} ({_comm(paths, pid)})")
    return out


def _vfio_files_of(paths: HostPaths, pid: str) -> set[int | str]:
    fd_dir = paths.proc / pid / "fd"
    found: set[int | str] = set()
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # gone, or not ours to read
        return found
    for fd in fds:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        head, _, tail = target.rpartition("/")
        if head.endswith("/vfio") and tail.isdigit():
            found.add(int(tail))
        elif head.endswith("/vfio/devices") and tail.startswith("vfio") and tail[4:].isdigit():
            found.add(tail)
    return found


def _vfio_cdevs(paths: HostPaths, address: PciAddress) -> list[str]:
    """The function's VFIO device nodes ("vfioN"), from <device>/vfio-dev/ (kernels with VFIO cdev)."""
    try:
        return os.listdir(paths.pci_devices() / str(address) / "vfio-dev")
    except OSError:
        return []


def _comm(paths: HostPaths, pid: str) -> str:
    """The process name; through vgpu.inputs, so a FIFO in a captured /proc never blocks."""
    raw = read_optional(paths.proc / pid / "comm", "proc file")
    return (raw or b"").decode("utf-8", "replace").strip() or "?"


def function_holders(paths: HostPaths, inv: Inventory, vm_holders: dict[PciAddress, Iterable[str]] | None = None
                     ) -> dict[PciAddress, list[str]]:
    """Every GPU function (PF or VF) that someone holds, with who: processes first, then VMs."""
    opened = vfio_processes(paths)
    cdevs_open = any(isinstance(k, str) for k in opened)
    out: dict[PciAddress, list[str]] = {}
    for gpu in inv.gpus:
        for fn in (gpu, *gpu.vfs):
            names = list(opened.get(fn.iommu_group.number, ())) if fn.iommu_group else []
            for cdev in _vfio_cdevs(paths, fn.address) if cdevs_open else ():
                names += [n for n in opened.get(cdev, ()) if n not in names]
            names += [n for n in (vm_holders or {}).get(fn.address, ()) if n not in names]
            if names:
                out[fn.address] = names
    return out
