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
