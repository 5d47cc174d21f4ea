"""GPU clients in a plan: who holds GIM's SMI device, /dev/kfd or a GPU's DRM node when a step runs.

A gim reload or a partition change fails while they hold them ("Module gim is in use", "device busy":
docs/hardware.md §3), so each disruptive step names them: systemd services go into the step's
``units`` (provision stops them before the step and starts and verifies them after, also when it fails,
as mig-parted's apply hooks do), other processes into its ``clients`` (they refuse the run unless
--force, like any holder). Pure: the clients were read by vgpu.host.holders.gpu_clients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from vgpu.host.holders import GpuClient
from vgpu.model.pci import PciAddress
from vgpu.model.plan import BindDevice, Plan, ReloadGim, SetMemoryPartition, UnbindDevice

Selector = Callable[[Sequence[GpuClient], Sequence[PciAddress], bool], list[GpuClient]]


def with_gpu_clients(plan: Plan, clients: Sequence[GpuClient], select: Selector) -> Plan:
    """``plan`` with each disruptive step's units and clients filled in. ``select(clients, functions,
    host_wide)`` picks the clients a step touches (vgpu.host.holders.clients_for over the host's paths)."""
    if not clients:
        return plan
    steps = []
    for step in plan.steps:
        scope = _scope(step)
        if scope is None:
            steps.append(step)
            continue
        functions, host_wide = scope
        touched = select(clients, functions, host_wide)
        d = step.disruption
        units = tuple(dict.fromkeys([*d.units, *(c.unit for c in touched if c.unit)]))
        others = tuple(dict.fromkeys([*d.clients, *(c.describe() for c in touched if not c.unit)]))
        steps.append(replace(step, disruption=replace(d, units=units, clients=others)))
    return replace(plan, steps=tuple(steps))


def _scope(step) -> tuple[tuple[PciAddress, ...], bool] | None:
    """(functions whose DRM nodes matter, whether GIM's SMI device and /dev/kfd matter) for a step that
    needs the GPU free; None for steps that do not."""
    if isinstance(step, ReloadGim):
        return tuple(step.pfs), True
    if isinstance(step, SetMemoryPartition):
        return (step.pf,), True
    if isinstance(step, (BindDevice, UnbindDevice)):
        # amdgpu's KFD spans every GPU it drives: taking one away from amdgpu needs /dev/kfd closed
        was_amdgpu = getattr(step, "previous", None) == "amdgpu"
        return (step.address,), was_amdgpu
    return None
