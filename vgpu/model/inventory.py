"""The host as discovery saw it: GPUs, their VFs and IOMMU groups, plus host readiness.

Pure data. ``Inventory.to_dict()`` is the versioned JSON document that ``vgpu discover --json``
prints (schema: docs/inventory-schema.md, vgpu/schemas/inventory-v2.json). PCI ids are written the way
sysfs, lspci, amd-smi and libvirt write them: lower-case hex strings, ``"0x74a1"``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

from vgpu.model.pci import PciAddress

INVENTORY_SCHEMA = "vgpu.inventory/v2"  # v2: PCI ids as "0x74a1" strings (v1: integers)
# Keys whose integer values are PCI ids (vendor, device, subsystem vendor/device), written in hex in JSON.
PCI_ID_KEYS = frozenset({"vendor", "device", "device_id", "subsystem"})


@dataclass(frozen=True)
class Bar:
    index: int
    start: int
    size: int
    is_64bit: bool
    prefetchable: bool


@dataclass(frozen=True)
class GroupMember:
    """A function in an IOMMU group. ``vendor``/``device`` let the operator see non-GPU members."""

    address: PciAddress
    vendor: int
    device: int
    driver: str | None
    is_bridge: bool = False


@dataclass(frozen=True)
class IommuGroup:
    number: int
    members: tuple[GroupMember, ...]

    def others(self, *addresses: PciAddress) -> tuple[GroupMember, ...]:
        """Members other than ``addresses``: they must go to vfio-pci together with them."""
        return tuple(m for m in self.members if m.address not in addresses)


@dataclass(frozen=True)
class Link:
    speed: str | None  # as sysfs prints it, e.g. "32.0 GT/s PCIe"
    width: int | None
    max_speed: str | None = None
    max_width: int | None = None


@dataclass(frozen=True)
class VirtualFunction:
    address: PciAddress
    index: int  # N of the PF's virtfnN link
    device_id: int
    driver: str | None
    iommu_group: IommuGroup | None
    numa_node: int | None
    holders: tuple[str, ...] = ()  # VMs or processes using it, filled in by hypervisor look-ups


@dataclass(frozen=True)
class Partition:
    """Partition modes as the bound driver exposes them (GIM or amdgpu); None where not exposed."""

    compute: str | None = None
    memory: str | None = None
    available_compute: tuple[str, ...] = ()
    available_memory: tuple[str, ...] = ()
    source: str | None = None  # "gim" | "amdgpu"


@dataclass(frozen=True)
class Gpu:
    address: PciAddress
    model: str
    device_id: int
    subsystem: tuple[int, int] | None
    driver: str | None
    numa_node: int | None
    iommu_group: IommuGroup | None
    bars: tuple[Bar, ...]
    link: Link
    total_vfs: int | None
    num_vfs: int | None
    partition: Partition
    vfs: tuple[VirtualFunction, ...] = ()
    vf_offset: int | None = None  # SR-IOV First VF Offset / VF Stride: where VFs will appear
    vf_stride: int | None = None

    def vf_addresses(self, count: int) -> tuple[PciAddress, ...] | None:
        """The addresses ``count`` VFs of this PF have (the present ones when there are that many),
        or None when the PF does not report its SR-IOV offset and stride."""
        if len(self.vfs) == count:
            return tuple(vf.address for vf in self.vfs)
        if self.vf_offset is None or self.vf_stride is None or (count > 1 and self.vf_stride <= 0):
            return None
        return tuple(self.address.virtfn(self.vf_offset, self.vf_stride, i) for i in range(count))

    @property
    def bar64_bytes(self) -> int:
        """Sum of the 64-bit BARs: what a VM's MMIO window must hold for this function."""
        return sum(b.size for b in self.bars if b.is_64bit)


class Severity(str, Enum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    """One readiness fact: what was seen, how bad it is, what to do."""

    check: str
    severity: Severity
    message: str
    fix: str | None = None


@dataclass(frozen=True)
class ModuleInfo:
    name: str
    loaded: bool
    version: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HostFacts:
    """Raw host-wide facts discovery read; readiness findings are derived from these."""

    iommu_groups: int
    iommu_units: int
    cmdline: str | None
    modules: dict[str, ModuleInfo]
    hugepages_1g: int | None
    hugepages_2m: int | None
    blacklisted: tuple[str, ...]  # modules blacklisted via cmdline or modprobe.d
    dev_vfio_groups: tuple[int, ...] | None = None  # None: /dev unknown (a capture)
    modprobe_options: dict[str, dict[str, str]] = field(default_factory=dict)  # from modprobe.d
    cpu_vendor: str | None = None  # "AuthenticAMD" / "GenuineIntel" from /proc/cpuinfo
    # the host OS and kernel, which AMD's GIM support tables are keyed by (docs/hardware.md §9);
    # None: not readable (a bare sysfs capture, an older snapshot)
    os_id: str | None = None  # /etc/os-release ID, e.g. "ubuntu"
    os_version: str | None = None  # /etc/os-release VERSION_ID, e.g. "24.04"
    kernel_release: str | None = None  # /proc/sys/kernel/osrelease (`uname -r`)


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[Gpu, ...]
    facts: HostFacts
    findings: tuple[Finding, ...] = ()
    source: str = "/sys"
    unidentified: tuple[PciAddress, ...] = ()  # functions that may be GPUs but whose ids cannot be read
    platform: str = "linux"  # "linux" (sysfs/udev, KVM) or "esxi" (the vSphere API)

    @property
    def ready(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings)

    def gpu(self, address: PciAddress) -> Gpu | None:
        return next((g for g in self.gpus if g.address == address), None)

    def function(self, address: PciAddress) -> Gpu | VirtualFunction | None:
        for g in self.gpus:
            if g.address == address:
                return g
            for vf in g.vfs:
                if vf.address == address:
                    return vf
        return None

    def to_dict(self) -> dict:
        return {"schema": INVENTORY_SCHEMA, "source": self.source, "ready": self.ready,
                "gpus": [_jsonable(asdict(g)) for g in self.gpus],
                "host": _jsonable(asdict(self.facts)),
                "findings": [_jsonable(asdict(f)) for f in self.findings], "platform": self.platform}


def pci_id(value: int) -> str:
    """A PCI vendor or device id as sysfs writes it: ``0x74a1`` (lower case, 4 hex digits)."""
    return f"0x{value:04x}"


def _jsonable(value):
    """asdict() output -> JSON types: addresses as strings, enums as values, tuples as lists, PCI ids in hex."""
    if isinstance(value, dict):
        if set(value) == {"domain", "bus", "slot", "function"}:
            return str(PciAddress(**value))
        return {k: _pci_ids(v) if k in PCI_ID_KEYS else _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, PciAddress):
        return str(value)
    return value


def _pci_ids(value):
    """An id field's value: an int or a (vendor, device) pair of ints become hex strings; anything else as is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return pci_id(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [pci_id(v) for v in value]
    return _jsonable(value)
