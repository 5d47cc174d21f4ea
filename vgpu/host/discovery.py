"""Discovery: enumerate PCI functions and build the host's Inventory.

``source="udev"`` enumerates through libudev (pyudev): the production path on a real host, and
on simulated trees under the umockdev preload. ``source="sysfs"`` walks ``<sys>/bus/pci/devices``
directly: the path for ``--sysfs-root``, snapshots and the simulator. ``auto`` picks udev for the
real /sys and sysfs otherwise. Both feed the same record reader (vgpu/host/pcifunc.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from vgpu.catalog import DEFAULT, Catalog
from vgpu.errors import HostError, InputError
from vgpu.host.facts import read_host_facts
from vgpu.host.paths import HostPaths
from vgpu.host.pcifunc import DeviceView, FunctionRecord, PathView, read_details, read_identity, unidentified_gpu
from vgpu.model.inventory import GroupMember, Gpu, IommuGroup, Inventory, VirtualFunction
from vgpu.model.pci import PciAddress
from vgpu.readiness import assess


def discover(paths: HostPaths, *, catalog: Catalog = DEFAULT, source: str = "auto") -> Inventory:
    """Read the host and return its Inventory. Raises InputError for a missing sysfs tree."""
    records, views, unidentified = _enumerate(paths, source)
    gpus = tuple(_build_gpu(rec, records, views, paths, catalog)
                 for rec in sorted(records.values(), key=lambda r: r.address)
                 if _is_catalog_pf(rec, catalog))
    orphans = tuple(rec.address for rec in records.values()
                    if _is_catalog_vf(rec, catalog) and not any(
                        rec.address in (vf.address for vf in g.vfs) for g in gpus))
    facts = read_host_facts(paths)
    return Inventory(gpus=gpus, facts=facts, source=paths.label, unidentified=unidentified,
                     findings=assess(gpus, facts, orphan_vfs=orphans, unidentified=unidentified))


def _enumerate(paths: HostPaths, source: str) -> tuple[dict[PciAddress, FunctionRecord], dict,
                                                       tuple[PciAddress, ...]]:
    """Every function with its ids, their views, and the functions that may be GPUs but whose ids
    cannot be read (reported, never silently left out)."""
    if source == "auto":
        source = "udev" if paths.is_system else "sysfs"
    if source == "udev":
        views = _udev_views()
    elif source == "sysfs":
        views = _sysfs_views(paths)
    else:
        raise InputError(f"unknown discovery source {source!r} (use auto, udev or sysfs)")
    records: dict[PciAddress, FunctionRecord] = {}
    by_address: dict[PciAddress, DeviceView] = {}
    unidentified: list[PciAddress] = []
    for view in views:
        rec = read_identity(view)
        if rec is not None:
            records[rec.address] = rec
            by_address[rec.address] = view
        elif (address := unidentified_gpu(view)) is not None:
            unidentified.append(address)
    return records, by_address, tuple(sorted(unidentified))


def _sysfs_views(paths: HostPaths) -> Iterator[DeviceView]:
    devices = paths.pci_devices()
    try:
        entries = sorted(os.listdir(devices))
    except FileNotFoundError as exc:
        raise InputError(f"{paths.label}: no PCI devices directory at {devices}",
                         hint="pass the directory that stands for /sys") from exc
    except OSError as exc:
        raise HostError(f"cannot read {devices}: {exc.strerror}") from exc
    for name in entries:
        yield PathView(os.path.join(devices, name))


def _udev_views() -> Iterator[DeviceView]:
    import pyudev  # lazy: keeps CLI start-up fast where udev is not used

    for device in pyudev.Context().list_devices(subsystem="pci"):
        yield UdevView(device)


class UdevView:
    """A function as libudev reports it; links not exposed by libudev are read beside its syspath."""

    __slots__ = ("name", "_device", "_path")

    def __init__(self, device):
        self._device = device
        self.name = device.sys_name
        self._path = PathView(device.sys_path)

    def attr(self, name: str) -> str | None:
        value = self._device.attributes.get(name)
        return None if value is None else value.decode("utf-8", "replace").strip()

    def link(self, name: str) -> str | None:
        if name == "driver":
            return self._device.driver
        return self._path.link(name)

    def link_names(self, prefix: str) -> list[str]:
        return self._path.link_names(prefix)


def _is_catalog_pf(rec: FunctionRecord, catalog: Catalog) -> bool:
    match = catalog.match(rec.vendor, rec.device)
    return match is not None and not match.is_vf


def _is_catalog_vf(rec: FunctionRecord, catalog: Catalog) -> bool:
    match = catalog.match(rec.vendor, rec.device)
    return match is not None and match.is_vf


def _build_gpu(rec: FunctionRecord, records: dict, views: dict, paths: HostPaths, catalog: Catalog) -> Gpu:
    read_details(views[rec.address], rec)
    match = catalog.match(rec.vendor, rec.device)
    vfs = []
    for index, address in rec.virtfns.items():
        vf = records.get(address)
        if vf is None:  # a dangling virtfn link: the VF vanished while we read
            continue
        read_details(views[address], vf)
        vfs.append(VirtualFunction(address=address, index=index, device_id=vf.device, driver=vf.driver,
                                   iommu_group=_group(vf.iommu_group, records, paths),
                                   numa_node=vf.numa_node))
    return Gpu(address=rec.address, model=match.model.name, device_id=rec.device, subsystem=rec.subsystem,
               driver=rec.driver, numa_node=rec.numa_node, iommu_group=_group(rec.iommu_group, records, paths),
               bars=rec.bars, link=rec.link, total_vfs=rec.total_vfs, num_vfs=rec.num_vfs,
               partition=rec.partition, vfs=tuple(vfs), vf_offset=rec.vf_offset, vf_stride=rec.vf_stride)


def _group(number: int | None, records: dict, paths: HostPaths) -> IommuGroup | None:
    """The IOMMU group with every member: all of them must go to vfio-pci together."""
    if number is None:
        return None
    try:
        names = sorted(os.listdir(paths.sys / "kernel" / "iommu_groups" / str(number) / "devices"))
    except OSError:
        names = []
    members = []
    for name in names:
        try:
            address = PciAddress.parse(name)
        except ValueError:
            continue
        rec = records.get(address)
        if rec is None:
            continue
        members.append(GroupMember(address=address, vendor=rec.vendor, device=rec.device, driver=rec.driver,
                                   is_bridge=rec.is_bridge))
    return IommuGroup(number=number, members=tuple(members))
