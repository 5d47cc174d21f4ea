"""discover / plan / provision / status / release / export on an ESXi host: the same services, with
the same results and exit codes, as vgpu/provision.py gives a Linux/KVM host.

The lock and the journal live on the machine vgpu runs on (the controller), in a directory per ESXi
host (by its hardware UUID), because vgpu runs nothing on the ESXi host itself. Passthrough settings
and VM configurations persist across reboots on ESXi, so there is no boot unit: the record of the
applied profile is kept beside the journal, and each VM vgpu attached GPUs to carries the mark
``vgpu.assigned`` in its extraConfig.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from vgpu.errors import ApplyError, InputError, RefusedError, VgpuError
from vgpu.esxi import planner
from vgpu.esxi.connect import Session
from vgpu.esxi.host import EsxiHost, EsxiHypervisor
from vgpu.esxi.steps import RECORD, TABLE, EsxiContext
from vgpu.executor import Executor, Journal, Outcome, StepHook, host_lock
from vgpu.model.inventory import Inventory
from vgpu.model.plan import AttachPassthrough, Plan, Problem, RecordProfile, SetPassthrough
from vgpu.model.pci import PciAddress
from vgpu.planner import Refusal
from vgpu.host.files import FileStore
from vgpu.provision import (Confirm, PlanResult, ProvisionResult, StatusResult, check_holders, desired_state,
                            interrupted_run_warnings)
from vgpu.status import Item
from vgpu.vms import PlannedVms, planned_vms

STATE_ENV = "VGPU_STATE_DIR"
POWER_OFF = "power them off or migrate them first; --force proceeds anyway"  # the hint when VMs hold devices


def state_root() -> Path:
    """Where vgpu keeps per-host state for hosts it reaches remotely: $VGPU_STATE_DIR, else
    /var/lib/vgpu for root, else $XDG_STATE_HOME/vgpu (~/.local/state/vgpu)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    if os.geteuid() == 0:
        return Path("/var/lib/vgpu")
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "vgpu"


@dataclass
class EsxiTarget:
    """One ESXi host, logged in. Commands get it from ``open_host(esxi=...)``."""

    session: Session
    read_only: bool = False
    platform: str = "esxi"
    step_hook: object = None  # called around each applied step (tests pass one to provision directly)
    host: EsxiHost = field(init=False)

    def __post_init__(self):
        self.host = EsxiHost(self.session)
        uuid = re.sub(r"[^A-Za-z0-9-]", "_", self.host.uuid)[:64] or "unknown"
        self.state_dir = state_root() / "esxi" / uuid

    @property
    def label(self) -> str:
        return self.host.label

    def hypervisor(self, inv: Inventory) -> EsxiHypervisor:
        return EsxiHypervisor(self.host, planner.gpu_bars(inv))

    def context(self, inv: Inventory) -> EsxiContext:
        return EsxiContext(self.host, self.hypervisor(inv), self.state_dir)

    def read_record(self) -> str | None:
        return FileStore(self.state_dir).read(RECORD)

    def record_where(self) -> str:
        return f"kept on this controller in {self.state_dir}"

    def close(self) -> None:
        self.session.close()

    # -- the platform interface (vgpu/platform.py) ---------------------------------------------------------------

    def discover(self, source: str = "auto") -> Inventory:
        return discover(self)

    def plan(self, profile) -> PlanResult:
        return plan_profile(self, profile)

    def provision(self, profile, **options) -> ProvisionResult:
        return provision(self, profile, **options)

    def recorded_profile(self):
        return recorded_profile(self)

    def status(self, inv: Inventory | None = None) -> StatusResult:  # noqa: ARG002 - status reads the host once
        return host_status(self)

    def release(self, **options) -> ProvisionResult:
        return release(self, **options)

    def export(self, name: str, model: str | None, warnings: list[str] | None = None) -> dict:  # noqa: ARG002
        return export(self, name, model)

    def domains(self, warnings: list[str], inv: Inventory | None = None):  # noqa: ARG002
        return [v.domain() for v in self.host.read().vms]


def discover(target: EsxiTarget) -> Inventory:
    return planner.inventory(target.host.read())


def plan_profile(target: EsxiTarget, profile, *, force: bool = False) -> PlanResult:
    """Read the host, resolve the profile, plan. Raises Refusal with every problem."""
    state = target.host.read()
    inv = planner.inventory(state)
    desired = desired_state(profile, inv)
    warnings: list[str] = list(interrupted_run_warnings(target))
    problems: list[Problem] = []
    try:
        planned = planned_vms(profile, desired, inv)
    except (RefusedError, InputError) as exc:
        planned, problems = PlannedVms(None), [Problem("vms", exc.message, exc.hint)]
    p = planner.PlanInput(desired, state, inv, planned.vms, target.read_record(), target.record_where(), force)
    problems = planner.check(p) + problems
    if problems:
        raise Refusal(profile.name, problems)
    plan, vm_problems = planner.make_plan(p, warnings)
    if vm_problems:
        raise Refusal(profile.name, vm_problems)
    return PlanResult(plan, inv, desired, {}, warnings)


def provision(target: EsxiTarget, profile, *, dry_run: bool = False, force: bool = False,
              confirm: Confirm | None = None, hook: StepHook | None = None, lock_timeout: float = 30.0,
              vf_timeout: float = 60.0) -> ProvisionResult:
    """Apply ``profile``: passthrough on the GPUs, then the VMs, then the record; verify by read-back.

    When enabling passthrough needs a reboot of the host to take effect, the run stops after the host
    steps with ``pending`` saying so (nothing is rolled back: that is what the profile asks for)."""
    with host_lock(None if dry_run else target.state_dir, lock_timeout):
        recovered = [] if dry_run else _recover(target, force, confirm)
        result = plan_profile(target, profile, force=force)
        plan = result.plan
        if not plan.steps or dry_run:
            return ProvisionResult(plan, None, recovered, dry_run, result.warnings, plan.pending)
        check_holders(plan, force, POWER_OFF)
        if confirm is not None and not confirm(plan):
            raise VgpuError("not applied: the plan was not confirmed", hint="rerun with --yes to skip the question")
        outcome = Outcome()
        enabling = [s for s in plan.steps if isinstance(s, SetPassthrough)]
        waiting = {s.address for s in enabling}
        dependent = [s for s in plan.steps if isinstance(s, AttachPassthrough) and waiting & set(s.functions)]
        first, record_before = None, target.read_record()
        if enabling and dependent:
            # the VMs can be given a GPU only once ESXi has activated its passthrough: switch the host first
            first = replace(plan, steps=tuple(s for s in plan.steps if not isinstance(s, AttachPassthrough)))
            _merge(outcome, _run(target, first, result.inventory, hook, verify=lambda: _verify_enabled(target, first)))
            again = plan_profile(target, profile, force=force)
            if again.plan.pending:
                return ProvisionResult(replace(plan, pending=again.plan.pending), outcome, recovered, False,
                                       result.warnings, again.plan.pending)
            plan = again.plan
        if plan.steps:
            try:
                _merge(outcome, _run(target, plan, result.inventory, hook,
                                     verify=lambda: _verify(target, profile, force)))
            except ApplyError as exc:
                if first is None or Journal(target.state_dir).load() is not None:
                    raise  # nothing before it, or its rollback was incomplete: the journal is for the next run
                _undo_first(target, first, result.inventory, exc, record_before)
        final = plan_profile(target, profile, force=force).plan
    return ProvisionResult(replace(result.plan, pending=final.pending), outcome, recovered, False, result.warnings,
                           final.pending)


def _run(target: EsxiTarget, plan: Plan, inv: Inventory, hook, verify) -> Outcome:
    executor = Executor(target.context(inv), target.state_dir, hook, TABLE)
    return executor.run(plan, {}, verify=verify)


def _undo_first(target: EsxiTarget, first: Plan, inv: Inventory, exc: ApplyError, record: str | None) -> None:
    """The VM part failed and was rolled back: take back the first part too (passthrough on, the record),
    so that a failed provision leaves the host as it found it."""
    undo = [SetPassthrough(s.address, not s.enabled) for s in first.steps if isinstance(s, SetPassthrough)]
    undo += [RecordProfile(s.profile, record, s.where)
             for s in first.steps if isinstance(s, RecordProfile)]
    try:
        _run(target, replace(first, steps=tuple(undo), action="rollback"), inv, None, verify=None)
    except VgpuError as second:
        raise ApplyError(f"{exc.message}; undoing the passthrough changes failed too: {second.message}",
                         hint="run `vgpu status --esxi ...` and `vgpu release` to clean up") from exc
    raise ApplyError(f"{exc.message}; the {len(undo)} host step(s) before it were undone too", hint=exc.hint) from exc


def _merge(into: Outcome, more: Outcome) -> None:
    into.applied += more.applied
    into.rolled_back += more.rolled_back


def _verify_enabled(target: EsxiTarget, plan: Plan) -> None:
    state = target.host.read()
    for step in plan.steps:
        if isinstance(step, SetPassthrough):
            d = state.device(step.address)
            if d is None or d.enabled != step.enabled:
                raise VgpuError(f"verification failed: passthrough on {step.address} did not stay "
                                f"{'enabled' if step.enabled else 'disabled'}")


def _verify(target: EsxiTarget, profile, force: bool) -> None:
    """Read the host back: success means planning again yields no steps (a pending reboot aside)."""
    again = plan_profile(target, profile, force=force).plan
    if again.steps:
        raise VgpuError("verification failed: after applying, the host still differs ("
                        + "; ".join(s.describe() for s in again.steps) + ")")


def _recover(target: EsxiTarget, force: bool, confirm: Confirm | None) -> list[str]:
    """Deal with a run a crash interrupted (its journal is on this controller) before planning."""
    from vgpu.executor import pending_run

    pending = pending_run(Journal(target.state_dir))
    if pending is None:
        return []
    executor = Executor(target.context(discover(target)), target.state_dir, None, TABLE)
    if pending.complete:
        executor.forget()
        return [f"all {len(pending.steps)} step(s) of the {pending.profile} run had been applied; kept them "
                "(verified below)"]
    if not pending.steps:
        executor.forget()
        return []
    rollback = Plan(profile=pending.profile, host=target.label, action="rollback", steps=tuple(reversed(pending.steps)))
    if confirm is not None and not confirm(rollback):
        raise VgpuError(f"not applied: the rollback of the interrupted {pending.profile} run was not confirmed",
                        hint="rerun with --yes to skip the question")
    return [f"undid '{line}'" for line in executor.recover()]


def recorded_profile(target: EsxiTarget):
    from vgpu.provision import parse_record
    return parse_record(target.read_record(), str(target.state_dir / RECORD))


def host_status(target: EsxiTarget) -> StatusResult:
    """The host now against the profile recorded for it: per GPU passthrough, per VM its GPUs and the
    settings starting it needs."""
    warnings = interrupted_run_warnings(target)
    unfinished = warnings[0] if warnings else None
    profile = recorded_profile(target)
    if profile is None:
        return StatusResult(None, [], warnings, unfinished)
    state = target.host.read()
    inv = planner.inventory(state)
    desired = desired_state(profile, inv)
    items = []
    for t in desired.targets:
        d = state.device(t.address)
        actual = ("absent" if d is None else "active" if d.active else
                  "enabled, active after a reboot" if d.enabled else "disabled")
        items.append(Item(str(t.address), "passthrough", "active", actual))
    try:
        planned = planned_vms(profile, desired, inv)
    except (RefusedError, InputError):
        planned = PlannedVms(None)
    bars = planner.gpu_bars(inv)
    for name, functions in planned.vms or ():
        vm = state.vm(name)
        if vm is None:
            continue
        have = [a for a in functions if a in vm.passthrough]
        items.append(Item(f"VM {name}", "GPUs", ", ".join(map(str, functions)), ", ".join(map(str, have)) or "none"))
        if have:
            ok = planner.settings_ok(vm, bars)
            items.append(Item(f"VM {name}", "EFI, memory reserved, 64-bit MMIO", "set", "set" if ok else "missing"))
    return StatusResult(profile.name, items, warnings, unfinished)


def release(target: EsxiTarget, *, dry_run: bool = False, force: bool = False, confirm: Confirm | None = None,
            lock_timeout: float = 30.0, vf_timeout: float = 60.0) -> ProvisionResult:
    """Detach what vgpu attached (from powered-off VMs), turn passthrough off where vgpu turned it on,
    forget the record."""
    with host_lock(None if dry_run else target.state_dir, lock_timeout):
        recovered = [] if dry_run else _recover(target, force, confirm)
        plan = release_plan(target)
        if not plan.steps or dry_run:
            return ProvisionResult(plan, None, recovered, dry_run, [])
        check_holders(plan, force, POWER_OFF)
        if confirm is not None and not confirm(plan):
            raise VgpuError("not released: the plan was not confirmed", hint="rerun with --yes")
        inv = discover(target)
        outcome = _run(target, plan, inv, None, verify=lambda: _verify_released(target))
    return ProvisionResult(plan, outcome, recovered, False, [])


def _recorded_gpus(target: EsxiTarget) -> tuple[PciAddress, ...]:
    import json
    text = target.read_record()
    if text is None:
        return ()
    try:
        return tuple(PciAddress.parse(a) for a in json.loads(text).get("gpus", []))
    except (ValueError, AttributeError, TypeError, InputError):
        return ()


def release_plan(target: EsxiTarget) -> Plan:
    state = target.host.read()
    steps = planner.release_steps(state, _recorded_gpus(target))
    if target.read_record() is not None:
        steps.append(RecordProfile("", None, target.record_where()))
    return Plan(profile="(release)", host=target.label, steps=tuple(steps), action="release")


def _verify_released(target: EsxiTarget) -> None:
    again = release_plan(target)
    if again.steps:
        raise VgpuError("verification failed: after release the host still has "
                        + "; ".join(s.describe() for s in again.steps))


def export(target: EsxiTarget, name: str, model: str | None) -> dict:
    from vgpu.export import export_profile
    return export_profile(discover(target), name, model)
