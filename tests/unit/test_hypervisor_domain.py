"""The huge-BAR edit of a domain definition (docs/hardware.md §5), on XML alone."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypervisor_helpers import GIB, VF0, VF1, VF2, domain_xml

from vgpu.errors import RefusedError
from vgpu.hypervisor.domain import DomainXml, attach_functions, detach_functions
from vgpu.hypervisor.xml import QEMU_NS

Q = f"{{{QEMU_NS}}}"


def attached(functions=(VF0, VF1), bar64=128 * GIB, numa=None, cpus=None, doc=None) -> DomainXml:
    doc = doc or DomainXml.parse(domain_xml("vm"))
    attach_functions(doc, list(functions), numa_node=numa, bar64_bytes=bar64, node_cpus=cpus)
    return doc


def fw_cfg_args(doc: DomainXml) -> list[str]:
    return [a.get("value") for a in doc.root.iter(f"{Q}arg")]


def test_each_function_sits_behind_its_own_root_port():
    doc = attached()
    ports = {int(c.get("index")) for c in doc.root.iter("controller") if c.get("model") == "pcie-root-port"}
    buses = [d.guest_bus for d in doc.hostdevs()]
    assert sorted(buses) == sorted(ports) and len(set(buses)) == 2
    assert [d.source for d in doc.hostdevs()] == [VF0, VF1] and all(d.managed for d in doc.hostdevs())


def test_root_ports_take_free_controller_indexes():
    doc = DomainXml.parse(domain_xml("vm"))
    ET.SubElement(doc.root.find("devices"), "controller", type="pci", index="5", model="pcie-root-port")
    attached(doc=doc)
    assert sorted(d.guest_bus for d in doc.hostdevs()) == [6, 7]


def test_cpu_becomes_host_passthrough_with_the_hosts_address_width():
    doc = DomainXml.parse(domain_xml("vm"))
    cpu = ET.SubElement(doc.root, "cpu", mode="custom", match="exact")
    ET.SubElement(cpu, "model").text = "EPYC"
    ET.SubElement(cpu, "topology", sockets="1", cores="2", threads="1")
    attached(doc=doc)
    cpu = doc.root.find("cpu")
    assert cpu.attrib == {"mode": "host-passthrough"} and cpu.find("model") is None
    assert cpu.find("topology") is not None and cpu.find("maxphysaddr").attrib == {"mode": "passthrough"}


def test_mmio_window_is_sized_from_the_bars_in_libvirt_and_ovmf():
    doc = attached(bar64=128 * GIB)
    hole = doc.root.find("devices/controller[@model='pcie-root']/pcihole64")
    assert (hole.get("unit"), hole.text) == ("KiB", str(256 * GIB // 1024))
    assert fw_cfg_args(doc) == ["-fw_cfg", "name=opt/ovmf/X-PciMmio64Mb,string=262144"]


def test_second_attach_grows_the_window_for_every_assigned_function_without_duplicating_fw_cfg():
    doc = attached(functions=[VF0], bar64=64 * GIB)
    attached(functions=[VF1, VF2], bar64=128 * GIB, doc=doc)
    assert doc.recorded_bars() == {VF0: 64 * GIB, VF1: 64 * GIB, VF2: 64 * GIB}
    assert fw_cfg_args(doc) == ["-fw_cfg", "name=opt/ovmf/X-PciMmio64Mb,string=524288"]


def test_a_larger_window_set_by_hand_is_kept():
    doc = DomainXml.parse(domain_xml("vm"))
    root = doc.root.find("devices/controller[@model='pcie-root']")
    ET.SubElement(root, "pcihole64", unit="GiB").text = "1024"
    attached(doc=doc, bar64=64 * GIB)
    assert doc.mmio_bytes() == 1024 * GIB and fw_cfg_args(doc) == []


def test_numa_pins_memory_and_vcpus_to_the_devices_node():
    doc = attached(numa=1, cpus={0: (0, 1), 1: (2, 3, 4, 5)})
    assert doc.root.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "1"}
    assert doc.root.find("vcpu").get("cpuset") == "2-5"
    attached(functions=[VF2], numa=0, cpus={0: (0, 1), 1: (2, 3, 4, 5)}, doc=doc)
    assert doc.root.find("numatune/memory").get("nodeset") == "0-1"
    assert doc.root.find("vcpu").get("cpuset") == "0-5"


def test_no_numa_node_leaves_placement_alone():
    doc = attached(numa=None)
    assert doc.root.find("numatune") is None and doc.root.find("vcpu").get("cpuset") is None


def test_attaching_the_same_functions_again_changes_nothing():
    doc = attached()
    before = doc.to_xml()
    assert attach_functions(doc, [VF1, VF0], numa_node=None, bar64_bytes=128 * GIB) == []
    assert doc.to_xml() == before


@pytest.mark.parametrize("machine", ["pc-i440fx-7.2", "pc", ""])
def test_attach_refuses_a_machine_that_is_not_q35(machine):
    doc = DomainXml.parse(domain_xml("old-vm", machine=machine))
    with pytest.raises(RefusedError, match="VM old-vm uses machine type .*; huge-BAR GPUs need q35") as err:
        attached(doc=doc)
    assert "q35" in err.value.hint and doc.hostdevs() == []


def test_attach_refuses_a_bios_domain():
    doc = DomainXml.parse(domain_xml("bios-vm", firmware=None))
    with pytest.raises(RefusedError, match=r"^VM bios-vm boots with BIOS \(SeaBIOS\); .* need OVMF"):
        attached(doc=doc)


def test_an_explicit_ovmf_loader_counts_as_uefi():
    doc = DomainXml.parse(domain_xml("vm", firmware=None))
    loader = ET.SubElement(doc.root.find("os"), "loader", readonly="yes", type="pflash")
    loader.text = "/usr/share/OVMF/OVMF_CODE_4M.fd"
    assert attached(doc=doc).hostdevs()


def test_detach_removes_the_function_its_root_port_and_record_only():
    doc = attached()
    assert detach_functions(doc, [VF0, VF2]) == [VF0]
    assert [d.source for d in doc.hostdevs()] == [VF1] and doc.recorded_bars() == {VF1: 64 * GIB}
    ports = [int(c.get("index")) for c in doc.root.iter("controller") if c.get("model") == "pcie-root-port"]
    assert ports == [doc.hostdevs()[0].guest_bus]


def test_detach_keeps_a_root_port_another_device_uses():
    doc = attached(functions=[VF0])
    bus = doc.hostdevs()[0].guest_bus
    nic = ET.SubElement(doc.root.find("devices"), "interface", type="network")
    ET.SubElement(nic, "address", type="pci", domain="0", bus=f"0x{bus:02x}", slot="0", function="1")
    detach_functions(doc, [VF0])
    ports = [c.get("index") for c in doc.root.iter("controller") if c.get("model") == "pcie-root-port"]
    assert ports == [str(bus)]


def test_a_non_domain_document_is_refused():
    with pytest.raises(RefusedError, match="expected a <domain> definition, got <network>"):
        DomainXml.parse("<network/>")
