"""Readiness rules: each finding appears when its condition holds and says what to do."""


import pytest

from vgpu.model.inventory import (GroupMember, Gpu, HostFacts, IommuGroup, Link, ModuleInfo, Partition,
                                  Severity, VirtualFunction)
from vgpu.model.pci import PciAddress
from vgpu.readiness import assess, parse_gim_version

PF = PciAddress.parse("0000:85:00.0")
READY_CMDLINE = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt modprobe.blacklist=amdgpu pci=realloc=off"


def facts(**kw):
    base = dict(iommu_groups=40, iommu_units=4, cmdline=READY_CMDLINE,
                modules={"gim": ModuleInfo("gim", True, "8.4.0.K", {"vf_num": "1"}),
                         "vfio_pci": ModuleInfo("vfio_pci", True)},
                hugepages_1g=64, hugepages_2m=0, blacklisted=("amdgpu",), dev_vfio_groups=())
    base.update(kw)
    return HostFacts(**base)


def gpu(**kw):
    group = IommuGroup(12, (GroupMember(PF, 0x1002, 0x74A1, "gim"),))
    base = dict(address=PF, model="MI300X", device_id=0x74A1, subsystem=(0x1002, 0x74A1), driver="gim",
                numa_node=1, iommu_group=group, bars=(), link=Link("32.0 GT/s PCIe", 16), total_vfs=8,
                num_vfs=1, partition=Partition("SPX", "NPS1", source="gim"))
    base.update(kw)
    return Gpu(**base)


def by_check(findings):
    return {f.check: f for f in findings}


def test_ready_host_has_no_errors_or_warnings():
    found = assess([gpu()], facts())
    assert all(f.severity in (Severity.OK, Severity.INFO) for f in found), found


def test_iommu_off_is_an_error_with_a_fix():
    f = by_check(assess([gpu()], facts(iommu_groups=0, iommu_units=0)))["iommu"]
    assert f.severity is Severity.ERROR and "BIOS" in f.fix


@pytest.mark.parametrize("cmdline,check,severity", [
    ("root=/dev/sda1 modprobe.blacklist=amdgpu", "cmdline.iommu_pt", Severity.WARNING),
    (READY_CMDLINE + " amd_iommu=off", "cmdline.iommu_off", Severity.ERROR),
    ("root=/dev/sda1 iommu=pt modprobe.blacklist=amdgpu", "cmdline.pci_realloc", Severity.INFO),
])
def test_cmdline_rules(cmdline, check, severity):
    f = by_check(assess([gpu()], facts(cmdline=cmdline)))[check]
    assert f.severity is severity and f.fix


def test_amdgpu_not_blacklisted_warns():
    f = by_check(assess([gpu()], facts(blacklisted=())))["cmdline.blacklist_amdgpu"]
    assert f.severity is Severity.WARNING and "modprobe.blacklist=amdgpu" in f.fix


def test_intel_cpu_needs_intel_iommu_on():
    assert "cmdline.intel_iommu" in by_check(assess([gpu()], facts(cpu_vendor="GenuineIntel")))
    assert "cmdline.intel_iommu" not in by_check(assess([gpu()], facts(cpu_vendor="AuthenticAMD")))


def test_unknown_cmdline_is_reported_not_guessed():
    f = by_check(assess([gpu()], facts(cmdline=None)))["cmdline"]
    assert f.severity is Severity.INFO and "unknown" in f.message


def test_missing_gim_and_vfio_warn():
    found = by_check(assess([gpu()], facts(modules={})))
    assert found["module.gim"].severity is Severity.WARNING
    assert found["module.vfio_pci"].severity is Severity.WARNING


@pytest.mark.parametrize("version,severity", [("8.3.0.K", Severity.ERROR), ("8.4.0.K", Severity.OK),
                                              ("9.1.0.K", Severity.OK), ("weird", Severity.WARNING)])
def test_gim_version_gate_for_rocm7(version, severity):
    modules = {"gim": ModuleInfo("gim", True, version, {"vf_num": "1"}), "vfio_pci": ModuleInfo("vfio_pci", True)}
    assert by_check(assess([gpu()], facts(modules=modules)))["module.gim"].severity is severity


def test_parse_gim_version():
    assert parse_gim_version("8.4.0.K") == (8, 4, 0)
    assert parse_gim_version(None) is None and parse_gim_version("8.x") is None


def test_amdgpu_bound_pf_warns():
    f = by_check(assess([gpu(driver="amdgpu")], facts()))["gpu.0000:85:00.0.driver"]
    assert f.severity is Severity.WARNING and "amdgpu" in f.message


def test_gim_pf_without_vfs_points_at_vf_num_and_totalvfs():
    f = by_check(assess([gpu(num_vfs=0, total_vfs=1)], facts()))["gpu.0000:85:00.0.vfs"]
    assert "TotalVFs=1" in f.message and f.severity is Severity.WARNING


def test_shared_iommu_group_names_every_other_member():
    other = GroupMember(PciAddress.parse("0000:84:00.0"), 0x1000, 0xC030, "pcieport", is_bridge=True)
    audio = GroupMember(PciAddress.parse("0000:85:00.1"), 0x1002, 0xAB28, None)
    group = IommuGroup(7, (GroupMember(PF, 0x1002, 0x74A1, "gim"), other, audio))
    f = by_check(assess([gpu(iommu_group=group)], facts()))["gpu.0000:85:00.0.iommu_group"]
    assert "0000:84:00.0" in f.message and "0000:85:00.1" in f.message and "vfio-pci" in f.fix


def test_vfio_bound_vf_without_dev_node_warns():
    vf_addr = PciAddress.parse("0000:85:02.0")
    vf = VirtualFunction(vf_addr, 0, 0x74B5, "vfio-pci", IommuGroup(90, (GroupMember(vf_addr, 0x1002, 0x74B5, "vfio-pci"),)), 1)
    found = by_check(assess([gpu(vfs=(vf,))], facts(dev_vfio_groups=())))
    assert "gpu.0000:85:02.0.vfio" in found
    assert "gpu.0000:85:02.0.vfio" not in by_check(assess([gpu(vfs=(vf,))], facts(dev_vfio_groups=(90,))))


def test_no_gpus_warns():
    assert by_check(assess([], facts()))["gpus"].severity is Severity.WARNING


def test_no_hugepages_is_info():
    assert by_check(assess([gpu()], facts(hugepages_1g=0)))["hugepages"].severity is Severity.INFO


# issue 8 section 9: a function whose ids cannot be read but may be a GPU

class _View:
    def __init__(self, name, attrs, driver=None):
        self.name, self.attrs, self.driver = name, attrs, driver

    def attr(self, name):
        return self.attrs.get(name)

    def link(self, name):
        return self.driver if name == "driver" else None

    def link_names(self, prefix):
        return []


@pytest.mark.parametrize("attrs,driver,flagged", [
    ({"vendor": "0x1002", "device": "garbage", "class": "0x120000"}, None, True),
    ({"vendor": "0x1002", "class": "0x038000"}, None, True),  # device file absent
    ({"vendor": "junk", "device": "0x74a1", "class": "0x120000"}, None, True),
    ({"vendor": "junk", "device": "junk"}, None, True),  # nothing readable: it may be anything
    ({"vendor": "junk", "device": "junk", "class": "0x020000"}, "amdgpu", True),
    ({"vendor": "0x15b3", "device": "junk", "class": "0x020000"}, None, False),  # another vendor's NIC
    ({"vendor": "junk", "class": "0x020000"}, None, False),  # a network class, no GPU driver
    ({"vendor": "0x1002", "device": "junk", "class": "0x060400"}, None, False),  # an AMD bridge
])
def test_unreadable_ids_are_flagged_when_the_function_may_be_a_gpu(attrs, driver, flagged):
    from vgpu.host.pcifunc import read_identity, unidentified_gpu

    view = _View("0000:46:00.0", attrs, driver)
    assert read_identity(view) is None
    assert unidentified_gpu(view) == (PciAddress.parse("0000:46:00.0") if flagged else None)


def test_unreadable_ids_are_an_error_finding_naming_the_address():
    address = PciAddress.parse("0000:46:00.0")
    found = by_check(assess([gpu()], facts(), unidentified=[address]))["gpus.unreadable_ids"]
    assert found.severity is Severity.ERROR and found.message.startswith("0000:46:00.0: ")
    assert "lspci -nn -s 0000:46:00.0" in found.fix
