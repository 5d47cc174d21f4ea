"""Render a SimState as a Linux-shaped tree: root/sys, root/proc, root/dev (umockdev testbed layout).

File formats follow the kernel (drivers/pci/pci-sysfs.c, iov.c, probe.c): vendor "0x%04x",
class "0x%06x", sriov_vf_device "%x", resource "0x%016x 0x%016x 0x%016x" per resource,
uevent KEY=VALUE lines, relative symlinks as sysfs makes them. root/etc is written once at
build and then belongs to whoever configures the host (vgpu's provisioner, tests).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

from vgpu.catalog import DEFAULT as CATALOG
from vgpu.errors import InputError
from vgpu.sim import drivers
from vgpu.sim.state import Function, SimState

RO, RW, WO = 0o444, 0o644, 0o200
GIM_ATTRS = ("memory_partition_mode", "spatial_partition_mode", "accelerator_partition_profile")
AMDGPU_ATTRS = ("current_compute_partition", "available_compute_partition",
                "current_memory_partition", "available_memory_partition")
_RESOURCE_LINES, _BRIDGE_RESOURCE_LINES = 13, 17


def write(path: Path, text: str, mode: int = RO) -> None:
    """The simulated kernel (re)writes an attribute. Read-only attributes (0444) stay read-only for
    everyone else; root ignores the mode, so a simulator run by a normal user lifts it for the write."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    except PermissionError:
        os.chmod(path, mode | 0o200)
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.chmod(path, mode)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _holds(path: Path, data: bytes, mode: int) -> bool:
    """Whether ``path`` already holds ``data`` with ``mode``. Each state change re-renders the host-wide parts
    of the tree (thousands of attributes on an 8-GPU host) and most of them are unchanged: reading one back costs
    a third of rewriting it on ext4, and it leaves the attributes a change did not touch as they were. Read, not
    cached: a test or a person may have edited the file since."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # missing, write-only for this user, a link: write it (O_NONBLOCK: a FIFO never blocks here)
        return False
    try:
        st = os.fstat(fd)
        if st.st_size != len(data) or (st.st_mode & 0o7777) != mode or not stat.S_ISREG(st.st_mode):
            return False
        return os.read(fd, len(data) + 1) == data
    finally:
        os.close(fd)


def link(path: Path, target: str) -> None:
    try:
        if os.readlink(path) == target:
            return
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:  # a directory or file where the link belongs
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else os.unlink(path)
    os.symlink(target, path)


def _rel(path: Path | str, target: Path | str) -> str:
    """The shortest relative link from ``path`` to ``target``, as sysfs writes them."""
    src = str(path).split("/")[:-1]
    dst = str(target).split("/")
    common = 0
    for a, b in zip(src, dst):
        if a != b:
            break
        common += 1
    return "/".join([".."] * (len(src) - common) + dst[common:])


class Tree:
    """Writes the parts of the tree that a state change touches."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._root = os.path.normpath(os.path.abspath(self.root))
        self.sys = self.root / "sys"
        self._dirs: dict[str, Path] = {}  # an address always sits under the same bridges

    # -- every write, link and removal below goes through _at --------------------------------
    def _at(self, path: Path | str) -> Path:
        """``path`` if it lies below this tree's root, else InputError: names from a machine spec or a
        hand-edited state.json (a module called ``../../x``, a parameter ``a/../../b``) never reach a
        path outside the simulator directory. Lexical, like the kernel's own names: '..' and absolute
        parts are resolved without following links (the simulator directory is the user's own)."""
        text = os.path.normpath(os.path.join(self._root, path))
        if not text.startswith(self._root + os.sep):
            raise InputError(f"refusing to write {path}: it is outside the simulated host's root {self._root} "
                             "(a module, parameter or device name in the machine spec or state.json is not a "
                             "kernel name)")
        return path if isinstance(path, Path) else Path(path)

    def _write(self, path: Path, text: str, mode: int = RO) -> None:
        path = self._at(path)
        if not _holds(path, text.encode(), mode):
            write(path, text, mode)

    def _link(self, path: Path, target: str) -> None:
        link(self._at(path), target)

    def device_dir(self, state: SimState, f: Function) -> Path:
        cached = self._dirs.get(f.address)
        if cached is None:
            cached = self._dirs[f.address] = self._device_dir(state, f)
        return cached

    def _device_dir(self, state: SimState, f: Function) -> Path:
        chain = [f.address]
        top = f
        while top.parent is not None:
            top = state.functions[top.parent]
            chain.append(top.address)
        pci = top.pci
        return self.sys.joinpath("devices", f"pci{pci.domain:04x}:{pci.bus:02x}", *reversed(chain))

    # -- whole tree ---------------------------------------------------------------------------
    def render_all(self, state: SimState) -> None:
        for name in ("sys", "proc", "dev"):
            shutil.rmtree(self._at(self.root / name), ignore_errors=True)
        for sub in ("sys/devices", "sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/kernel/iommu_groups",
                    "sys/class/iommu", "sys/module", "proc", "dev", "etc/modprobe.d"):
            self._at(self.root / sub).mkdir(parents=True, exist_ok=True)
        self._write(self.sys / "bus/pci/drivers_probe", "", WO)
        self._write(self.sys / "bus/pci/drivers_autoprobe", "1\n", RW)
        self._write(self.sys / "bus/pci/rescan", "", WO)
        for f in sorted(state.functions.values(), key=lambda x: self._depth(state, x)):
            self.render_function(state, f)
        self.render_globals(state)

    @staticmethod
    def _depth(state: SimState, f: Function) -> int:
        depth = 0
        while f.parent is not None:
            f, depth = state.functions[f.parent], depth + 1
        return depth

    # -- one function ------------------------------------------------------------------------
    def render_function(self, state: SimState, f: Function) -> None:
        """Write the function's directory; attributes that never change only when it is new."""
        d = self.device_dir(state, f)
        if not d.is_dir():
            self._at(d).mkdir(parents=True)
            self._static(f, d)
        self._write(d / "driver_override", (f.driver_override or "(null)") + "\n", RW)
        self._write(d / "uevent", _uevent(f))
        self._write(d / "enable", "1\n" if f.driver else "0\n")
        if f.sriov:
            self._write(d / "sriov_numvfs", f"{f.sriov.num_vfs}\n", RW)
        self._links(state, f, d)
        self._partition_attrs(f, d)

    def _static(self, f: Function, d: Path) -> None:
        for name, value in _attributes(f).items():
            self._write(d / name, value + "\n")
        if f.sriov:
            for name, value in (("sriov_totalvfs", f.sriov.total_vfs), ("sriov_offset", f.sriov.offset),
                                ("sriov_stride", f.sriov.stride)):
                self._write(d / name, f"{value}\n")
            self._write(d / "sriov_vf_device", f"{f.sriov.vf_device:x}\n")
            self._write(d / "sriov_drivers_autoprobe", "1\n", RW)
        self._write(d / "resource", _resource(f))
        for name in ("remove", "reset", "rescan"):
            self._write(d / name, "", WO)

    def _links(self, state: SimState, f: Function, d: Path) -> None:
        self._link(d / "subsystem", _rel(d / "subsystem", self.sys / "bus/pci"))
        self._optional_link(d / "driver", self.sys / "bus/pci/drivers" / f.driver if f.driver else None)
        group = self.sys / "kernel/iommu_groups" / str(f.iommu_group) if f.iommu_group is not None else None
        self._optional_link(d / "iommu_group", group)
        pf = state.functions.get(f.physfn) if f.physfn else None
        self._optional_link(d / "physfn", self.device_dir(state, pf) if pf else None)
        wanted = {f"virtfn{vf.vf_index}": vf for vf in state.vfs_of(f)}
        for entry in os.listdir(d):
            if entry.startswith("virtfn") and entry not in wanted:
                os.unlink(self._at(d / entry))
        for name, vf in wanted.items():
            self._link(d / name, _rel(d / name, self.device_dir(state, vf)))

    def _optional_link(self, path: Path, target: Path | None) -> None:
        if target is None:
            if os.path.lexists(path):
                os.unlink(self._at(path))
        else:
            self._link(path, _rel(path, target))

    def _partition_attrs(self, f: Function, d: Path) -> None:
        """GIM-bound PFs show GIM's partition files, amdgpu-bound ones amdgpu's (docs/hardware.md §2-3)."""
        gim = f.driver == "gim" and f.compute_partition is not None
        amdgpu = f.driver == "amdgpu" and f.compute_partition is not None
        stale = (() if gim else GIM_ATTRS) + (() if amdgpu else AMDGPU_ATTRS)
        for name in stale:
            if os.path.lexists(d / name):
                os.unlink(self._at(d / name))
        if gim:
            self._write(d / "memory_partition_mode", f"{f.memory_partition}\n", RW)
            self._write(d / "spatial_partition_mode", f"{f.compute_partition}\n", RO)
            self._write(d / "accelerator_partition_profile", f"{f.compute_partition}\n", RW)
        if amdgpu:
            model = CATALOG.by_name(f.gpu_model or "")
            self._write(d / "current_compute_partition", f"{f.compute_partition}\n", RW)
            self._write(d / "current_memory_partition", f"{f.memory_partition}\n", RW)
            self._write(d / "available_compute_partition",
                  ", ".join(p.value for p in (model.compute_partitions if model else ())) + "\n")
            self._write(d / "available_memory_partition",
                  ", ".join(p.value for p in (model.memory_partitions if model else ())) + "\n")

    def remove_function(self, state: SimState, f: Function) -> None:
        shutil.rmtree(self._at(self.device_dir(state, f)), ignore_errors=True)

    # -- host-wide parts ---------------------------------------------------------------------
    def render_globals(self, state: SimState) -> None:
        self._bus_links(state)
        self._drivers(state)
        self._groups(state)
        self._modules(state)
        self._iommu_units(state)
        self._misc(state)
        self._proc(state)
        self._dev(state)

    def _sync_links(self, directory: Path, wanted: dict[str, Path]) -> None:
        base = str(self._at(directory))
        os.makedirs(base, exist_ok=True)
        existing = {}
        for entry in os.scandir(base):
            if entry.is_symlink():
                existing[entry.name] = os.readlink(entry.path)
        for name in existing.keys() - wanted.keys():
            os.unlink(f"{base}/{name}")
        for name, target in wanted.items():
            rel = _rel(f"{base}/{name}", target)
            if existing.get(name) != rel:
                path = self._at(f"{base}/{name}")
                if name in existing:
                    os.unlink(path)
                os.symlink(rel, path)

    def _bus_links(self, state: SimState) -> None:
        self._sync_links(self.sys / "bus/pci/devices",
                         {f.address: self.device_dir(state, f) for f in state.functions.values()})

    def _drivers(self, state: SimState) -> None:
        base = self.sys / "bus/pci/drivers"
        registered = registered_drivers(state)
        for entry in os.listdir(base):
            if entry not in registered:
                shutil.rmtree(self._at(base / entry))
        for drv, module in registered.items():
            d = base / drv
            self._at(d).mkdir(exist_ok=True)
            for name in ("bind", "unbind", "new_id", "remove_id"):
                self._write(d / name, "", WO)
            self._write(d / "uevent", "", WO)
            bound = {f.address: self.device_dir(state, f)
                     for f in state.functions.values() if f.driver == drv}
            if module:
                bound["module"] = self.sys / "module" / module
            self._sync_links(d, bound)

    def _groups(self, state: SimState) -> None:
        base = self.sys / "kernel/iommu_groups"
        groups: dict[int, list[Function]] = {}
        for f in state.functions.values():
            if f.iommu_group is not None:
                groups.setdefault(f.iommu_group, []).append(f)
        for entry in os.listdir(base):
            if not entry.isdigit() or int(entry) not in groups:
                shutil.rmtree(self._at(base / entry))
        kind = "identity" if "iommu=pt" in state.cmdline.split() else "DMA-FQ"
        for number, members in groups.items():
            d = base / str(number)
            self._at(d).mkdir(exist_ok=True)
            if not (d / "type").exists():
                self._write(d / "type", kind + "\n", RW)
            self._sync_links(d / "devices", {f.address: self.device_dir(state, f) for f in members})

    def _modules(self, state: SimState) -> None:
        base = self.sys / "module"
        for entry in os.listdir(base):
            if entry not in state.modules:
                shutil.rmtree(self._at(base / entry))
        for module, params in state.modules.items():
            d = base / module
            self._at(d / "parameters").mkdir(parents=True, exist_ok=True)
            for entry in os.listdir(d / "parameters"):
                if entry not in params:
                    os.unlink(self._at(d / "parameters" / entry))
            for key, value in params.items():
                self._write(d / "parameters" / key, value + "\n", RW)
            if module in state.module_versions:
                self._write(d / "version", state.module_versions[module] + "\n")
            self._write(d / "initstate", "live\n")
            self._write(d / "refcnt", "0\n")
            drv = drivers.driver_of(module)
            registered = drv in registered_drivers(state)
            links = {f"pci:{drv}": self.sys / "bus/pci/drivers" / drv} if registered else {}
            self._sync_links(d / "drivers", links)

    def _iommu_units(self, state: SimState) -> None:
        base = self.sys / "class/iommu"
        units = {}
        if state.iommu:
            iommus = [f for f in state.sorted_functions() if f.kind == "iommu"]
            for n, f in enumerate(iommus):
                target = self.device_dir(state, f) / "iommu" / f"ivhd{n}"
                self._at(target).mkdir(parents=True, exist_ok=True)
                units[f"ivhd{n}"] = target
        self._sync_links(base, units)

    def _misc(self, state: SimState) -> None:
        for size in ("2048", "1048576"):
            d = self.sys / f"kernel/mm/hugepages/hugepages-{size}kB"
            self._at(d).mkdir(parents=True, exist_ok=True)
            self._write(d / "nr_hugepages", f"{state.hugepages.get(size, 0)}\n", RW)
            self._write(d / "free_hugepages", f"{state.hugepages.get(size, 0)}\n")

    def _proc(self, state: SimState) -> None:
        proc = self.root / "proc"
        self._at(proc).mkdir(exist_ok=True)
        self._write(proc / "cmdline", state.cmdline + "\n")
        self._write(proc / "cpuinfo", f"processor\t: 0\nvendor_id\t: {state.cpu_vendor}\n\n")
        self._at(proc / "sys/kernel").mkdir(parents=True, exist_ok=True)
        self._write(proc / "sys/kernel/osrelease", kernel_release(state) + "\n")
        for entry in os.listdir(proc):
            if entry.isdigit() and entry not in state.holders:
                shutil.rmtree(self._at(proc / entry))
        for pid, holder in state.holders.items():
            self._at(proc / pid / "fd").mkdir(parents=True, exist_ok=True)
            self._write(proc / pid / "comm", holder.comm + "\n")
            self._link(proc / pid / "fd" / "3", holder.device or f"/dev/vfio/{holder.group}")
            cgroup = f"/system.slice/{holder.unit}" if holder.unit else "/user.slice/user-0.slice/session-1.scope"
            self._write(proc / pid / "cgroup", f"0::{cgroup}\n")

    def _dev(self, state: SimState) -> None:
        vfio = self.root / "dev/vfio"
        groups = {f.iommu_group for f in state.functions.values()
                  if f.driver == "vfio-pci" and f.iommu_group is not None}
        if "vfio" not in state.modules and not groups:
            shutil.rmtree(self._at(vfio), ignore_errors=True)
            return
        self._at(vfio).mkdir(parents=True, exist_ok=True)
        for entry in os.listdir(vfio):
            if entry.isdigit() and int(entry) not in groups:
                os.unlink(self._at(vfio / entry))
        self._write(vfio / "vfio", "", 0o666)
        for g in groups:
            if not (vfio / str(g)).exists():
                self._write(vfio / str(g), "", 0o600)


def kernel_release(state: SimState) -> str:
    """`uname -r` of the simulated host: the machine spec's state.kernel_release (docs/sim-machine-spec.md)."""
    value = (state.machine.get("state") or {}).get("kernel_release") if isinstance(state.machine, dict) else None
    return value if isinstance(value, str) and re.fullmatch(r"[0-9][A-Za-z0-9._+~-]{0,63}", value) else "6.8.0-sim"


def registered_drivers(state: SimState) -> dict[str, str | None]:
    """PCI driver name -> module registering it (None: built in)."""
    out: dict[str, str | None] = {d: None for d in drivers.BUILTIN_DRIVERS}
    for module in state.modules:
        out[drivers.driver_of(module)] = module
    return out


def _attributes(f: Function) -> dict[str, str]:
    attrs = {"vendor": f"0x{f.vendor:04x}", "device": f"0x{f.device:04x}",
             "subsystem_vendor": f"0x{f.subsystem_vendor:04x}",
             "subsystem_device": f"0x{f.subsystem_device:04x}", "class": f"0x{f.class_code:06x}",
             "revision": f"0x{f.revision:02x}", "numa_node": str(f.numa_node),
             "modalias": _modalias(f), "irq": "0"}
    if f.link:
        speed, width, max_speed, max_width = f.link
        attrs.update(current_link_speed=speed, current_link_width=str(width),
                     max_link_speed=max_speed, max_link_width=str(max_width))
    return attrs


def _modalias(f: Function) -> str:
    c = f.class_code
    return (f"pci:v{f.vendor:08X}d{f.device:08X}sv{f.subsystem_vendor:08X}sd{f.subsystem_device:08X}"
            f"bc{c >> 16:02X}sc{(c >> 8) & 0xFF:02X}i{c & 0xFF:02X}")


def _uevent(f: Function) -> str:
    lines = [f"DRIVER={f.driver}"] if f.driver else []
    lines += [f"PCI_CLASS={f.class_code:X}", f"PCI_ID={f.vendor:04X}:{f.device:04X}",
              f"PCI_SUBSYS_ID={f.subsystem_vendor:04X}:{f.subsystem_device:04X}",
              f"PCI_SLOT_NAME={f.address}", f"MODALIAS={_modalias(f)}"]
    return "\n".join(lines) + "\n"


def _resource(f: Function) -> str:
    rows = [(0, 0, 0)] * (_BRIDGE_RESOURCE_LINES if f.is_bridge else _RESOURCE_LINES)
    for bar in f.bars:
        rows[bar.index] = (bar.start, bar.start + bar.size - 1, bar.flags)
    if f.sriov:
        for bar in f.sriov.vf_bars:
            size = bar.size * f.sriov.total_vfs
            rows[7 + bar.index] = (bar.start, bar.start + size - 1, bar.flags)
    return "".join(f"0x{s:016x} 0x{e:016x} 0x{fl:016x}\n" for s, e, fl in rows)
