"""Simulated systemd services whose processes hold GPU device nodes (GPU clients, docs/hardware.md §3).

A machine spec's ``state.gpu_clients`` start at boot as processes (``Holder`` with a ``device``), some as part
of a service (``unit``). ``systemctl stop`` ends a service's processes and remembers them; ``start`` brings
them back with new pids. gim cannot unload while anyone holds GIM's SMI device or /dev/kfd
(vgpu.sim.modules.unload), as a real module whose device is open cannot.
"""

from __future__ import annotations

from vgpu.errors import HostError
from vgpu.sim.pcicore import Ctx
from vgpu.sim.state import Holder

BLOCKS_GIM_UNLOAD = ("/dev/kfd", "/dev/gim-smi")


def add_client(ctx: Ctx, comm: str, device: str, unit: str = "") -> int:
    pid = ctx.state.next_pid
    ctx.state.next_pid += 1
    ctx.state.holders[str(pid)] = Holder(pid=pid, comm=comm, group=-1, device=device, unit=unit)
    return pid


def stop(ctx: Ctx, unit: str) -> None:
    procs = [h for h in ctx.state.holders.values() if h.unit == unit]
    if not procs and unit not in ctx.state.stopped_units:
        raise HostError(f"Failed to stop {unit}: Unit {unit} not loaded.")
    for h in procs:
        del ctx.state.holders[str(h.pid)]
    if procs:
        ctx.state.stopped_units[unit] = procs
    ctx.log(f"systemd[1]: Stopped {unit}.")


def start(ctx: Ctx, unit: str) -> None:
    procs = ctx.state.stopped_units.pop(unit, None)
    if procs is None:
        if any(h.unit == unit for h in ctx.state.holders.values()):
            return  # already running
        raise HostError(f"Failed to start {unit}: Unit {unit} not found.")
    for h in procs:
        add_client(ctx, h.comm, h.device, unit)
    ctx.log(f"systemd[1]: Started {unit}.")


def is_active(ctx: Ctx, unit: str) -> bool:
    return any(h.unit == unit for h in ctx.state.holders.values())


def gim_users(ctx: Ctx) -> list[str]:
    """The processes that keep gim from unloading."""
    return [f"pid {h.pid} ({h.comm}) holding {h.device}" for h in ctx.state.holders.values()
            if h.device.startswith(BLOCKS_GIM_UNLOAD)]
