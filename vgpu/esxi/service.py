"""discover / plan / provision / status / release / export on an ESXi host: the same services, with
the same results and exit codes, as vgpu/provision.py gives a Linux/KVM host.

The lock and the journal live on the machine vgpu runs on (the controller), in a directory per ESXi
host (by its hardware UUID), because vgpu runs nothing on the ESXi host itself. Passthrough settings
and VM configurations persist across reboots on ESXi, so there is no boot unit: the record of the
applied profile is kept beside the journal, and each VM vgpu attached GPUs to carries the mark
``vgpu.assigned`` in its extraConfig.
"""

from __future__ import annotations

import contextlib
import re
import signal
from dataclasses import dataclass, field, replace

from vgpu.errors import ApplyError, InputError, InterruptedRun, RefusedError, VgpuError
from vgpu.esxi import planner, state as esxi_state
from vgpu.esxi.state import state_root
from vgpu.esxi.connect import Session
from vgpu.esxi.host import EsxiHost, EsxiHypervisor
from vgpu.esxi.steps import RECORD, TABLE, EsxiContext
from vgpu.executor import Executor, Journal, Outcome, StepHook, deferred_signals, host_lock
from vgpu.model.inventory import Inventory
from vgpu.model.plan import AttachPassthrough, Plan, Problem, RecordProfile, SetPassthrough
from vgpu.model.pci import PciAddress
from vgpu.planner import Refusal
from vgpu.host.files import FileStore
from vgpu.provision import (Confirm, PlanResult, ProvisionResult, StatusResult, check_holders, desired_state,
                            interrupted_run_warnings)
from vgpu.status import Item
from vgpu.vms import PlannedVms, planned_vms

POWER_OFF = "power them off or migrate them first; --force proceeds anyway"  # the hint when VMs hold devices


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

    def check_state(self, *, create: bool = False) -> None:
        """The state directory and its files are this user's alone (vgpu/esxi/state.py), before any is read."""
        esxi_state.check(self.state_dir, create=create)

    def read_record(self) -> str | None:
        self.check_state()
        text = FileStore(self.state_dir).read(RECORD)
        esxi_state.parse_record(text, self.state_dir / RECORD)  # damaged, or a schema this vgpu does not read
        return text

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
    target.check_state()
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
    if not dry_run:
        target.check_state(create=True)
    with host_lock(None if dry_run else target.state_dir, lock_timeout):
        recovered = [] if dry_run else _recover(target, force, confirm)
        result = plan_profile(target, profile, force=force)
        plan = result.plan
        if not plan.steps or dry_run:
            return ProvisionResult(plan, None, recovered, dry_run, result.warnings, plan.pending)
        check_holders(plan, force, POWER_OFF)
        if confirm is not None and not confirm(plan):
            raise VgpuError("not applied: the plan was not confirmed", hint="rerun with --yes to skip the question")
        outcome, pending = _apply(target, profile, result, hook, force)
        if pending:
            return ProvisionResult(replace(plan, pending=pending), outcome, recovered, False, result.warnings, pending)
        final = plan_profile(target, profile, force=force).plan
    return ProvisionResult(replace(result.plan, pending=final.pending), outcome, recovered, False, result.warnings,
                           final.pending)


def _apply(target: EsxiTarget, profile, result: PlanResult, hook, force: bool) -> tuple[Outcome, tuple]:
    """The host phase (passthrough on, the record), then the VM phase. Whatever stops the VM phase (a
    failed step, a signal, in it or between the phases) also undoes the host phase, so that the message
    "the host is as it was before this run" is true. Returns the outcome and a pending reboot, if any."""
    plan, inv, outcome = result.plan, result.inventory, Outcome()
    enabling = {s.address for s in plan.steps if isinstance(s, SetPassthrough)}
    dependent = [s for s in plan.steps if isinstance(s, AttachPassthrough) and enabling & set(s.functions)]
    first, record_before = None, target.read_record()
    if enabling and dependent:
        # the VMs can be given a GPU only once ESXi has activated its passthrough: switch the host first
        first = replace(plan, steps=tuple(s for s in plan.steps if not isinstance(s, AttachPassthrough)))
        with deferred_signals() as between:  # held until the VM phase starts; then the host phase is undone
            _merge(outcome, _run(target, first, inv, hook, verify=lambda: _verify_enabled(target, first)))
            if not between.received:
                again = plan_profile(target, profile, force=force)
        _stop_if_signalled(target, first, inv, record_before, between)
        if again.plan.pending:
            return outcome, again.plan.pending
        plan = again.plan
    if plan.steps:
        try:
            _merge(outcome, _run(target, plan, inv, hook, verify=lambda: _verify(target, profile, force)))
        except (ApplyError, InterruptedRun) as exc:
            if first is None or Journal(target.state_dir).load() is not None:
                raise  # nothing before it, or its rollback was incomplete: the journal is for the next run
            _undo_first(target, first, inv, exc, record_before)
    return outcome, ()


def _stop_if_signalled(target: EsxiTarget, first: Plan, inv: Inventory, record: str | None, between) -> None:
    if between.received:
        name = signal.Signals(between.received).name
        _undo_first(target, first, inv, InterruptedRun(f"interrupted by {name} between the host and the VM phase: "
                                                       "no VM was changed", between.received), record)


@contextlib.contextmanager
def _shielded():
    """Block SIGINT/SIGTERM/SIGHUP while the host phase is undone: a second signal must not make the
    executor roll the undo back (passthrough on again). Signals that came meanwhile are dropped: the run
    ends with InterruptedRun anyway."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        for sig in signal.sigpending() & sigs:
            signal.sigtimedwait([sig], 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _run(target: EsxiTarget, plan: Plan, inv: Inventory, hook, verify) -> Outcome:
    executor = Executor(target.context(inv), target.state_dir, hook, TABLE)
    return executor.run(plan, {}, verify=verify)


def _undo_first(target: EsxiTarget, first: Plan, inv: Inventory, exc: VgpuError, record: str | None) -> None:
    """The VM part failed or was interrupted and was rolled back: take back the first part too
    (passthrough on, the record), so that the host is as vgpu found it, as the message then says."""
    undo = [SetPassthrough(s.address, not s.enabled) for s in first.steps if isinstance(s, SetPassthrough)]
    undo += [RecordProfile(s.profile, record, s.where)
             for s in first.steps if isinstance(s, RecordProfile)]
    try:
        with _shielded():
            _run(target, replace(first, steps=tuple(undo), action="rollback"), inv, None, verify=None)
    except VgpuError as second:
        raise ApplyError(f"{exc.message}; undoing the passthrough changes failed too: {second.message}",
                         hint="run `vgpu status --esxi ...` and `vgpu release` to clean up") from exc
    if isinstance(exc, InterruptedRun):
        said = exc.message.removesuffix("; the host is as it was before this run")
        raise InterruptedRun(f"{said}; the {len(undo)} host step(s) before them were undone too: the host is as it "
                             "was before this run", exc.signum) from exc
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
    target.check_state()
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
    if not dry_run:
        target.check_state(create=True)
    with host_lock(None if dry_run else target.state_dir, lock_timeout):
        recovered = [] if dry_run else _recover(target, force, confirm)
        plan, warnings = release_plan(target)
        if not plan.steps or dry_run:
            return ProvisionResult(plan, None, recovered, dry_run, warnings)
        check_holders(plan, force, POWER_OFF)
        if confirm is not None and not confirm(plan):
            raise VgpuError("not released: the plan was not confirmed", hint="rerun with --yes")
        inv = discover(target)
        outcome = _run(target, plan, inv, None, verify=lambda: _verify_released(target))
    return ProvisionResult(plan, outcome, recovered, False, warnings)


def _enabled_by_vgpu(record: dict | None, warnings: list[str]) -> tuple[PciAddress, ...]:
    """The recorded GPUs whose passthrough was off before vgpu (the record keeps each one's state):
    only those does release turn off again. A record from before vgpu kept that state says nothing, so
    passthrough stays as it is, with a warning."""
    if record is None:
        return ()
    before = record.get(planner.BEFORE_KEY)
    out = []
    for text in record.get("gpus") or ():
        try:
            address = PciAddress.parse(str(text))
        except InputError:
            continue
        was = before.get(str(address)) if isinstance(before, dict) else None
        if was is False:
            out.append(address)
        elif was is None:
            warnings.append(f"{address}: the record does not say whether its passthrough was on before vgpu; it stays "
                            "enabled (turn it off in the vSphere client if no VM needs it)")
    return tuple(out)


def release_plan(target: EsxiTarget) -> tuple[Plan, list[str]]:
    state = target.host.read()
    text, warnings = target.read_record(), []
    record = esxi_state.parse_record(text, target.state_dir / RECORD)
    steps = planner.release_steps(state, _enabled_by_vgpu(record, warnings))
    if text is not None:
        steps.append(RecordProfile("", None, target.record_where()))
    return Plan(profile="(release)", host=target.label, steps=tuple(steps), action="release"), warnings


def _verify_released(target: EsxiTarget) -> None:
    again, _ = release_plan(target)
    if again.steps:
        raise VgpuError("verification failed: after release the host still has "
                        + "; ".join(s.describe() for s in again.steps))


def export(target: EsxiTarget, name: str, model: str | None) -> dict:
    from vgpu.export import export_profile
    return export_profile(discover(target), name, model)
