"""The VMs side of a plan: which VM gets which functions, who holds them now, and the cold-plug steps.

``planned_vms`` applies the profile's ``vms`` section to the functions the host will have once the
plan is applied (VF addresses predicted from each PF's SR-IOV offset and stride). ``vm_view`` asks
the hypervisor (libvirt, or the simulated one) what it knows. ``attach_steps`` and ``detach_steps``
are pure: they turn the two into plan steps, warnings and refusals.

vgpu attaches only to VMs that are already defined (it does not create VMs) and only while they are
shut off: GPUs with huge BARs are cold-plugged (docs/hardware.md §5). A VM that is not defined yet is named in
a warning; a running one that lacks its functions is pending (the host does not match the profile until it is
shut down); both get their functions on a later `vgpu provision`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vgpu.catalog import Mode
from vgpu.errors import VgpuError
from vgpu.hypervisor.base import DomainInfo, holding
from vgpu.model.inventory import Inventory
from vgpu.model.pci import PciAddress
from vgpu.model.plan import AttachFunctions, DetachFunctions, Problem

VmMap = tuple[tuple[str, tuple[PciAddress, ...]], ...]  # ((VM name, functions), ...) in VM order


@dataclass(frozen=True)
class _Function:
    address: PciAddress
    numa_node: int | None


@dataclass(frozen=True)
class PlannedVms:
    vms: VmMap | None  # None: the VF addresses cannot be predicted on this host
    numa: Mapping[PciAddress, int | None] = field(default_factory=dict)  # function -> its GPU's node


def planned_vms(profile, desired, inv: Inventory) -> PlannedVms:
    """The profile's VM assignment on this host. Raises RefusedError when the functions cannot be
    assigned as the profile asks (an address it does not provide, a NUMA split that fails)."""
    functions: list[_Function] = []
    for t in desired.targets:
        gpu = inv.gpu(t.address)
        if gpu is None:
            continue  # the planner's check names it
        if desired.mode is Mode.PASSTHROUGH:
            functions.append(_Function(gpu.address, gpu.numa_node))
            continue
        addresses = gpu.vf_addresses(t.vf_num)
        if addresses is None:
            return PlannedVms(None)
        functions += [_Function(a, gpu.numa_node) for a in addresses]
    if not functions:
        return PlannedVms(())
    vms = tuple((vm, tuple(addresses)) for vm, addresses in profile.vm_assignment(functions).items())
    return PlannedVms(vms, {f.address: f.numa_node for f in functions})


@dataclass
class VmView:
    holders: dict[PciAddress, list[str]] = field(default_factory=dict)  # function -> ["VM name"] (active VMs)
    domains: dict[str, DomainInfo] | None = None  # None: libvirt was not asked (a capture) or is unreachable


def sim_hypervisor_dir(sim_root: Path) -> Path:
    return Path(sim_root) / "var" / "lib" / "libvirt-sim"


def vm_view(target, inv: Inventory, warnings: list[str]) -> VmView:
    """Ask the hypervisor which VMs exist and which GPU functions they reference. A capture is not
    asked (it has no libvirt) and an unreachable libvirt is a warning: processes holding /dev/vfio
    are still checked by the caller."""
    if target.read_only:
        warnings.append(f"{target.paths.label} is a capture: which VMs use its GPUs was not checked "
                        "(run plan on the host itself for that)")
        return VmView()
    addresses = [fn.address for g in inv.gpus for fn in (g, *g.vfs)]
    try:
        domains = {d.name: d for d in target.open_hypervisor().domains()}
    except ImportError:
        warnings.append("libvirt-python is not installed: which VMs use the GPUs was not checked")
        return VmView()
    except VgpuError as exc:
        warnings.append(f"could not ask libvirt which VMs use the GPUs ({exc.message}); "
                        "only processes holding /dev/vfio were checked")
        return VmView()
    holders = {a: [f"VM {d.name}" for d in ds if d.active] for a, ds in holding(domains.values(), addresses).items()}
    return VmView({a: names for a, names in holders.items() if names}, domains)


def attach_steps(planned: PlannedVms, domains: Mapping[str, DomainInfo] | None, numa_policy: str,
                 warnings: list[str]) -> tuple[list[AttachFunctions], list[Problem], tuple[str, ...]]:
    """Cold-plug steps for the assigned VMs that exist and lack their functions; problems for a
    function another VM's configuration already holds; and what is pending outside vgpu: a running VM that
    lacks its functions (cold-plug only) keeps the host from matching the profile until it is shut down, so
    plan, provision and status all say the host is not in sync yet (Plan.pending), none claims it matches."""
    if planned.vms is None or domains is None:
        return [], [], ()
    steps, problems, undefined, running = [], [], [], []
    owner = {a: d.name for d in domains.values() for a in d.hostdevs}
    for vm, functions in planned.vms:
        domain = domains.get(vm)
        if domain is None:
            undefined.append(vm)
            continue
        taken = [(a, owner[a]) for a in functions if owner.get(a) not in (None, vm)]
        for address, other in taken:
            problems.append(Problem(f"VM {vm}", f"the profile assigns {address} to it, but VM {other}'s configuration "
                                    "already has it",
                                    f"detach it from {other} (virsh detach-device {other} --config), or change the "
                                    "profile's vms section"))
        missing = tuple(a for a in functions if a not in domain.hostdevs)
        if taken or not missing:
            continue
        if domain.active:
            running.append(f"shut down VM {vm} (it is running, and GPUs are cold-plugged only), then run provision "
                           f"again: it attaches {', '.join(str(a) for a in missing)}")
            continue
        nodes = {planned.numa.get(a) for a in functions}
        node = nodes.pop() if numa_policy != "none" and len(nodes) == 1 else None
        steps.append(AttachFunctions(vm, missing, node))
    if undefined and len(undefined) < len(planned.vms):  # none defined: VMs are not managed with vgpu here
        shown = ", ".join(undefined[:4]) + (f" and {len(undefined) - 4} more" if len(undefined) > 4 else "")
        warnings.append(f"{len(undefined)} VM(s) of the assignment are not defined in libvirt ({shown}): vgpu "
                        "attaches functions to VMs that exist; define them (q35, UEFI) and run provision again")
    return steps, problems, tuple(running)


def detach_steps(domains: Mapping[str, DomainInfo] | None, functions: Sequence[PciAddress]) -> list[DetachFunctions]:
    """For release: take back from shut-off VMs the functions vgpu attached to them (running VMs
    holding them are holders, refused without --force, and keep their configuration)."""
    if not domains:
        return []
    wanted = set(functions)
    steps = []
    for d in sorted(domains.values(), key=lambda d: d.name):
        mine = tuple(a for a in d.assigned if a in wanted)
        if mine and not d.active:
            steps.append(DetachFunctions(d.name, mine))
    return steps
