"""PCI addresses, parsed once at the edge and compared as values."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from vgpu.errors import InputError

# domain:bus:device.function, as sysfs names functions ("0000:85:00.0"). The domain may be
# omitted on input ("85:00.0"), as lspci prints it; it is then 0000.
_BDF = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<slot>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


@total_ordering
@dataclass(frozen=True, slots=True)
class PciAddress:
    domain: int
    bus: int
    slot: int
    function: int

    def __post_init__(self) -> None:
        if not (0 <= self.domain <= 0xFFFFFFFF and 0 <= self.bus <= 0xFF
                and 0 <= self.slot <= 0x1F and 0 <= self.function <= 7):
            raise InputError(f"PCI address out of range: {self!r}")

    @classmethod
    def parse(cls, text: str) -> "PciAddress":
        """Parse ``[dddd:]bb:ss.f``. Raises InputError naming the bad text."""
        match = _BDF.match(text.strip()) if isinstance(text, str) else None
        if not match:
            raise InputError(
                f"not a PCI address: {text!r}",
                hint="use the sysfs form domain:bus:device.function, e.g. 0000:85:00.0",
            )
        slot = int(match["slot"], 16)
        if slot > 0x1F:
            raise InputError(f"not a PCI address: {text!r} (device number {slot:#x} is above 0x1f)")
        return cls(int(match["domain"] or "0", 16), int(match["bus"], 16), slot, int(match["function"]))

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, PciAddress):
            return NotImplemented
        return self._key() < other._key()

    def _key(self) -> tuple[int, int, int, int]:
        return (self.domain, self.bus, self.slot, self.function)

    @property
    def routing_id(self) -> int:
        """The 16-bit PCIe routing ID: bus << 8 | device << 3 | function."""
        return self.bus << 8 | self.slot << 3 | self.function

    def virtfn(self, offset: int, stride: int, index: int) -> "PciAddress":
        """The address of VF ``index`` (0-based) of this PF, from the SR-IOV capability's First VF
        Offset and VF Stride (sysfs ``sriov_offset``/``sriov_stride``): RID = PF RID + offset + index * stride.
        Raises InputError when that leaves the 256 buses of the domain."""
        rid = self.routing_id + offset + index * stride
        if not 0 <= rid <= 0xFFFF:
            raise InputError(f"VF {index} of {self} would be outside its PCI domain (offset {offset}, stride {stride})")
        return PciAddress(self.domain, rid >> 8, (rid >> 3) & 0x1F, rid & 7)

    def libvirt_nodedev_name(self) -> str:
        """libvirt's node-device name: pci_0000_85_00_0."""
        return f"pci_{self.domain:04x}_{self.bus:02x}_{self.slot:02x}_{self.function}"

    def esxi_vmx_id(self) -> str:
        """ESXi VMX ``pciPassthruN.id`` form: every field DECIMAL, "%05d:%03d:%02d.%d" (docs/hardware.md §6)."""
        return f"{self.domain:05d}:{self.bus:03d}:{self.slot:02d}.{self.function}"
