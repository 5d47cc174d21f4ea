"""How ESXi applies and undoes each step it plans (the counterpart of vgpu/host/steps.py).

``prepare`` reads what undo needs before anything changes (the executor journals it first);
``undo`` puts that back and is safe to run twice or after a partial apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vgpu.errors import HostError
from vgpu.esxi.host import EsxiHost, EsxiHypervisor
from vgpu.executor import StepTable
from vgpu.host.files import FileStore
from vgpu.model.plan import AttachPassthrough, DetachPassthrough, RecordProfile, SetPassthrough

RECORD = "state.json"


@dataclass
class EsxiContext:
    host: EsxiHost
    hypervisor: EsxiHypervisor
    state_dir: Path
    baseline: dict | None = None  # the executor's (unused here: ESXi has no config files)

    @property
    def records(self) -> FileStore:
        """The controller-side state directory of this host (the journal lives there too)."""
        return FileStore(self.state_dir)


# set-passthrough -------------------------------------------------------------------------------------------------

def _pt_prepare(step: SetPassthrough, ctx: EsxiContext) -> dict:
    device = ctx.host.read().device(step.address)
    if device is None:
        raise HostError(f"{ctx.host.label} has no PCI device {step.address}")
    return {"enabled": device.enabled}


def _pt_apply(step: SetPassthrough, ctx: EsxiContext, info: dict) -> None:
    ctx.host.set_passthrough(step.address, step.enabled)
    device = ctx.host.read().device(step.address)
    if device is None or device.enabled != step.enabled:
        raise HostError(f"passthrough on {step.address} reads back as "
                        f"{'enabled' if device and device.enabled else 'disabled'} after the change")


def _pt_undo(step: SetPassthrough, ctx: EsxiContext, info: dict) -> None:
    device = ctx.host.read().device(step.address)
    if device is not None and device.enabled != bool(info.get("enabled")):
        ctx.host.set_passthrough(step.address, bool(info.get("enabled")))


# attach-passthrough / detach-passthrough ---------------------------------------------------------------------------

def _vm_prepare(step: AttachPassthrough | DetachPassthrough, ctx: EsxiContext) -> dict:
    vm = ctx.host.read().vm(step.vm)
    # undo puts exactly "saved" back; the change is refused if the VM changed after "version" was read
    return {"saved": ctx.hypervisor.definition(step.vm), "version": vm.change_version if vm else ""}


def _attach_apply(step: AttachPassthrough, ctx: EsxiContext, info: dict) -> None:
    ctx.hypervisor.attach(step.vm, step.functions, numa_node=None, bar64_bytes=0, version=info.get("version"))


def _detach_apply(step: DetachPassthrough, ctx: EsxiContext, info: dict) -> None:
    ctx.hypervisor.detach(step.vm, step.functions, version=info.get("version"))


def _vm_restore(step: AttachPassthrough | DetachPassthrough, ctx: EsxiContext, info: dict) -> None:
    saved = info.get("saved")
    if not saved or ctx.host.read().vm(step.vm) is None:
        return  # nothing saved yet, or the VM is gone: no configuration to put back
    ctx.hypervisor.restore(step.vm, saved)


# record-profile ----------------------------------------------------------------------------------------------------

def _record_prepare(step: RecordProfile, ctx: EsxiContext) -> dict:
    return {"before": ctx.records.read(RECORD)}


def _record_apply(step: RecordProfile, ctx: EsxiContext, info: dict) -> None:
    ctx.records.write(RECORD, step.record)


def _record_undo(step: RecordProfile, ctx: EsxiContext, info: dict) -> None:
    ctx.records.write(RECORD, info.get("before"))


TABLE = StepTable("ESXi", {
    SetPassthrough: (_pt_prepare, _pt_apply, _pt_undo),
    AttachPassthrough: (_vm_prepare, _attach_apply, _vm_restore),
    DetachPassthrough: (_vm_prepare, _detach_apply, _vm_restore),
    RecordProfile: (_record_prepare, _record_apply, _record_undo),
}, plans=(SetPassthrough, AttachPassthrough, DetachPassthrough, RecordProfile))
