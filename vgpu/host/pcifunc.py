"""Reading one PCI function's sysfs attributes into a typed record.

Two enumerators feed this module: libudev through pyudev (the real host, and simulated trees under
the umockdev preload) and a direct sysfs walk (``--sysfs-root``, snapshots, the simulator). Both
hand a ``DeviceView`` to ``read_function``, so the two paths cannot drift apart: tests assert the
inventories they produce are equal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol

from vgpu.inputs import read_optional
from vgpu.model.inventory import Bar, Link, Partition
from vgpu.model.pci import PciAddress

# linux/ioport.h
IORESOURCE_MEM = 0x200
IORESOURCE_PREFETCH = 0x2000
IORESOURCE_MEM_64 = 0x100000
_STANDARD_BARS = 6

# Partition attributes: GIM's on the PF (docs/hardware.md §3) and amdgpu's (docs/hardware.md §2).
GIM_PARTITION_ATTRS = ("spatial_partition_mode", "memory_partition_mode")
AMDGPU_PARTITION_ATTRS = ("current_compute_partition", "available_compute_partition",
                          "current_memory_partition", "available_memory_partition")

# Every attribute discovery reads; the snapshot captures exactly these (plus the links below).
ATTRIBUTES = ("vendor", "device", "class", "subsystem_vendor", "subsystem_device", "numa_node",
              "resource", "current_link_speed", "current_link_width", "max_link_speed",
              "max_link_width", "sriov_totalvfs", "sriov_numvfs", "sriov_offset", "sriov_stride",
              "sriov_vf_device", "driver_override", "revision", "uevent",
              *GIM_PARTITION_ATTRS, *AMDGPU_PARTITION_ATTRS)
LINKS = ("driver", "iommu_group", "physfn", "subsystem")


class DeviceView(Protocol):
    """A PCI function as an enumerator sees it."""

    name: str  # the sysfs name, i.e. the PCI address

    def attr(self, name: str) -> str | None:
        """The stripped attribute text, or None when absent/unreadable."""

    def link(self, name: str) -> str | None:
        """The last path component of a symlink's target, or None."""

    def link_names(self, prefix: str) -> list[str]:
        """Names of entries starting with ``prefix`` (for virtfnN links)."""


class PathView:
    """A function read straight from a sysfs directory (or a link to one)."""

    __slots__ = ("name", "path")

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)

    def attr(self, name: str) -> str | None:
        """Absent or unreadable: None. A FIFO, device or oversized file (a hostile capture) is an
        InputError naming it: reading never blocks and never takes more than the cap."""
        raw = read_optional(os.path.join(self.path, name), "sysfs attribute")
        return None if raw is None else raw.decode("utf-8", "replace").strip()

    def link(self, name: str) -> str | None:
        try:
            return os.path.basename(os.readlink(os.path.join(self.path, name)))
        except OSError:
            return None

    def link_names(self, prefix: str) -> list[str]:
        try:
            return [n for n in os.listdir(self.path) if n.startswith(prefix)]
        except OSError:
            return []


@dataclass
class FunctionRecord:
    """Everything discovery knows about one PCI function; pure data built from a view."""

    address: PciAddress
    vendor: int
    device: int
    class_code: int
    driver: str | None
    subsystem: tuple[int, int] | None = None
    numa_node: int | None = None
    iommu_group: int | None = None
    physfn: PciAddress | None = None
    virtfns: dict[int, PciAddress] = field(default_factory=dict)
    bars: tuple[Bar, ...] = ()
    link: Link = field(default_factory=lambda: Link(None, None))
    total_vfs: int | None = None
    num_vfs: int | None = None
    vf_offset: int | None = None  # SR-IOV First VF Offset and VF Stride (routing-ID units)
    vf_stride: int | None = None
    partition: Partition = field(default_factory=Partition)

    @property
    def is_bridge(self) -> bool:
        return (self.class_code >> 8) == 0x0604


def parse_int(text: str | None, base: int = 0) -> int | None:
    """sysfs numbers: "0x1002", "16", "-1"; None for absent or garbage."""
    if text is None or text == "":
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


# The widest value each sysfs attribute can hold: vendor/device/subsystem ids are 16 bits and the class code 24
# (PCI Local Bus spec, configuration header); a wider number is damage, read like garbage (None), so a GPU
# whose id is `0x` and 20000 digits is reported as unidentified like its siblings, never dropped unseen.
ID_MAX, CLASS_MAX = 0xFFFF, 0xFFFFFF
# numa_node is -1 (no node) or below MAX_NUMNODES = 1 << CONFIG_NODES_SHIFT, whose largest allowed value is 10
# on x86 (arch/x86/Kconfig: NODES_SHIFT "range 1 10"; include/linux/numa.h): at most 1024 nodes (docs/hardware.md §5).
MAX_NUMNODES = 1024


def parse_bounded(text: str | None, base: int, maximum: int) -> int | None:
    """:func:`parse_int` for a field of known width: None when absent, garbage, negative or above ``maximum``."""
    if text is not None and len(text) > len(f"{maximum:#x}") + 2:  # never build a 20000-digit int to reject it
        return None
    value = parse_int(text, base)
    return value if value is not None and 0 <= value <= maximum else None


def parse_numa_node(text: str | None) -> int | None:
    """A function's NUMA node: None for -1 (none), garbage or a node Linux cannot have (>= MAX_NUMNODES)."""
    return parse_bounded(text, 10, MAX_NUMNODES - 1)


def read_identity(view: DeviceView) -> FunctionRecord | None:
    """The cheap part every function needs: address, ids, class, driver. None if not a PCI function."""
    try:
        address = PciAddress.parse(view.name)
    except ValueError:
        return None
    vendor, device = parse_bounded(view.attr("vendor"), 16, ID_MAX), parse_bounded(view.attr("device"), 16, ID_MAX)
    if vendor is None or device is None:
        return None
    return FunctionRecord(address=address, vendor=vendor, device=device,
                          class_code=parse_bounded(view.attr("class"), 16, CLASS_MAX) or 0, driver=view.link("driver"),
                          iommu_group=parse_int(view.link("iommu_group"), 10))


AMD = 0x1002
GPU_CLASSES = (0x03, 0x12)  # PCI base classes: display controller, processing accelerator
GPU_DRIVERS = ("amdgpu", "gim")


def unidentified_gpu(view: DeviceView) -> PciAddress | None:
    """For a function :func:`read_identity` skipped: its address if its vendor or device id cannot be
    read (unreadable, empty or garbage) but it may be a GPU (AMD's vendor id, a display or accelerator
    class, or amdgpu/gim bound), so discovery reports it instead of leaving it out of the plan."""
    try:
        address = PciAddress.parse(view.name)
    except ValueError:
        return None
    vendor = parse_bounded(view.attr("vendor"), 16, ID_MAX)
    if vendor is not None and vendor != AMD:
        return None
    if view.link("driver") in GPU_DRIVERS:
        return address
    class_code = parse_bounded(view.attr("class"), 16, CLASS_MAX)
    return address if class_code is None or (class_code >> 16) in GPU_CLASSES else None


def read_details(view: DeviceView, rec: FunctionRecord) -> FunctionRecord:
    """Fill in the rest for a function we care about (a catalog GPU or one of its VFs)."""
    sv, sd = (parse_bounded(view.attr(a), 16, ID_MAX) for a in ("subsystem_vendor", "subsystem_device"))
    rec.subsystem = (sv, sd) if sv is not None and sd is not None else None
    rec.numa_node = parse_numa_node(view.attr("numa_node"))
    physfn = view.link("physfn")
    rec.physfn = _address_or_none(physfn)
    rec.virtfns = _virtfns(view)
    rec.bars = parse_resource(view.attr("resource"))
    rec.link = Link(view.attr("current_link_speed"), parse_int(view.attr("current_link_width"), 10),
                    view.attr("max_link_speed"), parse_int(view.attr("max_link_width"), 10))
    rec.total_vfs = parse_int(view.attr("sriov_totalvfs"), 10)
    rec.num_vfs = parse_int(view.attr("sriov_numvfs"), 10)
    rec.vf_offset = parse_int(view.attr("sriov_offset"), 10)
    rec.vf_stride = parse_int(view.attr("sriov_stride"), 10)
    rec.partition = read_partition(view, rec.driver)
    return rec


def _virtfns(view: DeviceView) -> dict[int, PciAddress]:
    out: dict[int, PciAddress] = {}
    for name in view.link_names("virtfn"):
        index = parse_int(name[len("virtfn"):], 10)
        target = _address_or_none(view.link(name))
        if index is not None and target is not None:
            out[index] = target
    return dict(sorted(out.items()))


def _address_or_none(text: str | None) -> PciAddress | None:
    if not text:
        return None
    try:
        return PciAddress.parse(text)
    except ValueError:
        return None


def parse_resource(text: str | None) -> tuple[Bar, ...]:
    """BARs 0-5 from a sysfs ``resource`` file: one "start end flags" hex line per resource."""
    bars = []
    for index, line in enumerate((text or "").splitlines()[:_STANDARD_BARS]):
        parts = line.split()
        if len(parts) != 3:
            continue
        start, end, flags = (parse_int(p, 16) for p in parts)
        if start is None or end is None or flags is None or end <= start or not flags & IORESOURCE_MEM:
            continue
        bars.append(Bar(index=index, start=start, size=end - start + 1,
                        is_64bit=bool(flags & IORESOURCE_MEM_64), prefetchable=bool(flags & IORESOURCE_PREFETCH)))
    return tuple(bars)


def read_partition(view: DeviceView, driver: str | None) -> Partition:
    """Partition modes from whichever driver exposes them; an empty Partition when none does."""
    if driver == "gim":
        compute, memory = (_first_word(view.attr(a)) for a in GIM_PARTITION_ATTRS)
        if compute or memory:
            return Partition(compute=compute, memory=memory, source="gim")
    current_c, avail_c, current_m, avail_m = (view.attr(a) for a in AMDGPU_PARTITION_ATTRS)
    if current_c or current_m:
        return Partition(compute=_first_word(current_c), memory=_first_word(current_m),
                         available_compute=_split_modes(avail_c), available_memory=_split_modes(avail_m),
                         source="amdgpu")
    return Partition()


def _first_word(text: str | None) -> str | None:
    return text.split()[0].upper() if text and text.split() else None


def _split_modes(text: str | None) -> tuple[str, ...]:
    """"SPX, DPX, QPX, CPX" -> ("SPX", "DPX", "QPX", "CPX")."""
    return tuple(p.strip().upper() for p in (text or "").replace(",", " ").split() if p.strip())
