"""Driver binding and module rules of the simulated kernel (docs/hardware.md §4, Linux PCI core)."""

from __future__ import annotations

import os

import pytest
from simhelp import place, bind_vfio, dev, driver, fresh_host, group, read, vfs

from vgpu.errors import HostError, InputError
from vgpu.host.kernel import KernelOps

PF, VF = "0000:85:00.0", "0000:85:02.0"
NIC, NIC_VF = "0000:06:00.0", "0000:06:00.2"


@pytest.fixture
def host(tmp_path):
    return fresh_host(tmp_path)


def probe(host, address):
    host.kernel.write_attr(host.sys_root / "bus/pci/drivers_probe", address)


def test_sim_kernel_implements_kernel_ops(host):
    assert isinstance(host.kernel, KernelOps)
    host.kernel.settle(1.0)


def test_override_then_drivers_probe_binds_a_vf_to_vfio_and_creates_its_dev_node(host):
    assert driver(host, VF) is None
    bind_vfio(host, VF)
    assert driver(host, VF) == "vfio-pci"
    assert read(dev(host, VF) / "driver_override") == "vfio-pci"
    assert (host.root / f"dev/vfio/{group(host, VF)}").exists()
    assert (host.sys_root / f"bus/pci/drivers/vfio-pci/{VF}").is_symlink()
    assert "DRIVER=vfio-pci" in read(dev(host, VF) / "uevent")


def test_drivers_probe_without_override_uses_the_natural_driver_only_when_loaded(host):
    probe(host, VF)
    assert driver(host, VF) is None  # amdgpu is not loaded (blacklisted at boot)
    host.kernel.load_module("amdgpu")
    assert driver(host, VF) == "amdgpu"  # registering a driver probes unbound matches


def test_override_to_a_driver_that_is_not_loaded_leaves_the_device_unbound(host):
    host.kernel.write_attr(dev(host, VF) / "driver_override", "amdgpu")
    probe(host, VF)
    assert driver(host, VF) is None


def test_unbind_through_the_device_driver_link_and_rebind_pf_to_vfio(host):
    host.kernel.write_attr(dev(host, PF) / "driver_override", "vfio-pci")
    host.kernel.write_attr(dev(host, PF) / "driver" / "unbind", PF)
    assert driver(host, PF) is None and vfs(host, PF) == []  # gim's remove disables SR-IOV
    probe(host, PF)
    assert driver(host, PF) == "vfio-pci"
    assert (host.root / f"dev/vfio/{group(host, PF)}").exists()
    assert not (dev(host, PF) / "memory_partition_mode").exists()


def test_clearing_driver_override_lets_the_natural_driver_take_it_back(host):
    host.kernel.write_attr(dev(host, PF) / "driver_override", "vfio-pci")
    host.kernel.write_attr(dev(host, PF) / "driver" / "unbind", PF)
    host.kernel.write_attr(dev(host, PF) / "driver_override", "\n")
    assert read(dev(host, PF) / "driver_override") == "(null)"
    probe(host, PF)
    assert driver(host, PF) == "gim" and len(vfs(host, PF)) == 1


def test_driver_bind_file_binds_a_matching_device_and_refuses_others(host):
    host.kernel.write_attr(dev(host, VF) / "driver_override", "vfio-pci")
    host.kernel.write_attr(host.sys_root / "bus/pci/drivers/vfio-pci/bind", VF)
    assert driver(host, VF) == "vfio-pci"
    with pytest.raises(HostError, match="ENODEV"):  # no override, no id: vfio-pci does not match
        host.kernel.write_attr(host.sys_root / "bus/pci/drivers/vfio-pci/bind", "0000:a6:02.0")


def test_unbind_from_the_wrong_driver_fails_with_enodev(host):
    with pytest.raises(HostError, match="ENODEV"):
        host.kernel.write_attr(host.sys_root / "bus/pci/drivers/vfio-pci/unbind", PF)
    assert driver(host, PF) == "gim"


def test_new_id_makes_vfio_pci_take_matching_unbound_devices(host):
    host.kernel.write_attr(host.sys_root / "bus/pci/drivers/vfio-pci/new_id", "1002 74b5")
    assert all(driver(host, vf) == "vfio-pci" for pf in ("0000:05:00.0", PF) for vf in vfs(host, pf))


def test_vfio_pci_ids_parameter_claims_vfs_as_gim_creates_them(host):
    host.kernel.unload_module("gim")
    host.kernel.unload_module("vfio_pci")
    host.kernel.load_module("vfio_pci", {"ids": "1002:74b5"})
    host.kernel.load_module("gim", {"vf_num": "2,2,2,2,2,2,2,2"})
    assert [driver(host, vf) for vf in vfs(host, PF)] == ["vfio-pci", "vfio-pci"]


def test_sriov_numvfs_works_on_a_nic_pf_whose_driver_supports_it(host):
    host.kernel.write_attr(dev(host, NIC) / "sriov_numvfs", "0")
    assert vfs(host, NIC) == [] and not dev(host, NIC_VF).exists()
    host.kernel.write_attr(dev(host, NIC) / "sriov_numvfs", "4")
    assert vfs(host, NIC) == ["0000:06:00.2", "0000:06:00.3", "0000:06:00.4", "0000:06:00.5"]
    assert driver(host, NIC_VF) == "mlx5_core"
    assert read(dev(host, NIC_VF) / "device") == "0x101e"


def test_sriov_numvfs_refuses_a_change_without_going_through_zero(host):
    with pytest.raises(HostError, match="EBUSY"):
        host.kernel.write_attr(dev(host, NIC) / "sriov_numvfs", "4")
    assert len(vfs(host, NIC)) == 2


def test_sriov_numvfs_above_total_vfs_fails(host):
    with pytest.raises(HostError, match="TotalVFs is 8"):
        host.kernel.write_attr(dev(host, NIC) / "sriov_numvfs", "9")


def test_sriov_numvfs_on_a_pf_without_driver_fails_as_the_kernel_does(host):
    host.kernel.write_attr(dev(host, NIC) / "sriov_numvfs", "0")
    host.kernel.write_attr(dev(host, NIC) / "driver" / "unbind", NIC)
    with pytest.raises(HostError, match="no driver bound"):
        host.kernel.write_attr(dev(host, NIC) / "sriov_numvfs", "2")


def test_unknown_module_fails_like_modprobe(host):
    with pytest.raises(HostError, match="modprobe: FATAL: Module nosuch not found"):
        host.kernel.load_module("nosuch")
    with pytest.raises(HostError, match="not found"):
        host.kernel.unload_module("nosuch")


def test_modprobe_treats_dash_and_underscore_alike(host):
    host.kernel.unload_module("vfio-pci")
    assert not (host.sys_root / "module/vfio_pci").exists()
    assert not (host.sys_root / "bus/pci/drivers/vfio-pci").exists()
    host.kernel.load_module("vfio-pci", {"disable_idle_d3": "1"})
    assert read(host.sys_root / "module/vfio_pci/parameters/disable_idle_d3") == "1"


def test_unloading_vfio_pci_with_bound_devices_fails_in_use(host):
    bind_vfio(host, VF)
    with pytest.raises(HostError, match="in use"):
        host.kernel.unload_module("vfio_pci")
    assert driver(host, VF) == "vfio-pci"


def test_install_false_in_modprobe_d_blocks_loading(host):
    (host.root / "etc/modprobe.d/no-amdgpu.conf").write_text("install amdgpu /bin/false\n")
    with pytest.raises(HostError, match="install command"):
        host.kernel.load_module("amdgpu")


def test_a_holder_on_a_vf_blocks_unloading_gim_even_before_vfio_binding(host):
    pid = host.add_holder(group(host, VF), "qemu-kvm")
    with pytest.raises(HostError, match=f"process {pid}"):
        host.kernel.unload_module("gim")
    assert dev(host, VF).exists()


def test_unbinding_a_held_vfio_device_fails_and_names_the_process(host):
    bind_vfio(host, VF)
    pid = host.add_holder(group(host, VF), "qemu-kvm")
    assert os.readlink(host.root / f"proc/{pid}/fd/3") == f"/dev/vfio/{group(host, VF)}"
    assert read(host.root / f"proc/{pid}/comm") == "qemu-kvm"
    with pytest.raises(HostError, match=f"process {pid} \\(qemu-kvm\\) holds /dev/vfio/{group(host, VF)}"):
        host.kernel.write_attr(dev(host, VF) / "driver" / "unbind", VF)
    assert driver(host, VF) == "vfio-pci"
    host.remove_holder(pid)
    assert not (host.root / f"proc/{pid}").exists()
    host.kernel.write_attr(dev(host, VF) / "driver" / "unbind", VF)
    assert driver(host, VF) is None
    assert not (host.root / f"dev/vfio/{group(host, VF)}").exists()


def test_a_holder_needs_an_existing_iommu_group_and_a_valid_name(host):
    with pytest.raises(HostError, match="no such IOMMU group"):
        host.add_holder(9999, "qemu")
    with pytest.raises(InputError):
        host.add_holder(group(host, VF), "a/b")
    with pytest.raises(HostError, match="no simulated process"):
        host.remove_holder(99999)


def test_write_attr_refuses_paths_outside_the_root(host, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.write_text("x")
    with pytest.raises(HostError, match="outside the simulated host"):
        host.kernel.write_attr(outside, "1")
    escape = dev(host, PF) / "escape"
    os.symlink(outside, escape)
    with pytest.raises(HostError, match="outside the simulated host"):
        host.kernel.write_attr(escape, "1")
    assert outside.read_text() == "x"


def test_write_attr_refuses_read_only_and_missing_attributes(host):
    with pytest.raises(HostError, match="Permission denied"):
        host.kernel.write_attr(dev(host, PF) / "vendor", "0x10de")
    with pytest.raises(HostError, match="No such file"):
        host.kernel.write_attr(dev(host, PF) / "no_such_attr", "1")
    assert read(dev(host, PF) / "vendor") == "0x1002"


def test_hugepages_are_writable(host):
    path = host.sys_root / "kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
    host.kernel.write_attr(path, "64")
    assert read(path) == "64"
    with pytest.raises(HostError, match="EINVAL"):
        host.kernel.write_attr(path, "lots")


def test_amdgpu_bound_pf_exposes_and_validates_its_partition_files(host):
    host.kernel.unload_module("gim")
    host.kernel.load_module("amdgpu")
    d = dev(host, PF)
    assert driver(host, PF) == "amdgpu"
    assert read(d / "current_compute_partition") == "SPX"
    assert read(d / "available_compute_partition") == "SPX, DPX, QPX, CPX"
    assert read(d / "available_memory_partition") == "NPS1, NPS4"
    assert not (d / "spatial_partition_mode").exists()
    host.kernel.write_attr(d / "current_compute_partition", "CPX")
    host.kernel.write_attr(d / "current_memory_partition", "NPS4")
    assert read(d / "current_memory_partition") == "NPS4"
    with pytest.raises(HostError, match="EINVAL"):  # 4 memory partitions need >= 4 compute ones
        host.kernel.write_attr(d / "current_compute_partition", "DPX")


def test_vfio_probe_fails_without_an_iommu(tmp_path):
    spec = tmp_path / "noiommu.yaml"
    spec.write_text("""version: v1
name: noiommu
description: one MI300X, IOMMU off
functions:
  - {address: "0000:85:00.0", kind: gpu, model: MI300X, sriov: {total_vfs: 8}, path: ["0000:80:01.1"]}
state:
  iommu: false
  cmdline: "ro modprobe.blacklist=amdgpu"
  modules: {gim: {}, vfio_pci: {}}
""")
    from vgpu.sim import SimHost
    host = SimHost.create(place(tmp_path), spec)
    assert os.listdir(host.sys_root / "class/iommu") == []
    assert os.listdir(host.sys_root / "kernel/iommu_groups") == []
    bind_vfio(host, VF)
    assert driver(host, VF) is None
    assert "probe of 0000:85:02.0 failed with error -22" in host.dmesg()


def test_a_transaction_rewrites_a_host_wide_attribute_someone_edited_and_leaves_the_rest_alone(host):
    # the kernel re-renders only what differs from its model: an edited file (same size, so no size shortcut
    # could see it) is put back; an attribute already right keeps its inode and mtime
    cmdline = host.root / "proc/cmdline"
    text = cmdline.read_text()
    os.chmod(cmdline, 0o644)
    cmdline.write_text("X" * (len(text) - 1) + "\n")
    untouched = host.root / "proc/cpuinfo"
    before = os.stat(untouched)
    bind_vfio(host, VF)
    assert cmdline.read_text() == text
    after = os.stat(untouched)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
