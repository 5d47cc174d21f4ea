"""The simulated host's tree builder: layout, formats and the default 8xmi300x machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simhelp import place

from vgpu.errors import InputError
from vgpu.sim import SimHost
from vgpu.sim.host import MARKER, MARKER_FORMAT

GPUS = ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0",
        "0000:85:00.0", "0000:a6:00.0", "0000:c6:00.0", "0000:e5:00.0"]


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> SimHost:
    return SimHost.create(place(tmp_path_factory.mktemp("sim")), "8xmi300x")


def dev(host: SimHost, address: str) -> Path:
    return host.sys_root / "bus/pci/devices" / address


def read(path: Path) -> str:
    return path.read_text().strip()


def test_default_machine_has_eight_mi300x_pfs_on_two_numa_nodes(host):
    found = [a for a in sorted(os.listdir(host.sys_root / "bus/pci/devices"))
             if read(dev(host, a) / "device") == "0x74a1"]
    assert found == GPUS
    assert [read(dev(host, a) / "numa_node") for a in GPUS] == ["0"] * 4 + ["1"] * 4


def test_gpu_pf_sits_behind_a_switch_under_a_root_port(host):
    real = os.path.realpath(dev(host, "0000:85:00.0"))
    assert real.endswith("sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0/0000:82:00.0/0000:85:00.0")


def test_gpu_pf_attributes_use_kernel_formats(host):
    d = dev(host, "0000:05:00.0")
    assert read(d / "vendor") == "0x1002"
    assert read(d / "class") == "0x120000"
    assert read(d / "sriov_totalvfs") == "8"
    assert read(d / "sriov_vf_device") == "74b5"
    assert read(d / "driver_override") == "(null)"
    assert read(d / "current_link_speed") == "32.0 GT/s PCIe"
    assert read(d / "current_link_width") == "16"
    uevent = read(d / "uevent").splitlines()
    assert "PCI_ID=1002:74A1" in uevent and "DRIVER=gim" in uevent and "PCI_SLOT_NAME=0000:05:00.0" in uevent


def test_resource_file_has_13_lines_with_a_large_prefetchable_vram_bar(host):
    lines = read(dev(host, "0000:05:00.0") / "resource").splitlines()
    assert len(lines) == 13
    start, end, flags = (int(x, 16) for x in lines[0].split())
    assert end - start + 1 == 256 << 30 and flags == 0x14220C
    assert int(lines[5].split()[2], 16) == 0x40200  # 32-bit register BAR
    iov_start, iov_end, _ = (int(x, 16) for x in lines[7].split())
    assert iov_end - iov_start + 1 == 8 * (32 << 30)  # 8 VF apertures of 32 GiB


def test_initial_state_has_gim_with_one_unbound_vf_per_gpu(host):
    for pf in GPUS:
        d = dev(host, pf)
        assert os.readlink(d / "driver").endswith("bus/pci/drivers/gim")
        assert read(d / "sriov_numvfs") == "1"
        vf = Path(os.path.realpath(d / "virtfn0"))
        assert read(vf / "device") == "0x74b5"
        assert not (vf / "driver").exists()
        assert os.path.realpath(vf / "physfn") == os.path.realpath(d)
    assert read(host.sys_root / "module/gim/version") == "8.4.0.K"
    assert read(host.sys_root / "module/gim/parameters/vf_num") == "1"


def test_vf_sits_at_pf_plus_offset_with_its_own_iommu_group(host):
    pf_group = os.readlink(dev(host, "0000:85:00.0") / "iommu_group").rsplit("/", 1)[1]
    vf_group = os.readlink(dev(host, "0000:85:02.0") / "iommu_group").rsplit("/", 1)[1]
    assert pf_group != vf_group
    members = os.listdir(host.sys_root / "kernel/iommu_groups" / vf_group / "devices")
    assert members == ["0000:85:02.0"]


def test_every_link_is_relative_and_resolves(host):
    for dirpath, dirnames, filenames in os.walk(host.sys_root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                assert not os.readlink(path).startswith("/"), path
                assert path.exists(), f"dangling link {path}"


def test_host_files_show_iommu_cmdline_and_no_hugepages(host):
    assert "iommu=pt" in read(host.root / "proc/cmdline")
    assert "modprobe.blacklist=amdgpu" in read(host.root / "proc/cmdline")
    assert os.listdir(host.sys_root / "class/iommu")
    assert read(host.sys_root / "kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages") == "0"
    assert (host.root / "etc/modprobe.d").is_dir()


def test_nic_has_two_vfs_on_mlx5_core_and_non_amd_devices_exist(host):
    d = dev(host, "0000:06:00.0")
    assert read(d / "sriov_numvfs") == "2"
    assert os.readlink(d / "virtfn1").endswith("0000:06:00.3")
    assert os.readlink(dev(host, "0000:06:00.2") / "driver").endswith("mlx5_core")
    assert read(dev(host, "0000:a8:00.0") / "vendor") == "0x10de"
    assert read(dev(host, "0000:ca:00.0") / "device") == "0x73bf"
    assert read(dev(host, "0000:6b:00.0") / "device") == "0x2000"


def test_radeon_and_its_audio_share_an_iommu_group(host):
    a = os.readlink(dev(host, "0000:ca:00.0") / "iommu_group")
    b = os.readlink(dev(host, "0000:ca:00.1") / "iommu_group")
    assert a.rsplit("/", 1)[1] == b.rsplit("/", 1)[1]


def test_open_sees_the_host_create_built(host):
    again = SimHost.open(host.state_dir)
    assert again.machine.name == "8xmi300x"
    assert again.root == host.root


def test_open_refuses_a_missing_state_dir(tmp_path):
    with pytest.raises(InputError, match="not a simulated host vgpu made"):
        SimHost.open(tmp_path / "nothing")


def test_open_refuses_a_corrupt_state_file(tmp_path):
    (tmp_path / MARKER).write_text(MARKER_FORMAT + "\n")
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(InputError, match="corrupt"):
        SimHost.open(tmp_path)


def test_create_refuses_to_wipe_a_foreign_directory(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(InputError, match="refusing to replace"):
        SimHost.create(tmp_path)
    assert (tmp_path / "precious.txt").exists()


def test_a_state_file_without_the_marker_is_not_a_simulated_host(tmp_path):
    (tmp_path / "state.json").write_text("{}")  # some other program's
    (tmp_path / "root").mkdir()
    assert not SimHost.exists(tmp_path)
    with pytest.raises(InputError, match="refusing to replace"):
        SimHost.create(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root", "state.json"]
