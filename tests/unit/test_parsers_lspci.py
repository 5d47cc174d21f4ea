"""lspci parser on every lspci fixture, plus edge cases."""

from pathlib import Path

import pytest

from vgpu.guest.agent.parsers.common import ParseError
from vgpu.guest.agent.parsers.lspci import parse_device_status, parse_link_status, parse_lspci

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> str:
    """The fixture's text without its '# fixture:' header line."""
    text = (FIXTURES / "lspci" / name).read_text(encoding="utf-8")
    assert text.startswith("# fixture:"), name
    return text.split("\n", 1)[1]


def test_guest_nnkk_mi300x_vf_ids_without_pci_ids_name():
    (dev,) = parse_lspci(fixture("guest-nnkk-mi300x-vf.txt"))
    assert dev.bdf == "0000:09:00.0" and dev.class_id == 0x1200
    assert dev.class_name == "Processing accelerators"
    assert dev.ids == "1002:74b5" and dev.description.endswith("Device")
    assert (dev.subsystem_vendor_id, dev.subsystem_device_id) == (0x1002, 0x74A1)
    assert dev.driver is None  # grep -A 1 cut the driver lines


def test_host_nnk_pf_on_gim_and_vf_on_vfio_with_publisher_comments():
    pf, vf = parse_lspci(fixture("host-nnk-mi300x-pf-gim-vf-vfio.txt"))
    assert (pf.bdf, pf.ids, pf.driver, pf.modules) == ("0000:85:00.0", "1002:74a1", "gim", ["amdgpu"])
    assert (vf.bdf, vf.ids, vf.driver) == ("0000:85:02.0", "1002:74b5", "vfio-pci")
    assert vf.description.endswith("Aqua Vanjaram [Instinct MI300X VF]")
    assert vf.subsystem_device_id == 0x74A1


def test_host_nnk_pf_on_vfio():
    (pf,) = parse_lspci(fixture("host-nnk-mi300x-pf-vfio.txt"))
    assert (pf.ids, pf.driver, pf.subsystem_device_id) == ("1002:74a1", "vfio-pci", 0x74A1)


def test_plain_grep_eight_pfs_without_ids():
    devices = parse_lspci(fixture("baremetal-grep-mi300x-8gpu-health-check-doc.txt"))
    assert [d.bdf[5:7] for d in devices] == ["05", "26", "46", "65", "85", "a6", "c6", "e5"]
    assert all(d.ids is None and d.class_id is None for d in devices)
    assert devices[0].description == "Advanced Micro Devices, Inc. [AMD/ATI] Aqua Vanjaram [Instinct MI300X]"


def test_vvv_devsta_lnksta_gen5_x16():
    text = fixture("baremetal-vvv-devsta-lnksta-mi300x-8gpu-health-check-doc.txt")
    links = parse_link_status(text)
    assert len(links) == 8 and {(link.speed_gts, link.width) for link in links} == {(32.0, 16)}
    assert not any(link.downgraded for link in links)
    statuses = parse_device_status(text)
    assert len(statuses) == 8 and statuses[0]["CorrErr"] is False
    assert not any(any(status.values()) for status in statuses)


def test_lnksta_with_ok_and_downgraded_suffixes():
    text = ("\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)\n"
            "\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)\n"
            "\t\tLnkSta2: Current De-emphasis Level: -3.5dB\n"
            "\t\tDevSta:\tCorrErr+ NonFatalErr- FatalErr- UnsupReq+ AuxPwr- TransPend-\n")
    ok, slow = parse_link_status(text)
    assert (ok.speed_gts, ok.width, ok.downgraded) == (32.0, 16, False)
    assert (slow.speed_gts, slow.width, slow.downgraded) == (16.0, 8, True)
    (status,) = parse_device_status(text)
    assert status["CorrErr"] and status["UnsupReq"] and not status["FatalErr"]


def test_domain_rev_prog_if_and_grep_separators():
    text = ("0001:c1:00.0 Display controller [0380]: Advanced Micro Devices, Inc. [AMD/ATI] "
            "Device [1002:75a0] (rev 01)\r\n\tKernel driver in use: amdgpu\r\n--\r\n"
            "03:00.0 VGA compatible controller [0300]: ASPEED Technology, Inc. ASPEED Graphics Family "
            "[1a03:2000] (rev 52) (prog-if 00 [VGA controller])\r\n")
    amd, vga = parse_lspci(text)
    assert (amd.bdf, amd.ids, amd.revision, amd.driver) == ("0001:c1:00.0", "1002:75a0", 1, "amdgpu")
    assert (vga.bdf, vga.ids, vga.revision, vga.class_id) == ("0000:03:00.0", "1a03:2000", 0x52, 0x0300)


def test_empty_grep_output_means_no_device():
    assert parse_lspci("") == [] and parse_link_status("") == []


def test_foreign_output_raises_parse_error():
    with pytest.raises(ParseError):
        parse_lspci("pcilib: Cannot open /proc/bus/pci\n")


# issue 9: a guest whose pci.ids has no name for the VF; lspci then prints the device id in hex.
def test_unnamed_device_without_ids_still_gives_the_device_id():
    text = ("user@vf-guest:~$ lspci -k | grep -A 3 -i amd\n"
            "09:00.0 Processing accelerators: Advanced Micro Devices, Inc. [AMD/ATI] Device 74b5\n"
            "\tSubsystem: Advanced Micro Devices, Inc. [AMD/ATI] Device 74a1\n"
            "\tKernel driver in use: amdgpu\n"
            "\tKernel modules: amdgpu\n"
            "user@vf-guest:~$\n")
    (vf,) = parse_lspci(text)
    assert (vf.device_id, vf.vendor_id, vf.ids) == (0x74B5, None, None)  # the vendor id is not printed
    assert vf.description == "Advanced Micro Devices, Inc. [AMD/ATI] Device 74b5"
    assert (vf.subsystem_device_id, vf.subsystem_vendor_id, vf.driver) == (0x74A1, None, "amdgpu")
    assert "user@vf-guest" not in str(vf.details)


def test_unnamed_vendor_and_device_give_both_ids_in_any_case():
    (qemu, upper) = parse_lspci("00:02.0 VGA compatible controller: Device 1234:1111 (rev 02)\n"
                                "0A:00.0 Processing accelerators: Advanced Micro Devices, Inc. [AMD/ATI] "
                                "Device 74B5 (rev 01)\n")
    assert (qemu.ids, qemu.revision) == ("1234:1111", 2)
    assert (upper.bdf, upper.device_id, upper.revision) == ("0000:0a:00.0", 0x74B5, 1)


def test_named_devices_invent_no_id_from_their_name():
    (dev,) = parse_lspci("05:00.0 Processing accelerators: Advanced Micro Devices, Inc. [AMD/ATI] "
                         "Aqua Vanjaram [Instinct MI300X]\n")
    assert dev.device_id is None and dev.vendor_id is None
