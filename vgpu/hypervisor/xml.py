"""libvirt XML as small typed objects with one parser, one serializer and a "same device?" matcher.

After virt-manager's ``virtinst/devices/hostdev.py``: each
piece of domain XML that vgpu writes is a frozen dataclass with ``to_element()`` and, where vgpu
also reads it, ``from_element()``. Nothing builds XML by string formatting.
"""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from vgpu.errors import InputError
from vgpu.model.pci import PciAddress

QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
TEST_NS = "http://libvirt.org/schemas/domain/test/1.0"
# vgpu's own <metadata> namespace: libvirt keeps foreign-namespace metadata verbatim.
VGPU_NS = "urn:x-vgpu:libvirt:1"
for _prefix, _uri in (("qemu", QEMU_NS), ("test", TEST_NS), ("vgpu", VGPU_NS)):
    ET.register_namespace(_prefix, _uri)

# libvirt refuses '/' in names; control characters and leading dots only cause grief in paths.
_DOMAIN_NAME = re.compile(r"^[^/\x00-\x1f.][^/\x00-\x1f]{0,199}$")


def parse(text: str, what: str) -> ET.Element:
    """Parse XML text. Raises InputError naming ``what`` when it is not well-formed."""
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise InputError(f"{what} is not well-formed XML: {exc}") from exc


def serialize(element: ET.Element) -> str:
    """The one serializer: indented text, namespaces declared once on the root."""
    out = copy.deepcopy(element)
    ET.indent(out)
    return ET.tostring(out, encoding="unicode") + "\n"


def check_domain_name(name: object) -> str:
    if not isinstance(name, str) or not _DOMAIN_NAME.match(name):
        raise InputError(f"not a usable VM name: {name!r}",
                         hint="use 1-200 printable characters without '/' that do not start with '.'")
    return name


def _hex_attr(element: ET.Element, key: str, default: int | None = None) -> int:
    text = element.get(key)
    if text is None and default is not None:
        return default
    try:
        return int(text, 0)  # libvirt writes 0x-prefixed hex but also accepts decimal
    except (TypeError, ValueError) as exc:
        raise InputError(f"PCI <address> has a bad {key}={text!r}") from exc


def address_from_element(element: ET.Element) -> PciAddress:
    """``<address domain='0x0000' bus='0x85' slot='0x02' function='0x0'/>`` -> PciAddress."""
    return PciAddress(_hex_attr(element, "domain", 0), _hex_attr(element, "bus"),
                      _hex_attr(element, "slot"), _hex_attr(element, "function"))


def address_element(address: PciAddress, *, pci_type: bool = False) -> ET.Element:
    attrs = {"type": "pci"} if pci_type else {}
    attrs.update(domain=f"0x{address.domain:04x}", bus=f"0x{address.bus:02x}",
                 slot=f"0x{address.slot:02x}", function=f"0x{address.function:x}")
    return ET.Element("address", attrs)


@dataclass(frozen=True)
class PciHostdev:
    """``<hostdev mode='subsystem' type='pci'>``: a host function assigned to the guest.

    ``guest_bus`` is the index of the pcie-root-port the function sits behind in the guest
    (docs/hardware.md §5: one root port per GPU); None lets libvirt place it.
    """

    source: PciAddress
    managed: bool = True
    guest_bus: int | None = None

    def to_element(self) -> ET.Element:
        host = ET.Element("hostdev", mode="subsystem", type="pci", managed="yes" if self.managed else "no")
        ET.SubElement(host, "source").append(address_element(self.source))
        if self.guest_bus is not None:
            host.append(address_element(PciAddress(0, self.guest_bus, 0, 0), pci_type=True))
        return host

    @classmethod
    def from_element(cls, element: ET.Element) -> PciHostdev | None:
        """The hostdev read back, or None for anything that is not a PCI subsystem hostdev."""
        if element.tag != "hostdev" or element.get("type") != "pci":
            return None
        if element.get("mode", "subsystem") != "subsystem":
            return None
        source = element.find("source/address")
        if source is None:
            return None
        guest = element.find("address")
        bus = _hex_attr(guest, "bus") if guest is not None and guest.get("type") == "pci" else None
        return cls(address_from_element(source), element.get("managed") == "yes", bus)

    def same_device(self, other: PciHostdev | PciAddress) -> bool:
        """Same host function? (virtinst compares hostdevs by source address only.)"""
        return self.source == (other.source if isinstance(other, PciHostdev) else other)


def referenced_functions(domain: ET.Element) -> tuple[PciAddress, ...]:
    """Every host PCI function a domain's XML assigns: PCI hostdevs and ``<interface type='hostdev'>``
    (an SR-IOV NIC VF is assigned that way), in document order, without duplicates."""
    found: list[PciAddress] = []
    for element in domain.findall("devices/*"):
        if element.tag == "hostdev":
            dev = PciHostdev.from_element(element)
            address = dev.source if dev else None
        elif element.tag == "interface" and element.get("type") == "hostdev":
            source = element.find("source/address")
            is_pci = source is not None and source.get("type") == "pci"
            address = address_from_element(source) if is_pci else None
        else:
            continue
        if address is not None and address not in found:
            found.append(address)
    return tuple(found)


@dataclass(frozen=True)
class PcieRootPort:
    """``<controller type='pci' model='pcie-root-port'>``: one per assigned GPU function."""

    index: int

    def to_element(self) -> ET.Element:
        return ET.Element("controller", type="pci", index=str(self.index), model="pcie-root-port")


MIB = 1 << 20
FW_CFG_MMIO64 = "opt/ovmf/X-PciMmio64Mb"


@dataclass(frozen=True)
class MmioWindow:
    """The guest's 64-bit MMIO window for huge BARs (docs/hardware.md §5).

    Sized like the ESXi rule in docs/hardware.md §6: the sum of the 64-bit BARs doubled, rounded up to
    a power of two. BARs are naturally aligned, so a window exactly the size of the sum rarely
    fits them; the doubling also leaves room for the root ports' own prefetchable windows.
    """

    size_bytes: int

    @classmethod
    def for_bars(cls, bar64_bytes: int) -> MmioWindow | None:
        if bar64_bytes <= 0:
            return None
        return cls(max(MIB, 1 << (2 * bar64_bytes - 1).bit_length()))

    @property
    def kib(self) -> int:
        return self.size_bytes >> 10

    @property
    def mib(self) -> int:
        return self.size_bytes >> 20

    def pcihole64_element(self) -> ET.Element:
        element = ET.Element("pcihole64", unit="KiB")
        element.text = str(self.kib)
        return element

    def fw_cfg_value(self) -> str:
        """The ``-fw_cfg`` argument OVMF reads as a minimum aperture in MiB (edk2 OvmfPkg)."""
        return f"name={FW_CFG_MMIO64},string={self.mib}"

    @staticmethod
    def from_pcihole64(element: ET.Element | None) -> int:
        """Bytes in an existing ``<pcihole64>`` (0 when absent or unreadable)."""
        if element is None or not (element.text or "").strip().isdigit():
            return 0
        factor = {"b": 1, "bytes": 1, "kib": 1 << 10, "k": 1 << 10, "mib": MIB, "m": MIB,
                  "gib": 1 << 30, "g": 1 << 30}.get(element.get("unit", "KiB").lower(), 1 << 10)
        return int(element.text.strip()) * factor


@dataclass(frozen=True)
class DomainSpec:
    """A whole new domain: what the simulated hypervisor defines and what tests validate.

    ``firmware`` is "efi" (OVMF, chosen by libvirt's firmware auto-selection) or None for BIOS.
    """

    name: str
    uuid: str
    memory_mib: int = 4096
    vcpus: int = 4
    machine: str = "q35"
    firmware: str | None = "efi"
    virt_type: str = "kvm"
    hostdevs: tuple[PciHostdev, ...] = ()

    def to_element(self) -> ET.Element:
        check_domain_name(self.name)
        root = ET.Element("domain", type=self.virt_type)
        for tag, text in (("name", self.name), ("uuid", self.uuid)):
            ET.SubElement(root, tag).text = text
        ET.SubElement(root, "memory", unit="MiB").text = str(self.memory_mib)
        ET.SubElement(root, "vcpu").text = str(self.vcpus)
        os_el = ET.SubElement(root, "os", {"firmware": self.firmware} if self.firmware else {})
        ET.SubElement(os_el, "type", arch="x86_64", machine=self.machine).text = "hvm"
        features = ET.SubElement(root, "features")
        ET.SubElement(features, "acpi")
        ET.SubElement(features, "apic")
        devices = ET.SubElement(root, "devices")
        if "q35" in self.machine:
            devices.append(ET.Element("controller", type="pci", index="0", model="pcie-root"))
        for dev in self.hostdevs:
            devices.append(dev.to_element())
        return root

    def to_xml(self) -> str:
        return serialize(self.to_element())
