"""Who holds a device: processes with /dev/vfio/<group> or its VFIO cdev open, and VMs whose config names it.

AMD's GPU operator and Proxmox both refuse to touch a device that is in use; unbinding a VF under
a running QEMU blocks on the vfio device request, and reloading gim removes every VF. We look
before we leap and name the holders.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from vgpu.errors import InputError
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


def _open_files(paths: HostPaths, pid: str) -> list[str]:
    """What the process's file descriptors point at (/proc/PID/fd links); [] when it is gone or not ours to read."""
    fd_dir = paths.proc / pid / "fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    targets = []
    for fd in fds:
        try:
            targets.append(os.readlink(fd_dir / fd))
        except OSError:
            continue
    return targets


def _vfio_files_of(paths: HostPaths, pid: str) -> set[int | str]:
    found: set[int | str] = set()
    for target in _open_files(paths, pid):
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


# GPU clients: processes with GIM's SMI device, the KFD compute device or a GPU's DRM node open. AMD's
# device-metrics-exporter and gpuagent (SR-IOV mode: /dev/gim-smi0), amd-smi monitors, ROCm jobs on an amdgpu
# GPU: while they hold these, gim cannot unload ("Module gim is in use") and a partition change fails with
# "device busy" (ROCm/gpu-operator#421). docs/hardware.md §3.
HOST_WIDE_NODES = ("/dev/kfd",)  # every amdgpu GPU's compute queues


@dataclass(frozen=True)
class GpuClient:
    pid: int
    comm: str
    unit: str | None  # its systemd service (from /proc/PID/cgroup); None: not a service vgpu can restart
    devices: tuple[str, ...]  # the device nodes it holds, e.g. "/dev/gim-smi0", "/dev/dri/renderD128"

    def describe(self) -> str:
        return f"pid {self.pid} ({self.comm}) holding {', '.join(self.devices)}"


def gpu_clients(paths: HostPaths) -> list[GpuClient]:
    """Every process holding /dev/kfd, /dev/gim-smi* or /dev/dri/*, from <proc>/<pid>/fd (so a simulated or
    captured /proc works like the real one), in pid order."""
    out: list[GpuClient] = []
    if paths.proc is None:
        return out
    try:
        pids = sorted((p for p in os.listdir(paths.proc) if p.isdigit()), key=int)
    except OSError:
        return out
    for pid in pids:
        nodes = _gpu_nodes_of(paths, pid)
        if nodes:
            out.append(GpuClient(int(pid), _comm(paths, pid), service_of(paths, pid), tuple(sorted(nodes))))
    return out


def _gpu_nodes_of(paths: HostPaths, pid: str) -> set[str]:
    return {t for t in _open_files(paths, pid)
            if t in HOST_WIDE_NODES or t.startswith(("/dev/gim-smi", "/dev/dri/"))}


def service_of(paths: HostPaths, pid: str) -> str | None:
    """The systemd service a process runs in: the last component of its cgroup path when it names a
    ``.service`` (cgroup v2 ``0::/system.slice/x.service``, v1 ``N:name=systemd:/...``); None for session
    scopes, user shells and containers' own cgroups."""
    raw = read_optional(paths.proc / pid / "cgroup", "proc file")
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or parts[1] not in ("", "name=systemd"):
            continue
        last = parts[2].rstrip("/").rsplit("/", 1)[-1]
        if last.endswith(".service") and _UNIT_NAME.fullmatch(last) and "/system.slice/" in parts[2] + "/":
            return last
    return None


_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\-]{1,200}\.service")


def drm_address(paths: HostPaths, node: str) -> PciAddress | None:
    """The PCI function behind /dev/dri/<node> (cardN, renderDN), from <sys>/class/drm/<node>/device."""
    name = node.rsplit("/", 1)[-1]
    try:
        return PciAddress.parse(os.path.basename(os.path.realpath(paths.sys / "class" / "drm" / name / "device")))
    except (OSError, ValueError, InputError):
        return None


def clients_for(clients: Iterable[GpuClient], paths: HostPaths, functions: Iterable[PciAddress],
                host_wide: bool) -> list[GpuClient]:
    """The clients a step disrupts: with ``host_wide`` (a gim reload, a partition change) everyone holding
    GIM's SMI device or /dev/kfd, and always those holding a DRM node of one of ``functions``."""
    wanted = set(functions)
    out = []
    for c in clients:
        if host_wide and any(d in HOST_WIDE_NODES or d.startswith("/dev/gim-smi") for d in c.devices):
            out.append(c)
        elif any(d.startswith("/dev/dri/") and drm_address(paths, d) in wanted for d in c.devices):
            out.append(c)
    return out
