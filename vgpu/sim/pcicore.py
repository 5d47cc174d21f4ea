"""PCI core behaviour of the simulated kernel: matching, probe, bind/unbind, SR-IOV enable/disable.

Mirrors drivers/pci/pci-driver.c (driver_override takes precedence over id tables; dynamic ids
from new_id), drivers/base/dd.c (probe only unbound devices) and drivers/pci/iov.c (VF routing
ids, sriov_numvfs rules). Every function takes a ``Ctx`` holding the state being changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vgpu.catalog import DEFAULT as CATALOG
from vgpu.errors import HostError
from vgpu.model.pci import PciAddress
from vgpu.sim import drivers
from vgpu.sim.build import vf_address
from vgpu.sim.state import Bar, Function, SimState
from vgpu.sim.tree import registered_drivers


@dataclass
class Ctx:
    """One kernel operation in progress: the state it changes and what to render afterwards."""

    state: SimState
    dirty: set[str] = field(default_factory=set)
    removed: list[Function] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)

    def log(self, text: str) -> None:
        self.state.clock_us += 1237
        secs, usecs = divmod(self.state.clock_us, 1_000_000)
        self.log_lines.append(f"[{secs:5d}.{usecs:06d}] {text}")

    def fn(self, address: str) -> Function:
        f = self.state.functions.get(address)
        if f is None:
            raise HostError(f"no PCI device {address} on this host (ENODEV)")
        return f


def gim_log(ctx: Ctx, f: Function, func: str, msg: str, level: str = "info") -> None:
    """GIM's dmesg format: ``gim <level> libgv: [dom:bus:dev:fn][func:line] msg``
    (tests/fixtures/system/dmesg-gim-*.txt); function names and lines are simulated."""
    p = f.pci
    ctx.log(f"gim {level} libgv: [{p.domain:x}:{p.bus:x}:{p.slot:x}:{p.function:x}][{func}] {msg}")


def is_registered(state: SimState, driver: str) -> bool:
    return driver in registered_drivers(state)


def gim_takes(state: SimState, f: Function) -> bool:
    """gim drives catalog-known AMD PFs with SR-IOV support, limited by ``enabled_devices``."""
    if f.physfn is not None:
        return False
    match = CATALOG.match(f.vendor, f.device)
    if match is None or match.is_vf or not match.model.sriov_capable:
        return False
    enabled = state.gim_config.get("enabled_devices") or []
    return not enabled or f.pci in {PciAddress.parse(a) for a in enabled}


def matches(state: SimState, f: Function, driver: str) -> bool:
    """Would ``driver`` match ``f`` (driver_override honoured, as pci_match_device does)?"""
    if f.driver_override is not None:
        return f.driver_override == driver
    if driver == "gim":
        return gim_takes(state, f)
    if driver == f.natural_driver:
        return True
    ids = set(state.dynamic_ids.get(driver, []))
    if driver == "vfio-pci":
        params = state.modules.get("vfio_pci", {})
        ids |= {i.replace(":", " ").lower() for i in params.get("ids", "").split(",") if i}
    return f"{f.vendor:04x} {f.device:04x}" in {" ".join(i.split()[:2]) for i in ids}


def probe(ctx: Ctx, f: Function, only: str | None = None) -> bool:
    """Try to bind an unbound function; returns whether it ended up bound."""
    if f.driver is not None:
        return False
    if only is not None:
        candidates = [only]
    elif f.driver_override is not None:
        candidates = [f.driver_override]
    else:  # gim before amdgpu: on a GIM host it is gim that must win the PF
        candidates = ["gim", f.natural_driver or "", "vfio-pci"] + sorted(ctx.state.dynamic_ids)
    for drv in candidates:
        if drv and is_registered(ctx.state, drv) and matches(ctx.state, f, drv):
            if bind(ctx, f, drv):
                return True
    return False


def bind(ctx: Ctx, f: Function, driver: str) -> bool:
    """Run ``driver``'s probe on ``f``. Returns False when the probe fails (device stays unbound)."""
    if driver == "vfio-pci" and f.iommu_group is None:
        # vfio_pci_core_register_device fails without an IOMMU group (drivers/vfio/vfio_main.c)
        ctx.log(f"vfio-pci {f.address}: probe of {f.address} failed with error -22")
        return False
    if driver == "gim":
        from vgpu.sim import gim  # gim builds on this module
        gim.probe(ctx, f)
        return True
    f.driver = driver
    if driver == "amdgpu" and f.gpu_model and f.physfn is None:
        f.compute_partition, f.memory_partition = "SPX", "NPS1"
    ctx.dirty.add(f.address)
    return True


def holders_of(state: SimState, functions: list[Function]) -> list[str]:
    """"process N (comm) holds /dev/vfio/G" for processes holding the group of one of these."""
    groups = {f.iommu_group for f in functions if f.iommu_group is not None}
    return [f"process {h.pid} ({h.comm}) holds /dev/vfio/{h.group}"
            for h in state.holders.values() if h.group in groups]


def ensure_not_held(ctx: Ctx, functions: list[Function], what: str) -> None:
    held = holders_of(ctx.state, functions)
    if held:
        for f in functions:
            if f.driver == "vfio-pci" and holders_of(ctx.state, [f]):
                ctx.log(f"vfio-pci {f.address}: Relaying device request to user (#0)")
        raise HostError(f"{what} would block: {'; '.join(held)} (the kernel waits for the device to be "
                        "released)", hint="stop the VM or process first")


def unbind(ctx: Ctx, f: Function) -> None:
    """Run the driver's remove: a PF driver disables SR-IOV, removing its VFs."""
    if f.driver is None:
        return
    vfs = ctx.state.vfs_of(f)
    ensure_not_held(ctx, [f, *vfs], f"unbinding {f.address} from {f.driver}")
    if vfs:
        remove_vfs(ctx, f)
    if f.driver == "gim":
        gim_log(ctx, f, "amdgv_device_fini:1402", "GPU removed from GIM")
    f.driver = None
    f.compute_partition = f.memory_partition = None
    ctx.dirty.add(f.address)


def create_vfs(ctx: Ctx, pf: Function, count: int) -> list[Function]:
    """Enable ``count`` VFs: new functions beside the PF, a new IOMMU group each, then probed."""
    made = []
    for i in range(count):
        address = vf_address(pf, i)
        bars = [Bar(index=b.index, start=b.start + i * b.size, size=b.size, flags=b.flags)
                for b in pf.sriov.vf_bars]
        vf = Function(address=address, parent=pf.parent, kind=pf.kind, vendor=pf.vendor,
                      device=pf.sriov.vf_device, subsystem_vendor=pf.subsystem_vendor,
                      subsystem_device=pf.subsystem_device, class_code=pf.class_code, revision=pf.revision,
                      numa_node=pf.numa_node, natural_driver=pf.natural_driver, bars=bars, link=pf.link,
                      physfn=pf.address, vf_index=i, gpu_model=pf.gpu_model)
        if ctx.state.iommu:
            vf.iommu_group = _free_group(ctx.state)
        ctx.state.functions[address] = vf
        ctx.dirty.add(address)
        ctx.log(f"pci {address}: [{vf.vendor:04x}:{vf.device:04x}] type 00 class 0x{vf.class_code:06x} "
                "PCIe Endpoint")
        made.append(vf)
    pf.sriov.num_vfs = count
    ctx.dirty.add(pf.address)
    for vf in made:  # sriov_drivers_autoprobe is 1
        probe(ctx, vf)
    return made


def _free_group(state: SimState) -> int:
    """The lowest unused group number: the kernel allocates group ids with ida_alloc
    (drivers/iommu/iommu.c iommu_group_alloc), so ids freed by removed VFs come back."""
    used = {f.iommu_group for f in state.functions.values()}
    number = 0
    while number in used:
        number += 1
    return number


def remove_vfs(ctx: Ctx, pf: Function) -> None:
    vfs = ctx.state.vfs_of(pf)
    ensure_not_held(ctx, vfs, f"disabling the VFs of {pf.address}")
    for vf in vfs:
        vf.driver = None
        ctx.removed.append(vf)
        del ctx.state.functions[vf.address]
        ctx.dirty.discard(vf.address)
    pf.sriov.num_vfs = 0
    ctx.dirty.add(pf.address)


def write_sriov_numvfs(ctx: Ctx, pf: Function, value: str) -> None:
    """drivers/pci/iov.c sriov_numvfs_store: only a driver with sriov_configure may change VFs."""
    try:
        count = int(value.strip(), 0)
    except ValueError:
        raise HostError(f"writing {value.strip()!r} to {pf.address}/sriov_numvfs failed: "
                        "Invalid argument (EINVAL)") from None
    if count < 0 or count > pf.sriov.total_vfs:
        ctx.log(f"pci {pf.address}: requested {count} VFs exceeds TotalVFs {pf.sriov.total_vfs}")
        raise HostError(f"{pf.address}: {count} VFs requested but TotalVFs is {pf.sriov.total_vfs} (ERANGE)")
    if count == pf.sriov.num_vfs:
        return
    if pf.driver is None:
        ctx.log(f"pci {pf.address}: no driver bound to device; cannot configure SR-IOV")
        raise HostError(f"{pf.address}: no driver bound to device; cannot configure SR-IOV (ENOENT)")
    if not _sriov_configurable(ctx.state, pf.driver):
        ctx.log(f"{pf.driver} {pf.address}: Driver does not support SRIOV configuration via sysfs")
        raise HostError(f"{pf.address}: driver {pf.driver} does not support SRIOV configuration via sysfs "
                        "(ENOENT)", hint="GIM creates VFs from its vf_num parameter: reload gim instead")
    if count and pf.sriov.num_vfs:
        ctx.log(f"pci {pf.address}: {pf.sriov.num_vfs} VFs already enabled. "
                f"Disable before enabling {count} VFs")
        raise HostError(f"{pf.address}: {pf.sriov.num_vfs} VFs already enabled; write 0 first (EBUSY)")
    if count == 0:
        remove_vfs(ctx, pf)
    else:
        create_vfs(ctx, pf, count)


def _sriov_configurable(state: SimState, driver: str) -> bool:
    if driver == "vfio-pci":  # vfio-pci enable_sriov=Y (drivers/vfio/pci/vfio_pci.c)
        return state.modules.get("vfio_pci", {}).get("enable_sriov", "N") in ("Y", "1")
    return driver in drivers.SRIOV_CONFIGURE


def address_from(path: Path, value: str) -> str:
    """The device a bind/unbind/drivers_probe write names, normalised; ENODEV when malformed."""
    try:
        return str(PciAddress.parse(value.strip()))
    except Exception:
        raise HostError(f"writing {value.strip()!r} to {path}: No such device (ENODEV)") from None
