import pytest

from vgpu.errors import InputError
from vgpu.model.pci import PciAddress


def test_parse_full_sysfs_form():
    a = PciAddress.parse("0000:85:00.0")
    assert (a.domain, a.bus, a.slot, a.function) == (0, 0x85, 0, 0)
    assert str(a) == "0000:85:00.0"


def test_parse_without_domain_defaults_to_zero():
    assert PciAddress.parse("85:02.1") == PciAddress(0, 0x85, 2, 1)


def test_uppercase_hex_is_normalised():
    assert str(PciAddress.parse("0000:A6:1F.7")) == "0000:a6:1f.7"


@pytest.mark.parametrize("text", ["", "85:00", "0000:85:00.8", "0000:85:20.0", "zz:00.0", "0000:85:00.0 ",
                                  "0000:85:00.0\n; rm -rf /", "../../etc/passwd", "0000:100:00.0"])
def test_parse_rejects_malformed_addresses_with_input_error(text):
    if text == "0000:85:00.0 ":  # surrounding whitespace is tolerated, as in sysfs files
        assert PciAddress.parse(text) == PciAddress(0, 0x85, 0, 0)
        return
    with pytest.raises(InputError, match="PCI address"):
        PciAddress.parse(text)


def test_addresses_compare_as_values_not_strings():
    assert PciAddress.parse("0000:0a:00.0") < PciAddress.parse("0000:85:00.0")
    assert PciAddress.parse("0000:85:00.0") == PciAddress.parse("85:00.0")
    assert len({PciAddress.parse("0000:85:00.0"), PciAddress.parse("85:00.0")}) == 1


def test_esxi_vmx_id_is_decimal():
    assert PciAddress.parse("0000:85:00.0").esxi_vmx_id() == "00000:133:00.0"


def test_libvirt_nodedev_name():
    assert PciAddress.parse("0000:85:02.1").libvirt_nodedev_name() == "pci_0000_85_02_1"


@pytest.mark.parametrize("pf, offset, stride, index, vf", [
    ("0000:85:00.0", 16, 1, 0, "0000:85:02.0"),     # GIM's MI300X layout: VFs at device 2 of the PF's bus
    ("0000:85:00.0", 16, 1, 7, "0000:85:02.7"),
    ("0000:85:00.0", 16, 1, 8, "0000:85:03.0"),     # function wraps into the next device
    ("0000:3b:00.0", 0x80, 2, 3, "0000:3b:10.6"),   # NIC-style offset and stride
    ("0001:00:1f.7", 1, 1, 0, "0001:01:00.0"),      # routing ID carries into the next bus
])
def test_virtfn_follows_offset_and_stride(pf, offset, stride, index, vf):
    assert str(PciAddress.parse(pf).virtfn(offset, stride, index)) == vf


def test_virtfn_outside_the_domain_is_an_input_error():
    with pytest.raises(InputError, match="outside its PCI domain"):
        PciAddress.parse("0000:ff:1f.0").virtfn(16, 1, 0)
