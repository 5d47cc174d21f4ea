"""How ESXi plans (pure): from the profile resolved on the host and the host's state to a Plan.

The same vocabulary as on KVM (vgpu/planner.py): problems are collected into one Refusal, only what
differs becomes a step, and a host in sync plans nothing. What differs is the platform: GPUs are
assigned whole by DirectPath I/O (GIM is Linux-only, docs/hardware.md §6), the host side is one
passthrough switch per device, and the VM side is a reconfiguration of a powered-off VM.

A passthrough switch that ESXi activates only at the next boot leaves the plan *pending*: vgpu
never reboots a host; the operator does, in a maintenance window, and runs provision again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vgpu.catalog import DEFAULT, Catalog, Hypervisor
from vgpu.esxi.host import HostState, VmConfig
from vgpu.esxi.specs import current_mmio_gb, mmio_gb
from vgpu.model.inventory import Bar, Finding, Gpu, HostFacts, Inventory, Link, Partition, Severity
from vgpu.model.pci import PciAddress
from vgpu.model.plan import (AttachPassthrough, DetachPassthrough, Disruption, Plan, Problem, RecordProfile,
                             SetPassthrough)
from vgpu.planner import Desired

PASSTHRU_DRIVER = "pciPassthru"  # ESXi's owner of a device in passthrough ("Module Name: pciPassthru", esxcli)
GIB = 1 << 30


def vram_bar_bytes(model) -> int:
    """The VRAM BAR of a GPU model: the vSphere API does not report BARs, so vgpu takes the size the
    GPU exposes (its HBM rounded up to a power of two: MI300X 192 GB -> 256 GiB; docs/esxi.md)."""
    if model is None or not model.hbm_gb:
        return 0
    return 1 << (model.hbm_gb * GIB - 1).bit_length()


def inventory(state: HostState, catalog: Catalog = DEFAULT) -> Inventory:
    """The host's AMD Instinct GPUs in vgpu's inventory schema (platform "esxi")."""
    gpus = []
    for d in state.devices:
        match = catalog.match(d.vendor, d.device)
        if match is None or match.is_vf:
            continue
        bar = vram_bar_bytes(match.model)
        gpus.append(Gpu(address=d.address, model=match.model.name, device_id=d.device, subsystem=d.subsystem,
                        driver=PASSTHRU_DRIVER if d.active else None, numa_node=d.numa_node, iommu_group=None,
                        bars=(Bar(0, 0, bar, True, True),) if bar else (), link=Link(None, None),
                        total_vfs=None, num_vfs=None, partition=Partition()))
    facts = HostFacts(iommu_groups=0, iommu_units=0, cmdline=None, modules={}, hugepages_1g=None, hugepages_2m=None,
                      blacklisted=())
    return Inventory(tuple(gpus), facts, tuple(findings(state, gpus)), source=f"ESXi {state.name}",
                     platform="esxi")


def findings(state: HostState, gpus) -> list[Finding]:
    out = [Finding("esxi", Severity.OK, f"{state.product} (vSphere API {state.api_version})")]
    if state.maintenance:
        out.append(Finding("maintenance", Severity.WARNING, f"{state.name} is in maintenance mode: its VMs cannot be "
                           "powered on until it exits", "exit maintenance mode once the host is ready"))
    for g in gpus:
        d = state.device(g.address)
        if not d.capable:
            out.append(Finding("passthrough", Severity.ERROR, f"{g.address} ({g.model}) is not passthrough capable",
                               "enable VT-d/AMD-Vi (IOMMU) and SR-IOV/Above 4G decoding in the server's firmware"))
        elif d.enabled and not d.active:
            out.append(Finding("passthrough", Severity.WARNING, f"{g.address} ({g.model}): passthrough is enabled and "
                               "becomes active at the next reboot of the host", "reboot the host in a maintenance "
                               "window"))
    for g in gpus:  # which VMs hold which GPU: discovery answers it on ESXi as libvirt's view does on KVM
        for vm, how in state.holders(g.address):
            if g.address in vm.passthrough:
                out.append(Finding("vms", Severity.INFO, f"{g.address} is in the configuration of VM {vm.name} "
                                   f"({vm.power}{', attached by vgpu' if g.address in vm.assigned else ''})"))
            else:
                out.append(Finding("vms", Severity.INFO, f"{g.address}: VM {vm.name} ({vm.power}): {how}"))
    if not gpus:
        out.append(Finding("gpus", Severity.ERROR, "no AMD Instinct GPU found on the host"))
    return out


@dataclass(frozen=True)
class PlanInput:
    desired: Desired
    state: HostState
    inventory: Inventory
    vms: tuple[tuple[str, tuple[PciAddress, ...]], ...] | None  # the profile's assignment
    recorded: str | None  # the record vgpu keeps for this host now
    record_where: str
    force: bool = False


def check(p: PlanInput) -> list[Problem]:
    """Every reason the profile cannot be applied to this host."""
    problems = []
    if p.desired.hypervisor is not Hypervisor.ESXI:
        problems.append(Problem("host", f"{p.inventory.source} is a VMware ESXi host, and profile {p.desired.profile} "
                                f"is for {p.desired.hypervisor.value}", "use a profile with hypervisor: esxi (for example "
                                "mi300x-esxi-passthrough)"))
        return problems
    for t in p.desired.targets:
        d = p.state.device(t.address)
        gpu = p.inventory.gpu(t.address)
        if d is None or gpu is None:
            problems.append(Problem(str(t.address), "no such GPU on the host"))
        elif gpu.model != p.desired.model:
            problems.append(Problem(f"{t.address} ({gpu.model})", f"the profile is for {p.desired.model}"))
        elif not d.capable:
            problems.append(Problem(f"{t.address} ({gpu.model})", "ESXi reports it is not passthrough capable",
                                    "enable the IOMMU (AMD-Vi/VT-d) and Above 4G decoding in the firmware"))
    return problems


def make_plan(p: PlanInput, warnings: list[str]) -> tuple[Plan, list[Problem]]:
    """The steps, in order: passthrough on, VMs, record. Problems about VMs come back to the caller
    (they refuse the plan like host problems)."""
    steps: list = []
    pending: list[str] = []
    if p.state.maintenance:  # the administrator's change window: passthrough, reboot, powered-off VMs, then exit
        warnings.append(f"{p.state.name} is in maintenance mode: vgpu prepares the host and the powered-off VMs; "
                        "they can be powered on once it exits maintenance mode")
    for t in p.desired.targets:
        d = p.state.device(t.address)
        if not d.enabled:
            steps.append(SetPassthrough(t.address, True))
        elif not d.active:
            pending.append(f"reboot {p.state.name} to activate passthrough on {t.address} (this host applies it at "
                           "boot), then run provision again")
    bars = gpu_bars(p.inventory)
    vm_steps, problems = attach_steps(p, bars, warnings)
    if pending and vm_steps:
        pending.append(f"then: {len(vm_steps)} VM(s) get their GPUs ({', '.join(s.vm for s in vm_steps)})")
        vm_steps = [s for s in vm_steps if all(p.state.device(a).active or not p.state.device(a).enabled
                                               for a in s.functions)]
    steps += vm_steps
    record = record_with_before(p.desired.record, p.recorded, p.state, tuple(t.address for t in p.desired.targets))
    if p.recorded != record:
        steps.append(RecordProfile(p.desired.profile, record, p.record_where))
    return Plan(profile=p.desired.profile, host=p.inventory.source, steps=tuple(steps), vms=p.vms,
                pending=tuple(pending)), problems


def gpu_bars(inv: Inventory) -> dict[PciAddress, int]:
    return {g.address: g.bar64_bytes for g in inv.gpus}


def attach_steps(p: PlanInput, bars: Mapping[PciAddress, int], warnings: list[str]
                 ) -> tuple[list[AttachPassthrough], list[Problem]]:
    """One step per assigned VM that lacks GPUs. A powered-on VM, or a GPU another VM's configuration
    has, is refused (named) unless --force, which skips that VM or shares the GPU's configuration."""
    if not p.vms:
        return [], []
    steps, problems, undefined = [], [], []
    for name, functions in p.vms:
        vm = p.state.vm(name)
        if vm is None:
            undefined.append(name)
            continue
        missing = tuple(a for a in functions if a not in vm.passthrough)
        others = [(a, o.name, f"{how}; {o.power}") for a in missing for o, how in p.state.holders(a, besides=name)]
        if not missing and settings_ok(vm, bars):
            continue
        if vm.firmware != "efi" and vm.disks:
            problems.append(firmware_problem(vm))
            continue
        if vm.power != "poweredOff":
            if p.force:
                warnings.append(f"VM {name} is {vm.power}: it was skipped (--force); power it off and run provision "
                                "again to attach its GPUs")
                continue
            problems.append(Problem(f"VM {name}", f"is {vm.power}, and ESXi changes passthrough devices only while a "
                                    "VM is off", "power it off (vgpu never powers VMs off), or --force to skip it"))
            continue
        for address, other, power in others:
            if p.force:
                warnings.append(f"{address} stays in VM {other}'s configuration too (--force): only one of the two "
                                "can run at a time")
            else:
                problems.append(Problem(f"VM {name}", f"the profile assigns {address} to it, but VM {other} holds "
                                        f"it ({power})", f"remove it from {other}, change the "
                                        "profile's vms section, or --force"))
        if others and not p.force:
            continue
        window = sum(bars.get(a, 0) for a in dict.fromkeys((*vm.passthrough, *missing)))
        steps.append(AttachPassthrough(name, missing, max(mmio_gb(window), current_mmio_gb(vm.extra)),
                                       firmware_was=vm.firmware))
    if undefined and len(undefined) < len(p.vms):
        shown = ", ".join(undefined[:4]) + (f" and {len(undefined) - 4} more" if len(undefined) > 4 else "")
        warnings.append(f"{len(undefined)} VM(s) of the assignment do not exist on {p.state.name} ({shown}): vgpu "
                        "attaches GPUs to VMs that exist; create them and run provision again")
    return steps, problems


def firmware_problem(vm: VmConfig) -> Problem:
    """A BIOS VM with a disk: its guest was installed for BIOS (MBR), and switching the firmware to EFI,
    which 64-bit BARs need (docs/esxi.md), leaves it unbootable. vgpu never switches it; --force does not
    either: converting the guest is the VM owner's change."""
    return Problem(f"VM {vm.name}", f"boots with BIOS firmware and has {vm.disks} virtual disk(s): switching it to EFI "
                   "(DirectPath I/O of GPUs needs EFI) would leave an installed BIOS guest unbootable",
                   "convert the guest to EFI boot (e.g. mbr2gpt, or reinstall), set the VM's firmware to EFI, then run "
                   "vgpu again; or assign a new VM")


def settings_ok(vm: VmConfig, bars: Mapping[PciAddress, int]) -> bool:
    """Does a VM that has its GPUs also have what starting it needs (EFI, memory lock, MMIO window)?"""
    if not vm.passthrough:
        return True
    window = sum(bars.get(a, 0) for a in vm.passthrough)
    # the catalog's BAR is the VRAM BAR only: the window must be what vgpu sizes (twice, a power of two), not
    # just the BAR, which a 256 GB window "holds" while power-on fails on the small BARs beside it
    mmio = (vm.extra.get("pciPassthru.use64bitMMIO", "").upper() == "TRUE"
            and current_mmio_gb(vm.extra) >= mmio_gb(window))
    return vm.firmware == "efi" and vm.locked and (mmio or window == 0)


def release_steps(state: HostState, enabled_by_vgpu: tuple[PciAddress, ...]) -> list:
    """Detach what vgpu attached from powered-off VMs, then turn passthrough off on the GPUs whose
    passthrough vgpu turned on (the record keeps each GPU's state before vgpu: one that was on stays on).
    Every VM that still holds such a GPU afterwards, running or not, fixed or Dynamic DirectPath I/O, is
    named as disrupted (a powered-off one would fail its next power-on): refused without --force."""
    steps: list = []
    detached: dict[str, tuple[PciAddress, ...]] = {}
    for vm in state.vms:
        mine = tuple(a for a in vm.assigned)
        if mine and vm.power == "poweredOff":
            steps.append(DetachPassthrough(vm.name, mine))
            detached[vm.name] = mine
    for address in enabled_by_vgpu:
        d = state.device(address)
        if d is not None and d.enabled:
            left = tuple(v.name for v, how in state.holders(address)
                         if not (address in detached.get(v.name, ()) and how == "its configuration has it"))
            steps.append(SetPassthrough(address, False, Disruption(functions=(address,) if left else (), vms=left)))
    return steps


def record_with_before(record: str, recorded: str | None, state: HostState,
                       targets: tuple[PciAddress, ...]) -> str:
    """The record with each GPU's passthrough state from before vgpu first changed it: kept from the
    record there is, else read now (before this run's steps), so that release restores exactly that."""
    import json

    data = json.loads(record)
    try:
        kept = json.loads(recorded or "{}").get(BEFORE_KEY) or {}
    except (ValueError, AttributeError):
        kept = {}
    before = {}
    for a in targets:
        d = state.device(a)
        was = kept.get(str(a)) if isinstance(kept, dict) else None
        before[str(a)] = was if isinstance(was, bool) else bool(d and d.enabled)
    data[BEFORE_KEY] = before
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


BEFORE_KEY = "esxi_passthrough_before"  # in the record: address -> passthrough enabled before vgpu
