"""LibvirtHypervisor against libvirt's real test:/// driver (in-process, no daemon)."""

from __future__ import annotations

import pytest
from hypervisor_helpers import GIB, OTHER, VF0, VF1, VF2, domain_xml, node_file

from vgpu.errors import HostError, InputError, InUseError, RefusedError
from vgpu.hypervisor import Hypervisor, open_hypervisor
from vgpu.hypervisor.libvirt import LibvirtHypervisor
from vgpu.model.pci import PciAddress


@pytest.fixture
def host(tmp_path):
    uri = node_file(tmp_path, {
        "busy": (domain_xml("busy", [VF0]), "running"),
        "parked": (domain_xml("parked", [VF1]), "shutoff"),
        "napping": (domain_xml("napping", [VF2]), "paused"),
        "plain": (domain_xml("plain"), "shutoff"),
        "nic": (domain_xml("nic", [OTHER]), "running"),
        "old": (domain_xml("old", machine="pc-i440fx-7.2"), "shutoff"),
        "bios": (domain_xml("bios", firmware=None), "shutoff"),
    })
    with LibvirtHypervisor(uri) as hv:
        yield hv


def test_it_is_a_hypervisor(host):
    assert isinstance(host, Hypervisor)


def test_domains_report_state_and_assigned_functions(host):
    found = {d.name: (d.state, d.hostdevs, d.active) for d in host.domains()}
    assert found["busy"] == ("running", (VF0,), True)
    assert found["parked"] == ("shutoff", (VF1,), False)
    assert found["napping"] == ("paused", (VF2,), True)
    assert found["plain"] == ("shutoff", (), False)


def test_holders_are_found_for_running_paused_and_shut_off_domains(host):
    held = host.holders([VF0, VF1, VF2])
    assert {a: [d.name for d in doms] for a, doms in held.items()} == \
        {VF0: ["busy"], VF1: ["parked"], VF2: ["napping"]}


def test_unrelated_domains_and_functions_are_ignored(host):
    free = PciAddress.parse("0000:85:02.7")
    assert host.holders([free, VF0]) == {free: [], VF0: [d for d in host.domains() if d.name == "busy"]}
    assert "nic" not in [d.name for doms in host.holders([VF0, VF1]).values() for d in doms]


def test_attach_defines_the_huge_bar_configuration(host):
    host.attach("plain", [PciAddress.parse("0000:87:02.0")], numa_node=0, bar64_bytes=64 * GIB)
    info = next(d for d in host.domains() if d.name == "plain")
    assert info.hostdevs == (PciAddress.parse("0000:87:02.0"),) and info.state == "shutoff"
    xml = host._persistent_xml(host._lookup("plain"))
    assert "<maxphysaddr mode='passthrough'/>" in xml and "<pcihole64 unit='KiB'>134217728</pcihole64>" in xml
    assert "<memory mode='strict' nodeset='0'/>" in xml


@pytest.mark.parametrize("name, state", [("busy", "running"), ("napping", "paused")])
def test_attach_refuses_an_active_domain(host, name, state):
    with pytest.raises(InUseError, match=f"^cannot attach GPUs to VM {name} while it is {state}"):
        host.attach(name, [PciAddress.parse("0000:88:02.0")], numa_node=None, bar64_bytes=GIB)


def test_detach_refuses_a_running_domain(host):
    with pytest.raises(InUseError, match="^cannot detach GPUs from VM busy while it is running"):
        host.detach("busy", [VF0])


@pytest.mark.parametrize("name, error", [("old", "uses machine type 'pc-i440fx-7.2'"),
                                         ("bios", "boots with BIOS")])
def test_attach_refuses_non_q35_or_bios_and_changes_nothing(host, name, error):
    before = host._persistent_xml(host._lookup(name))
    with pytest.raises(RefusedError, match=error):
        host.attach(name, [PciAddress.parse("0000:88:02.0")], numa_node=None, bar64_bytes=GIB)
    assert host._persistent_xml(host._lookup(name)) == before


def test_attach_refuses_a_function_another_vm_holds(host):
    with pytest.raises(InUseError, match=r"^0000:85:02\.1 is already assigned to VM parked$"):
        host.attach("plain", [VF1], numa_node=None, bar64_bytes=GIB)


def test_detach_removes_the_function(host):
    host.detach("parked", [VF1, VF2])
    assert next(d for d in host.domains() if d.name == "parked").hostdevs == ()


def test_libvirt_validation_failure_is_one_sentence(host):
    with pytest.raises(HostError, match="^libvirt refused the new configuration of VM x: .+; nothing was"):
        host._define("<domain type='kvm'><name>x</name><memory>1</memory></domain>", "x")


def test_unknown_vm_is_named(host):
    with pytest.raises(InputError, match=r"^no VM named ghost in libvirt at test://"):
        host.attach("ghost", [VF0], numa_node=None, bar64_bytes=GIB)


@pytest.mark.parametrize("kwargs, error", [
    ({"addresses": [], "bar64_bytes": 1}, "no PCI functions given"),
    ({"addresses": ["0000:85:02.0"], "bar64_bytes": 1}, "expected PciAddress values"),
    ({"addresses": "0000:85:02.0", "bar64_bytes": 1}, "expected PciAddress values"),
    ({"addresses": [VF0], "bar64_bytes": -1}, "bar64_bytes must be a byte count"),
    ({"addresses": [VF0], "bar64_bytes": 1, "numa_node": -2}, "numa_node must be a node number"),
])
def test_bad_attach_arguments_are_input_errors(host, kwargs, error):
    kwargs.setdefault("numa_node", None)
    with pytest.raises(InputError, match=error):
        host.attach("plain", **kwargs)


def test_vcpus_follow_the_node_cpus_libvirt_reports():
    with LibvirtHypervisor("test:///default") as hv:  # the default test host has two NUMA cells
        cells = hv._node_cpus()
        hv._define(domain_xml("pinned-vm"), "pinned-vm")
        try:
            hv.attach("pinned-vm", [VF0], numa_node=1, bar64_bytes=GIB)
            xml = hv._persistent_xml(hv._lookup("pinned-vm"))
        finally:
            hv._lookup("pinned-vm").undefine()
    assert len(cells) == 2 and f"cpuset='{min(cells[1])}-{max(cells[1])}'" in xml


@pytest.mark.parametrize("uri", ["", "qemu", "not a uri", "qemu:///system extra", 42])
def test_malformed_uris_are_input_errors(uri):
    with pytest.raises(InputError, match="^not a libvirt URI: "):
        open_hypervisor(uri)


def test_a_missing_test_driver_file_is_named(tmp_path):
    with pytest.raises(InputError, match=f"libvirt test driver file {tmp_path}/none.xml does not exist"):
        open_hypervisor(f"test://{tmp_path}/none.xml")


def test_an_unreachable_libvirt_is_a_host_error(tmp_path):
    uri = f"qemu+unix:///system?socket={tmp_path}/no-such.sock"
    with pytest.raises(HostError, match=r"^cannot connect to libvirt at qemu\+unix:///system\?socket") as err:
        open_hypervisor(uri)
    assert "\n" not in str(err.value) and "libvirtd running" in err.value.hint


def test_attach_and_restore_keep_the_vms_graphics_password(tmp_path):
    # libvirt leaves passwords out of XMLDesc unless asked (VIR_DOMAIN_XML_SECURE): writing that back
    # would silently remove the VM's VNC password
    xml = domain_xml("vnc").replace("</devices>", "<graphics type='vnc' port='-1' passwd='s3cret'/></devices>")
    with LibvirtHypervisor(node_file(tmp_path, {"vnc": (xml, "shutoff")})) as hv:
        saved = hv.definition("vnc")
        assert "passwd='s3cret'" in saved
        hv.attach("vnc", [VF0], numa_node=None, bar64_bytes=GIB)
        assert "passwd='s3cret'" in hv.definition("vnc")
        hv.restore("vnc", saved)
        assert hv.definition("vnc") == saved
