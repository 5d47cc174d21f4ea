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

    def libvirt_nodedev_name(self) -> str:
        """libvirt's node-device name: pci_0000_85_00_0."""
        return f"pci_{self.domain:04x}_{self.bus:02x}_{self.slot:02x}_{self.function}"

    def esxi_vmx_id(self) -> str:
        """ESXi VMX ``pciPassthruN.id`` form: every field DECIMAL, "%05d:%03d:%02d.%d" (HARDWARE.md 6)."""
        return f"{self.domain:05d}:{self.bus:03d}:{self.slot:02d}.{self.function}"
