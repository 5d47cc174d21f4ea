"""Editing an existing domain definition for huge-BAR GPU assignment (docs/hardware.md §5).

``DomainXml`` wraps the ElementTree of one persistent definition, keeps everything vgpu does not
own untouched, and changes it only through the typed pieces of ``vgpu.hypervisor.xml``.
``attach_functions``/``detach_functions`` are the two edits the hypervisor backends apply.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from vgpu.errors import RefusedError
from vgpu.hypervisor.xml import (FW_CFG_MMIO64, QEMU_NS, VGPU_NS, MmioWindow, PcieRootPort, PciHostdev,
                                 parse, referenced_functions, serialize)
from vgpu.model.pci import PciAddress

_Q = f"{{{QEMU_NS}}}"
_V = f"{{{VGPU_NS}}}"


class DomainXml:
    def __init__(self, root: ET.Element):
        if root.tag != "domain":
            raise RefusedError(f"expected a <domain> definition, got <{root.tag}>")
        self.root = root

    @classmethod
    def parse(cls, text: str, what: str = "domain XML") -> DomainXml:
        return cls(parse(text, what))

    def to_xml(self) -> str:
        return serialize(self.root)

    @property
    def name(self) -> str:
        return self.root.findtext("name", "").strip()

    @property
    def machine(self) -> str:
        node = self.root.find("os/type")
        return node.get("machine", "") if node is not None else ""

    def functions(self) -> tuple[PciAddress, ...]:
        return referenced_functions(self.root)

    def hostdevs(self) -> list[PciHostdev]:
        return [d for d in map(PciHostdev.from_element, self._devices().findall("hostdev")) if d]

    def uses_uefi(self) -> bool:
        """OVMF either by libvirt's firmware auto-selection or by an explicit pflash loader."""
        os_el = self.root.find("os")
        if os_el is None:
            return False
        loader = os_el.find("loader")
        return os_el.get("firmware") == "efi" or (loader is not None and (
            loader.get("type") == "pflash" or any(k in (loader.text or "") for k in ("OVMF", "edk2"))))

    def check_huge_bar_ready(self) -> None:
        """Refuse what no XML edit can fix safely: the machine type and the firmware (docs/hardware.md §5)."""
        if "q35" not in self.machine:
            raise RefusedError(
                f"VM {self.name} uses machine type {self.machine or 'unset'!r}; huge-BAR GPUs need q35 "
                "(each GPU behind its own PCIe root port)",
                hint="recreate the VM with a q35 machine (virt-install --machine q35) and OVMF firmware")
        if not self.uses_uefi():
            raise RefusedError(
                f"VM {self.name} boots with BIOS (SeaBIOS); huge-BAR GPUs need OVMF (UEFI) firmware to map "
                "64-bit BARs", hint="recreate the VM with UEFI firmware (virt-install --boot uefi)")

    # -- devices ---------------------------------------------------------------------------

    def _devices(self) -> ET.Element:
        devices = self.root.find("devices")
        return devices if devices is not None else ET.SubElement(self.root, "devices")

    def _pci_controllers(self) -> list[ET.Element]:
        return [c for c in self._devices().findall("controller") if c.get("type") == "pci"]

    def _pcie_root(self) -> ET.Element:
        for controller in self._pci_controllers():
            if controller.get("model") == "pcie-root":
                return controller
        root = ET.Element("controller", type="pci", index="0", model="pcie-root")
        self._devices().insert(0, root)
        return root

    def add_hostdev(self, address: PciAddress) -> bool:
        """Assign ``address`` behind a new pcie-root-port. False when already assigned (same device)."""
        if any(d.same_device(address) for d in self.hostdevs()):
            return False
        self._pcie_root()
        index = max(_int(c.get("index")) for c in self._pci_controllers()) + 1
        devices = self._devices()
        devices.append(PcieRootPort(index).to_element())
        devices.append(PciHostdev(address, managed=True, guest_bus=index).to_element())
        return True

    def remove_hostdev(self, address: PciAddress) -> bool:
        """Remove the hostdev for ``address`` and its root port when nothing else sits behind it."""
        devices = self._devices()
        for element in devices.findall("hostdev"):
            dev = PciHostdev.from_element(element)
            if dev and dev.same_device(address):
                devices.remove(element)
                if dev.guest_bus is not None:
                    self._drop_idle_root_port(dev.guest_bus)
                return True
        return False

    def _drop_idle_root_port(self, bus: int) -> None:
        devices = self._devices()
        for device in devices:
            guest = device.find("address")  # the guest-side address; host ones sit under <source>
            if guest is not None and guest.get("type") == "pci" and _int(guest.get("bus")) == bus:
                return  # another device still sits behind it
        for controller in self._pci_controllers():
            if controller.get("model") == "pcie-root-port" and _int(controller.get("index")) == bus:
                devices.remove(controller)

    # -- huge-BAR settings -----------------------------------------------------------------

    def set_host_cpu(self) -> None:
        """``<cpu mode='host-passthrough'><maxphysaddr mode='passthrough'/>``: the guest sees the
        host's physical address width, else OVMF's 64-bit window is too small (docs/hardware.md §5)."""
        cpu = self.root.find("cpu")
        if cpu is None:
            cpu = ET.SubElement(self.root, "cpu")
        cpu.set("mode", "host-passthrough")
        cpu.attrib.pop("match", None)  # only meaningful for mode='custom'
        for child in [c for c in cpu if c.tag in ("model", "vendor", "maxphysaddr")]:
            cpu.remove(child)
        ET.SubElement(cpu, "maxphysaddr", mode="passthrough")

    def mmio_bytes(self) -> int:
        return MmioWindow.from_pcihole64(self._pcie_root().find("pcihole64"))

    def set_mmio_window(self, window: MmioWindow) -> None:
        """``<pcihole64>`` on pcie-root plus OVMF's fw_cfg minimum through ``<qemu:commandline>``."""
        root = self._pcie_root()
        for old in root.findall("pcihole64"):
            root.remove(old)
        root.insert(0, window.pcihole64_element())
        cmdline = self.root.find(f"{_Q}commandline")
        if cmdline is None:
            cmdline = ET.SubElement(self.root, f"{_Q}commandline")
        args = cmdline.findall(f"{_Q}arg")
        for previous, arg in zip(args, args[1:], strict=False):
            ours = arg.get("value", "").startswith(f"name={FW_CFG_MMIO64},")
            if ours and previous.get("value") == "-fw_cfg":
                arg.set("value", window.fw_cfg_value())
                return
        ET.SubElement(cmdline, f"{_Q}arg", value="-fw_cfg")
        ET.SubElement(cmdline, f"{_Q}arg", value=window.fw_cfg_value())

    def set_numa(self, nodes: set[int], node_cpus: Mapping[int, Sequence[int]]) -> None:
        """Pin memory (``<numatune>``) to ``nodes`` and vCPUs to their CPUs where the host lists them."""
        numatune = self.root.find("numatune")
        if numatune is None:
            numatune = ET.SubElement(self.root, "numatune")
        memory = numatune.find("memory")
        if memory is None:
            memory = ET.SubElement(numatune, "memory")
        memory.attrib.update(mode="strict", nodeset=format_cpulist(nodes))
        memory.attrib.pop("placement", None)
        cpus = {c for n in nodes for c in node_cpus.get(n, ())}
        vcpu = self.root.find("vcpu")
        if cpus and vcpu is not None:
            vcpu.set("cpuset", format_cpulist(cpus))
            vcpu.set("placement", "static")

    def numa_nodes(self) -> set[int]:
        memory = self.root.find("numatune/memory")
        return parse_cpulist(memory.get("nodeset", "")) if memory is not None else set()

    # -- vgpu's record of what it assigned (in <metadata>) ---------------------------------

    def _record(self) -> ET.Element:
        metadata = self.root.find("metadata")
        if metadata is None:
            metadata = ET.Element("metadata")
            self.root.insert(_after_ids(self.root), metadata)
        record = metadata.find(f"{_V}assigned")
        return record if record is not None else ET.SubElement(metadata, f"{_V}assigned")

    def recorded_bars(self) -> dict[PciAddress, int]:
        """{function: 64-bit BAR bytes} for what vgpu assigned to this domain."""
        return {PciAddress.parse(f.get("address", "")): max(0, _int(f.get("bar64")))
                for f in self._record().findall(f"{_V}function")}

    def record(self, address: PciAddress, bar64: int) -> None:
        ET.SubElement(self._record(), f"{_V}function", address=str(address), bar64=str(bar64))

    def forget(self, address: PciAddress) -> None:
        record = self._record()
        for f in record.findall(f"{_V}function"):
            if f.get("address") == str(address):
                record.remove(f)


def _int(text: str | None) -> int:
    """An index/bus attribute as libvirt writes it (decimal or 0x-hex); -1 when absent or bad."""
    try:
        return int(text or "", 0)
    except ValueError:
        return -1


def _after_ids(root: ET.Element) -> int:
    """Insert position after <name>/<uuid>/<title>/<description>, where libvirt's schema wants ids."""
    positions = [i for i, c in enumerate(root) if c.tag in ("name", "uuid", "genid", "title", "description")]
    return positions[-1] + 1 if positions else 0


def parse_cpulist(text: str) -> set[int]:
    """"0-3,8" -> {0, 1, 2, 3, 8}; an exclusion ("^2") or garbage gives an empty set (replace it)."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return set()
        out.update(range(int(low), int(high or low) + 1))
    return out


def format_cpulist(values: set[int]) -> str:
    """{0, 1, 2, 3, 8} -> "0-3,8"."""
    ranges: list[list[int]] = []
    for v in sorted(values):
        if ranges and v == ranges[-1][1] + 1:
            ranges[-1][1] = v
        else:
            ranges.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def attach_functions(doc: DomainXml, addresses: Sequence[PciAddress], *, numa_node: int | None,
                     bar64_bytes: int, node_cpus: Mapping[int, Sequence[int]] | None = None
                     ) -> list[PciAddress]:
    """Apply docs/hardware.md §5 to ``doc``: hostdevs behind root ports, host CPU with the host's address
    width, an MMIO window covering every function vgpu assigned, NUMA pinning. Returns the added
    functions ([] when all were there already: nothing is changed then)."""
    doc.check_huge_bar_ready()
    added = [a for a in addresses if doc.add_hostdev(a)]
    if not added:
        return []
    share, rest = divmod(bar64_bytes, len(addresses))  # bar64_bytes covers all of `addresses`
    for i, address in enumerate(added):
        doc.record(address, share + (rest if i == 0 else 0))
    doc.set_host_cpu()
    window = MmioWindow.for_bars(sum(doc.recorded_bars().values()))
    if window is not None and window.size_bytes > doc.mmio_bytes():
        doc.set_mmio_window(window)  # never shrink: a window set by hand may cover other devices
    if numa_node is not None:
        doc.set_numa(doc.numa_nodes() | {numa_node}, node_cpus or {})
    return added


def detach_functions(doc: DomainXml, addresses: Sequence[PciAddress]) -> list[PciAddress]:
    """Remove the hostdevs (and their idle root ports and records). The CPU mode, MMIO window
    and NUMA pinning stay: they are harmless without the device, and may have been set by hand."""
    removed = [a for a in addresses if doc.remove_hostdev(a)]
    for address in removed:
        doc.forget(address)
    return removed
