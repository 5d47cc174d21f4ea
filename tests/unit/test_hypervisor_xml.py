"""Typed libvirt XML: hostdev round-trip and matching, reading what domains reference, sizing."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypervisor_helpers import GIB, VF0, VF1, domain_xml, virt_xml_validate

from vgpu.errors import InputError
from vgpu.hypervisor.domain import DomainXml, attach_functions, format_cpulist, parse_cpulist
from vgpu.hypervisor.xml import (MmioWindow, PciHostdev, address_from_element, check_domain_name, parse,
                                 referenced_functions, serialize)
from vgpu.model.pci import PciAddress


@pytest.mark.parametrize("dev", [PciHostdev(VF0), PciHostdev(VF1, managed=False, guest_bus=7),
                                 PciHostdev(PciAddress.parse("10000:ff:1f.7"), guest_bus=255)])
def test_hostdev_round_trips_through_the_serializer(dev):
    back = PciHostdev.from_element(parse(serialize(dev.to_element()), "hostdev"))
    assert back == dev and back.same_device(dev)


def test_same_device_compares_the_host_function_only():
    placed = PciHostdev(VF0, managed=False, guest_bus=3)
    assert placed.same_device(PciHostdev(VF0)) and placed.same_device(VF0)
    assert not placed.same_device(PciHostdev(VF1, managed=False, guest_bus=3))


def test_hostdev_reads_libvirt_hex_and_decimal_attributes():
    element = parse("<hostdev mode='subsystem' type='pci'><source>"
                    "<address domain='0' bus='133' slot='0x02' function='1'/></source></hostdev>", "t")
    assert PciHostdev.from_element(element).source == PciAddress.parse("0000:85:02.1")


@pytest.mark.parametrize("text", [
    "<hostdev mode='subsystem' type='usb'><source><vendor id='0x1'/></source></hostdev>",
    "<hostdev mode='capabilities' type='storage'><source><block>/dev/sda</block></source></hostdev>",
    "<hostdev mode='subsystem' type='pci'/>",
])
def test_non_pci_hostdevs_are_not_read_as_functions(text):
    assert PciHostdev.from_element(parse(text, "t")) is None


def test_referenced_functions_covers_hostdevs_and_hostdev_interfaces_once():
    root = parse(domain_xml("vm", [VF0, VF0]), "t")
    nic = ET.SubElement(root.find("devices"), "interface", type="hostdev")
    ET.SubElement(ET.SubElement(nic, "source"), "address", type="pci", domain="0x0000", bus="0xc1",
                  slot="0x00", function="0x3")
    ET.SubElement(root.find("devices"), "interface", type="network")
    assert referenced_functions(root) == (VF0, PciAddress.parse("0000:c1:00.3"))


@pytest.mark.parametrize("attrs, bad", [({"bus": "0xzz", "slot": "0", "function": "0"}, "bus='0xzz'"),
                                        ({"slot": "0", "function": "0"}, "bus=None"),
                                        ({"bus": "0x85", "slot": "0x40", "function": "0"}, "out of range")])
def test_bad_source_address_is_one_clear_error(attrs, bad):
    with pytest.raises(InputError) as caught:
        address_from_element(ET.Element("address", attrs))
    assert bad in str(caught.value) and "\n" not in str(caught.value)


def test_malformed_xml_names_what_it_was():
    with pytest.raises(InputError, match=r"^VM x's XML is not well-formed XML: "):
        parse("<domain><name>x</domain>", "VM x's XML")


@pytest.mark.parametrize("name", ["", "a/b", ".hidden", "tab\there", "x" * 201, None, 7])
def test_unusable_vm_names_are_refused(name):
    with pytest.raises(InputError, match="not a usable VM name"):
        check_domain_name(name)


@pytest.mark.parametrize("bar64, window", [(0, None), (1, 1 << 20), (64 * GIB, 128 * GIB),
                                           (96 * GIB, 256 * GIB), (256 * GIB, 512 * GIB)])
def test_mmio_window_doubles_the_bars_to_a_power_of_two(bar64, window):
    got = MmioWindow.for_bars(bar64)
    assert (got.size_bytes if got else None) == window


def test_mmio_window_units_for_libvirt_and_ovmf():
    window = MmioWindow.for_bars(64 * GIB)
    assert window.kib == 128 * GIB // 1024
    assert window.fw_cfg_value() == "name=opt/ovmf/X-PciMmio64Mb,string=131072"
    assert MmioWindow.from_pcihole64(window.pcihole64_element()) == 128 * GIB
    assert MmioWindow.from_pcihole64(parse("<pcihole64 unit='GiB'>4</pcihole64>", "t")) == 4 * GIB


@pytest.mark.parametrize("text, values", [("0-3,8", {0, 1, 2, 3, 8}), ("5", {5}), ("", set()), ("^2", set())])
def test_cpulist_parsing(text, values):
    assert parse_cpulist(text) == values


def test_cpulist_formats_ranges():
    assert format_cpulist({8, 0, 1, 2, 3, 10, 11}) == "0-3,8,10-11"
    assert parse_cpulist(format_cpulist({4, 5, 6, 9})) == {4, 5, 6, 9}


def test_generated_domain_passes_libvirts_schema(tmp_path):
    result = virt_xml_validate(tmp_path, domain_xml("vm", [VF0]))
    assert result.returncode == 0, result.stderr


def test_attached_domain_passes_libvirts_schema(tmp_path):
    doc = DomainXml.parse(domain_xml("vm"))
    cpu = ET.SubElement(doc.root, "cpu", mode="custom", match="exact")
    ET.SubElement(cpu, "model").text = "EPYC-Genoa"
    ET.SubElement(cpu, "topology", sockets="1", dies="1", cores="2", threads="2")
    attach_functions(doc, [VF0, VF1], numa_node=1, bar64_bytes=128 * GIB, node_cpus={1: (4, 5, 6, 7)})
    result = virt_xml_validate(tmp_path, doc.to_xml())
    assert result.returncode == 0, result.stderr


def test_schema_check_catches_a_broken_hostdev(tmp_path):
    """The validator really validates: a PCI hostdev without its source is refused."""
    root = parse(domain_xml("vm"), "t")
    ET.SubElement(root.find("devices"), "hostdev", mode="subsystem", type="pci")
    assert virt_xml_validate(tmp_path, serialize(root)).returncode != 0
