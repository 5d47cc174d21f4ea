"""The VM configuration changes vgpu sends to ESXi, built in one place (pure: pyVmomi data objects,
no connection). tests/esxi/golden/ holds the SOAP of each, so a change shows up in review.

Attaching a GPU by DirectPath I/O (docs/hardware.md §6, docs/esxi.md):
- one ``VirtualPCIPassthrough`` device per GPU, its backing naming the host function as the host
  reports it: ``id`` "0000:05:00.0", ``deviceId`` the hex string of the device id without 0x
  ("74a1"), ``vendorId`` the API's short, ``systemId`` from ``QueryConfigTarget``;
- ``firmware = efi`` and ``memoryReservationLockedToMax`` (DirectPath I/O needs all guest memory
  reserved);
- ``pciPassthru.use64bitMMIO = TRUE`` and ``pciPassthru.64bitMMIOSizeGB``: a power of two at least
  twice the 64-bit BARs of every passthrough device of the VM (too small fails power-on with
  "Module 'DevicePowerOn' power on failed");
- ``vgpu.assigned``: the functions vgpu attached, so that ``release`` takes back only those.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from vgpu.errors import InputError
from vgpu.hypervisor.xml import MmioWindow
from vgpu.model.pci import PciAddress

MARK_KEY = "vgpu.assigned"
PREVIOUS_KEY = "vgpu.previous"  # the VM's settings before vgpu's first attach; release puts them back
MMIO_ON = "pciPassthru.use64bitMMIO"
MMIO_SIZE = "pciPassthru.64bitMMIOSizeGB"
MANAGED_KEYS = (MMIO_ON, MMIO_SIZE, MARK_KEY, PREVIOUS_KEY)  # the extraConfig keys vgpu writes (and restores)
GIB = 1 << 30
VERSION = "vim.version.v8_0_0_0"  # the API version the golden files are serialized with


def mmio_gb(bar64_bytes: int) -> int:
    """``pciPassthru.64bitMMIOSizeGB`` for devices whose 64-bit BARs add up to ``bar64_bytes``."""
    window = MmioWindow.for_bars(bar64_bytes)
    return max(1, (window.size_bytes + GIB - 1) // GIB) if window else 0


def parse_mark(text: str) -> tuple[PciAddress, ...]:
    out = []
    for part in text.split(","):
        try:
            out.append(PciAddress.parse(part.strip()))
        except InputError:
            continue  # empty, or a hand-edited mark: ignore what is not an address
    return tuple(dict.fromkeys(out))


def mark(addresses: Sequence[PciAddress]) -> str:
    return ",".join(str(a) for a in sorted(set(addresses)))


def _option(key: str, value: str):
    from pyVmomi import vim
    return vim.option.OptionValue(key=key, value=value)


def backing(address: PciAddress | str, device_id: int, vendor_id: int, system_id: str, name: str = ""):
    from pyVmomi import vim
    return vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo(
        id=str(address), deviceId=format(device_id & 0xFFFF, "x"), vendorId=vendor_id,
        systemId=system_id, deviceName=name)


def _add(backing_info, key: int):
    from pyVmomi import vim
    device = vim.vm.device.VirtualPCIPassthrough(key=key, backing=backing_info)
    return vim.vm.device.VirtualDeviceSpec(operation=vim.vm.device.VirtualDeviceSpec.Operation.add, device=device)


def _remove(device):
    from pyVmomi import vim
    return vim.vm.device.VirtualDeviceSpec(operation=vim.vm.device.VirtualDeviceSpec.Operation.remove, device=device)


def attach_spec(vm, devices: Sequence[tuple[PciAddress, object, str]], bar64_bytes: int):
    """Add ``devices`` ((address, HostPciDevice, systemId), ...) to ``vm`` (a VmConfig) with the
    settings above; ``bar64_bytes``: the 64-bit BARs of all its passthrough devices afterwards."""
    from pyVmomi import vim

    changes = [_add(backing(a, int(d.deviceId), int(d.vendorId), sid, str(d.deviceName or "")), -100 - i)
               for i, (a, d, sid) in enumerate(devices)]
    extra = [_option(MMIO_ON, "TRUE")]
    size = max(mmio_gb(bar64_bytes), current_mmio_gb(vm.extra))
    if size:
        extra.append(_option(MMIO_SIZE, str(size)))
    extra.append(_option(MARK_KEY, mark([*parse_mark(vm.extra.get(MARK_KEY, "")), *(a for a, _, _ in devices)])))
    if PREVIOUS_KEY not in vm.extra:
        before = {"firmware": vm.firmware, "locked": vm.locked, MMIO_ON: vm.extra.get(MMIO_ON),
                  MMIO_SIZE: vm.extra.get(MMIO_SIZE)}
        extra.append(_option(PREVIOUS_KEY, json.dumps(before, sort_keys=True, separators=(",", ":"))))
    return vim.vm.ConfigSpec(deviceChange=changes, firmware="efi", memoryReservationLockedToMax=True,
                             extraConfig=extra)


def detach_spec(device_objects: Sequence, addresses: Sequence[PciAddress], vm, remaining_bar64: int):
    """Remove the passthrough devices of ``addresses``. When the VM keeps no passthrough device, its
    settings from before vgpu's first attach come back (firmware, memory lock, MMIO keys) and vgpu's
    keys go; otherwise the mark keeps what remains and the settings stay (the other devices need them)."""
    from pyVmomi import vim

    wanted = {str(a) for a in addresses}
    changes = [_remove(d) for d in device_objects if str(d.backing.id) in wanted]
    left = [a for a in parse_mark(vm.extra.get(MARK_KEY, "")) if str(a) not in wanted]
    spec = vim.vm.ConfigSpec(deviceChange=changes)
    if any(str(a) not in wanted for a in vm.passthrough) or PREVIOUS_KEY not in vm.extra:
        spec.extraConfig = [_option(MARK_KEY, mark(left))]
        return spec
    before = previous(vm)
    spec.extraConfig = [_option(MARK_KEY, ""), _option(PREVIOUS_KEY, "")]
    for key in (MMIO_ON, MMIO_SIZE):
        if key in before:
            spec.extraConfig.append(_option(key, before[key] if isinstance(before[key], str) else ""))
    if before.get("firmware") in ("bios", "efi") and before["firmware"] != vm.firmware:
        spec.firmware = before["firmware"]
    if isinstance(before.get("locked"), bool) and before["locked"] != vm.locked:
        spec.memoryReservationLockedToMax = before["locked"]
    return spec


def previous(vm) -> dict:
    """The VM's settings from before vgpu's first attach (``vgpu.previous``), or {} when the value is not
    vgpu's: anyone who may edit the VM's advanced settings can write it, so it is read like any outside JSON
    (bounded nesting: a deeply nested value must not crash release), and then only its known keys are used."""
    from vgpu.inputs import InputFileError, parse_json

    try:
        before = parse_json(vm.extra.get(PREVIOUS_KEY, ""), PREVIOUS_KEY, f"VM {vm.name}")
    except InputFileError:
        return {}  # a hand-edited record: leave the settings as they are, drop vgpu's keys
    return before if isinstance(before, dict) else {}


def saved_config(vm, backings: list[dict]) -> str:
    """What undo needs to put ``vm`` back exactly (JSON, journaled before any change)."""
    return json.dumps({"firmware": vm.firmware, "locked": vm.locked, "devices": sorted(backings, key=lambda b: b["id"]),
                       "extra": {k: vm.extra[k] for k in MANAGED_KEYS if k in vm.extra}}, sort_keys=True)


def restore_spec(vm, device_objects: Sequence, saved: dict, system_ids: dict | None = None):
    """The reconfiguration that turns ``vm`` back into ``saved`` (from :func:`saved_config`), or None
    when it already is. ``system_ids``: the host's systemId per device now (QueryConfigTarget): a device put
    back names the host as it is, not as it was when saved (the systemId changes when ESXi is reinstalled)."""
    from pyVmomi import vim

    saved_ids = {b["id"]: b for b in saved.get("devices", [])}
    now_ids = {str(d.backing.id) for d in device_objects}
    current = system_ids or {}
    changes = [_remove(d) for d in device_objects if str(d.backing.id) not in saved_ids]
    changes += [_add(backing(b["id"], int(b["deviceId"], 16), int(b["vendorId"]), current.get(b["id"], b["systemId"]),
                             b.get("deviceName", "")), -200 - i)
                for i, b in enumerate(v for k, v in sorted(saved_ids.items()) if k not in now_ids)]
    extra = []
    saved_extra = saved.get("extra", {})
    for key in MANAGED_KEYS:
        want, have = saved_extra.get(key), vm.extra.get(key)
        if want != have:
            extra.append(_option(key, want if want is not None else ""))  # an empty value removes the key
    spec = vim.vm.ConfigSpec()
    changed = False
    if changes:
        spec.deviceChange, changed = changes, True
    if extra:
        spec.extraConfig, changed = extra, True
    if saved.get("firmware") and saved["firmware"] != vm.firmware:
        spec.firmware, changed = saved["firmware"], True
    if bool(saved.get("locked")) != vm.locked:
        spec.memoryReservationLockedToMax, changed = bool(saved.get("locked")), True
    return spec if changed else None


def soap(spec) -> str:
    """The SOAP of a ConfigSpec as ESXi 8 receives it (golden files)."""
    from pyVmomi import SoapAdapter
    text = SoapAdapter.Serialize(spec, version=VERSION)
    return text.decode() if isinstance(text, bytes) else text


def current_mmio_gb(extra: dict) -> int:
    """The VM's ``pciPassthru.64bitMMIOSizeGB`` now (0 when unset or not a number)."""
    try:
        return int(extra.get(MMIO_SIZE) or 0)
    except ValueError:
        return 0
