"""The simulated trees as real libudev (pyudev under umockdev's preload) sees them."""

from __future__ import annotations

import os

import pytest

from vgpu.sim import SimHost

pytestmark = pytest.mark.udev


def pci_devices():
    import pyudev
    return {d.sys_name: d for d in pyudev.Context().list_devices(subsystem="pci")}


@pytest.mark.parametrize("machine", ["8xmi300x", "mixed"])
def test_libudev_lists_exactly_the_simulated_functions(tmp_path, testbed, machine):
    host = testbed(SimHost.create(tmp_path / "sim", machine))
    seen = pci_devices()
    assert set(seen) == set(os.listdir(host.sys_root / "bus/pci/devices"))
    for name, device in seen.items():
        assert device.subsystem == "pci"
        assert device.properties.get("PCI_SLOT_NAME") == name
        assert device.attributes.asstring("vendor") == (host.sys_root / "bus/pci/devices" / name
                                                         / "vendor").read_text().strip()


def test_libudev_sees_driver_ids_and_sriov_attributes(tmp_path, testbed):
    testbed(SimHost.create(tmp_path / "sim"))
    pf = pci_devices()["0000:85:00.0"]
    assert pf.driver == "gim"
    assert pf.properties["PCI_ID"] == "1002:74A1"
    assert pf.attributes.asstring("sriov_totalvfs") == "8"
    assert pf.attributes.asstring("class") == "0x120000"
    assert pf.sys_path.endswith("/pci0000:80/0000:80:01.1/0000:81:00.0/0000:82:00.0/0000:85:00.0")
    vf = pci_devices()["0000:85:02.0"]
    assert vf.driver is None
    assert vf.parent.sys_name == "0000:82:00.0"


def test_libudev_sees_a_binding_the_kernel_model_made(tmp_path, testbed):
    host = testbed(SimHost.create(tmp_path / "sim"))
    vf = host.sys_root / "bus/pci/devices/0000:85:02.0"
    host.kernel.write_attr(vf / "driver_override", "vfio-pci")
    host.kernel.write_attr(host.sys_root / "bus/pci/drivers_probe", "0000:85:02.0")
    assert pci_devices()["0000:85:02.0"].driver == "vfio-pci"
