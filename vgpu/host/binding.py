"""Driver binding the way the kernel wants it: driver_override, unbind, drivers_probe, read back.

docs/hardware.md §4 (and AMD's GPU operator): write the driver name to ``driver_override``,
unbind from the current driver, write the address to ``/sys/bus/pci/drivers_probe``, then re-read
the ``driver`` link and fail if it is not the wanted driver; for vfio-pci ``/dev/vfio/<group>``
must exist. Every write goes through a KernelOps, so the simulator and a real kernel run this same
code.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from vgpu.errors import HostError, InputError
from vgpu.host.kernel import KernelOps
from vgpu.host.paths import HostPaths
from vgpu.model.pci import PciAddress

VFIO = "vfio-pci"


def device_dir(paths: HostPaths, address: PciAddress) -> Path:
    path = paths.pci_devices() / str(address)
    if not path.exists():
        raise InputError(f"{address}: no such PCI function on {paths.label}",
                         hint="check the address with `vgpu discover` (sysfs form 0000:85:00.0)")
    return path


def current_driver(paths: HostPaths, address: PciAddress) -> str | None:
    try:
        return os.path.basename(os.readlink(device_dir(paths, address) / "driver"))
    except OSError:
        return None


def iommu_group(paths: HostPaths, address: PciAddress) -> int | None:
    try:
        return int(os.path.basename(os.readlink(device_dir(paths, address) / "iommu_group")))
    except (OSError, ValueError):
        return None


def bind(paths: HostPaths, kernel: KernelOps, address: PciAddress, driver: str, *,
         timeout: float = 10.0) -> str | None:
    """Bind ``address`` to ``driver``; returns the driver it had before. Raises HostError if it did not take."""
    dev = device_dir(paths, address)
    previous = current_driver(paths, address)
    kernel.write_attr(dev / "driver_override", driver)
    if previous == driver:
        return previous
    if previous is not None:
        kernel.write_attr(dev / "driver" / "unbind", str(address))
    kernel.write_attr(paths.sys / "bus" / "pci" / "drivers_probe", str(address))
    _wait_for_driver(paths, kernel, address, driver, timeout)
    if driver == VFIO:
        _check_vfio_node(paths, address, timeout)
    return previous


def unbind(paths: HostPaths, kernel: KernelOps, address: PciAddress, *, restore: str | None = None,
           timeout: float = 10.0) -> None:
    """Clear driver_override and unbind; with ``restore``, bind that driver again (rollback, release)."""
    dev = device_dir(paths, address)
    kernel.write_attr(dev / "driver_override", "\n")  # an empty write clears the override
    if current_driver(paths, address) is not None:
        kernel.write_attr(dev / "driver" / "unbind", str(address))
    if restore:
        kernel.write_attr(paths.sys / "bus" / "pci" / "drivers" / restore / "bind", str(address))
        _wait_for_driver(paths, kernel, address, restore, timeout)


def _wait_for_driver(paths: HostPaths, kernel: KernelOps, address: PciAddress, driver: str,
                     timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        kernel.settle(min(1.0, timeout))
        now = current_driver(paths, address)
        if now == driver:
            return
        if time.monotonic() >= deadline:
            raise HostError(f"{address} is bound to {now or 'no driver'} after binding it to {driver}",
                            hint=f"is the {driver} module loaded? see `dmesg | tail` for the probe error")
        time.sleep(0.05)


def _check_vfio_node(paths: HostPaths, address: PciAddress, timeout: float) -> None:
    group = iommu_group(paths, address)
    if group is None:
        raise HostError(f"{address} is on vfio-pci but has no IOMMU group", hint="is the IOMMU enabled?")
    if paths.dev is None:
        return
    node = paths.dev / "vfio" / str(group)
    deadline = time.monotonic() + timeout
    while not node.exists():
        if time.monotonic() >= deadline:
            raise HostError(f"{address} is on vfio-pci but {node} did not appear",
                            hint="check that every device in IOMMU group "
                                 f"{group} is bound to vfio-pci or has no driver")
        time.sleep(0.05)
