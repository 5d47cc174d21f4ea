"""The SOAP of every VM reconfiguration vgpu sends, against golden files: a change to what ESXi
receives shows up in review. Regenerate with VGPU_UPDATE_GOLDEN=1 and read the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vgpu.esxi import specs
from vgpu.esxi.host import VmConfig
from vgpu.model.pci import PciAddress

GOLDEN = Path(__file__).parent / "golden"
GPU = PciAddress.parse("0000:85:00.0")
SYSTEM_ID = "5f1c2a3e-0b1d-4c5e-9f00-1a2b3c4d5e6f"


def _device(device_id=0x74A1):
    from pyVmomi import vim
    # the API's signed shorts: a device id above 0x7fff arrives negative (two's complement)
    signed = device_id - 0x10000 if device_id > 0x7FFF else device_id
    return vim.host.PciDevice(id=str(GPU), vendorId=0x1002, deviceId=signed, deviceName="Aqua Vanjaram [MI300X]",
                              classId=0x1200, bus=0x85, slot=0, function=0, subVendorId=0x1002, subDeviceId=0x74a1,
                              vendorName="Advanced Micro Devices, Inc. [AMD/ATI]")


def _vm(**kw):
    base = dict(name="gpu-vm-04", uuid="4204", power="poweredOff", firmware="bios", memory_mb=65536, locked=False,
                passthrough=(), extra={})
    base.update(kw)
    return VmConfig(**base)


def _check(name: str, spec) -> None:
    from xml.dom import minidom
    text = minidom.parseString(specs.soap(spec)).toprettyxml(indent="  ").strip()  # one element a line: reviewable
    path = GOLDEN / f"{name}.xml"
    if os.environ.get("VGPU_UPDATE_GOLDEN"):
        path.write_text(text + "\n")
    assert path.read_text() == text + "\n", f"{name}: the SOAP changed (VGPU_UPDATE_GOLDEN=1 to accept, then review)"


def test_attach_one_mi300x_to_a_bios_vm():
    spec = specs.attach_spec(_vm(), [(GPU, _device(), SYSTEM_ID)], 256 << 30)
    _check("attach-mi300x", spec)
    text = specs.soap(spec)
    # the facts of docs/hardware.md §6, as the API wants them
    for expected in ("<id>0000:85:00.0</id>", "<deviceId>74a1</deviceId>", "<vendorId>4098</vendorId>",
                     f"<systemId>{SYSTEM_ID}</systemId>", "<firmware>efi</firmware>",
                     "<memoryReservationLockedToMax>true</memoryReservationLockedToMax>",
                     "pciPassthru.64bitMMIOSizeGB", "<value xsi:type=\"xsd:string\">512</value>",
                     "VirtualPCIPassthrough"):
        assert expected in text, expected


def test_a_device_id_above_0x7fff_is_written_unsigned_in_hex():
    spec = specs.attach_spec(_vm(), [(GPU, _device(0x8A01), SYSTEM_ID)], 256 << 30)
    assert "<deviceId>8a01</deviceId>" in specs.soap(spec)


def test_detach_the_last_gpu_restores_the_settings_from_before():
    attached = _vm(firmware="efi", locked=True, passthrough=(GPU,),
                   extra={specs.MMIO_ON: "TRUE", specs.MMIO_SIZE: "512", specs.MARK_KEY: str(GPU),
                          specs.PREVIOUS_KEY: '{"firmware":"bios","locked":false,'
                                              '"pciPassthru.64bitMMIOSizeGB":null,"pciPassthru.use64bitMMIO":null}'})
    from pyVmomi import vim
    device = vim.vm.device.VirtualPCIPassthrough(key=2000, backing=specs.backing(GPU, 0x74A1, 0x1002, SYSTEM_ID))
    _check("detach-mi300x", specs.detach_spec([device], [GPU], attached, 0))


def test_restore_puts_back_a_saved_configuration():
    saved = specs.saved_config(_vm(), [])
    now = _vm(firmware="efi", locked=True, passthrough=(GPU,), extra={specs.MMIO_ON: "TRUE", specs.MMIO_SIZE: "512",
                                                                       specs.MARK_KEY: str(GPU)})
    from pyVmomi import vim
    device = vim.vm.device.VirtualPCIPassthrough(key=2000, backing=specs.backing(GPU, 0x74A1, 0x1002, SYSTEM_ID))
    import json
    _check("restore-before-attach", specs.restore_spec(now, [device], json.loads(saved)))
    assert specs.restore_spec(_vm(), [], json.loads(saved)) is None  # nothing to do when it already is


@pytest.mark.parametrize("bars,expected", [(256 << 30, 512), (2 * (256 << 30), 1024), (8 * (256 << 30), 4096),
                                           (512 << 30, 1024), (0, 0), (1 << 20, 1)])
def test_mmio_size_is_a_power_of_two_at_least_twice_the_bars(bars, expected):
    assert specs.mmio_gb(bars) == expected
