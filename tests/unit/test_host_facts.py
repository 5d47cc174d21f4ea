"""Reading host facts: modprobe.d, cmdline blacklist, modules, from a plain directory tree."""

from pathlib import Path

from vgpu.host.facts import cmdline_blacklist, read_host_facts, read_modprobe_d
from vgpu.host.paths import HostPaths


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_cmdline_blacklist_handles_lists_and_repeats():
    assert cmdline_blacklist("a modprobe.blacklist=amdgpu,nouveau b modprobe.blacklist=radeon") == [
        "amdgpu", "nouveau", "radeon"]
    assert cmdline_blacklist(None) == []


def test_modprobe_d_blacklist_install_and_options(tmp_path):
    write(tmp_path, "modprobe.d/gim.conf", "# vgpu\noptions gim vf_num=4,4 enabled_devices=\"0000:85:00.0\"\n")
    write(tmp_path, "modprobe.d/bl.conf", "blacklist amdgpu  # host must not drive the PF\ninstall radeon /bin/false\n")
    write(tmp_path, "modprobe.d/ignored.txt", "blacklist gim\n")
    d = read_modprobe_d(tmp_path)
    assert d.blacklist == ["amdgpu", "radeon"]
    assert d.options == {"gim": {"vf_num": "4,4", "enabled_devices": "0000:85:00.0"}}


def test_host_facts_from_tree(tmp_path):
    write(tmp_path, "sys/bus/pci/.keep", "")
    for g in ("0", "1", "2"):
        (tmp_path / "sys/kernel/iommu_groups" / g).mkdir(parents=True)
    (tmp_path / "sys/class/iommu/ivhd0").mkdir(parents=True)
    write(tmp_path, "sys/module/gim/version", "8.4.0.K\n")
    write(tmp_path, "sys/module/gim/parameters/vf_num", "4\n")
    (tmp_path / "sys/module/vfio_pci").mkdir(parents=True)
    write(tmp_path, "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "16\n")
    write(tmp_path, "proc/cmdline", "root=/dev/sda iommu=pt modprobe.blacklist=amdgpu\n")
    write(tmp_path, "proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    (tmp_path / "dev/vfio").mkdir(parents=True)
    write(tmp_path, "dev/vfio/17", "")
    write(tmp_path, "dev/vfio/vfio", "")
    f = read_host_facts(HostPaths.under(tmp_path))
    assert (f.iommu_groups, f.iommu_units, f.hugepages_1g, f.hugepages_2m) == (3, 1, 16, None)
    assert f.modules["gim"].loaded and f.modules["gim"].version == "8.4.0.K"
    assert f.modules["gim"].parameters == {"vf_num": "4"}
    assert f.modules["vfio_pci"].loaded and not f.modules["amdgpu"].loaded
    assert f.blacklisted == ("amdgpu",) and f.dev_vfio_groups == (17,) and f.cpu_vendor == "AuthenticAMD"


def test_os_release_and_kernel_release_are_read_for_the_capability_matrix(tmp_path):
    """docs/hardware.md §9 keys GIM's support tables by /etc/os-release and the kernel release."""
    write(tmp_path, "sys/bus/pci/.keep", "")
    write(tmp_path, "etc/os-release", 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
                                      "ID=ubuntu\nID_LIKE=debian\n")
    write(tmp_path, "proc/sys/kernel/osrelease", "6.14.0-27-generic\n")
    f = read_host_facts(HostPaths.under(tmp_path))
    assert (f.os_id, f.os_version, f.kernel_release) == ("ubuntu", "24.04", "6.14.0-27-generic")


def test_rhel_os_release_quoting_and_garbage(tmp_path):
    write(tmp_path, "sys/bus/pci/.keep", "")
    write(tmp_path, "etc/os-release", "ID='rhel'\nVERSION_ID=\"9.4\"\nID_LIKE=\"fedora\"\n")
    write(tmp_path, "proc/sys/kernel/osrelease", "bad value with spaces\x1b[31m\n")
    f = read_host_facts(HostPaths.under(tmp_path))
    assert (f.os_id, f.os_version, f.kernel_release) == ("rhel", "9.4", None)


def test_no_os_release_and_no_proc_read_as_unknown(tmp_path):
    write(tmp_path, "sys/bus/pci/.keep", "")
    f = read_host_facts(HostPaths(tmp_path / "sys"))
    assert (f.os_id, f.os_version, f.kernel_release) == (None, None, None)
