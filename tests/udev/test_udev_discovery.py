"""Discovery through real libudev must equal the direct sysfs read of the same simulated tree."""

import dataclasses

import pytest

from vgpu.host.discovery import discover
from vgpu.host.paths import HostPaths
from vgpu.sim import SimHost

pytestmark = pytest.mark.udev

MACHINES = ["8xmi300x", "8xmi300x-fw1", "8xmi325x", "8xmi355x", "mixed"]


def udev_paths(host):
    # Under the preload, /sys is the testbed's sys/; proc, etc and dev are read from the tree directly.
    return dataclasses.replace(HostPaths.under(host.root), sys=HostPaths.system().sys)


@pytest.mark.parametrize("machine", MACHINES)
def test_udev_inventory_equals_direct_sysfs_read(tmp_path, testbed, machine):
    host = testbed(SimHost.create(tmp_path / "sim", machine=machine))
    via_udev = discover(udev_paths(host), source="udev")
    via_sysfs = discover(HostPaths.under(host.root), source="sysfs")
    assert via_udev.gpus, "libudev saw no GPU: is the testbed layout umockdev-compatible?"
    assert via_udev.gpus == via_sysfs.gpus
    assert via_udev.findings == via_sysfs.findings


def test_udev_sees_vfs_created_by_the_kernel_model(tmp_path, testbed):
    host = testbed(SimHost.create(tmp_path / "sim", machine="8xmi300x"))
    host.kernel.unload_module("gim")
    host.kernel.load_module("gim", {"vf_num": "8"})
    inv = discover(udev_paths(host), source="udev")
    assert [len(g.vfs) for g in inv.gpus] == [8] * 8
    assert inv.gpus == discover(HostPaths.under(host.root), source="sysfs").gpus


def test_udev_reports_drivers_after_vfio_binding(tmp_path, testbed):
    from vgpu.host import binding

    host = testbed(SimHost.create(tmp_path / "sim", machine="8xmi300x"))
    paths = HostPaths.under(host.root)
    vf = discover(paths).gpus[0].vfs[0].address
    binding.bind(paths, host.kernel, vf, "vfio-pci")
    inv = discover(udev_paths(host), source="udev")
    assert inv.gpus[0].vfs[0].driver == "vfio-pci"
