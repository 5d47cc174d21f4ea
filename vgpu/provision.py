"""Services behind plan / provision / status / release: discover, plan, apply, verify.

The CLI calls these; they call the host boundary (vgpu/host), the hypervisor boundary
(vgpu/hypervisor) and the pure planner. A provision reports success only after reading the host
back and planning zero steps against the same profile.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from vgpu.catalog import Mode
from vgpu.errors import InUseError, InputError, NotConfirmed, RefusedError, VgpuError
from vgpu.host.discovery import discover
from vgpu.executor import Executor, Journal, Outcome, StepHook, host_lock, lock_holder, pending_run
from vgpu.host.holders import function_holders
from vgpu.host.steps import Context, verify_with_gim_log
from vgpu.host.target import HostTarget
from vgpu.inputs import InputFileError, parse_json
from vgpu.model.inventory import Inventory
from vgpu.model.plan import Plan, Problem
from vgpu.persist import STATE_RECORD, UNIT_LINK, UNIT_PATH, state_record, unit_text
from vgpu.planner import GIM_CONFIG, MODPROBE_CONF, MODULES_LOAD, Desired, Refusal, Target, make_plan
from vgpu.vms import PlannedVms, attach_steps, detach_steps, planned_vms, vm_view

TRACKED_FILES = (GIM_CONFIG, MODPROBE_CONF, MODULES_LOAD, STATE_RECORD, UNIT_PATH, UNIT_LINK)


def exec_start() -> str:
    """How the boot unit calls vgpu: this interpreter, so a venv or pipx install keeps working."""
    return f"{sys.executable} -m vgpu"


def desired_state(profile, inv: Inventory) -> Desired:
    """The profile resolved against this host's GPUs; a selection the host cannot meet is a Refusal
    like any other problem (one sentence, and JSON with `plan --json`)."""
    try:
        gpus = profile.select_gpus(inv.gpus)
    except RefusedError as exc:
        raise Refusal(profile.name, [Problem("profile", exc.message, exc.hint)]) from None
    spec = profile.gpu
    targets = tuple(Target(g.address, vf_num=spec.vfs_per_gpu or 0,
                           compute=spec.compute_partition.value if spec.compute_partition else None,
                           memory=spec.memory_partition.value if spec.memory_partition else None) for g in gpus)
    return Desired(profile=profile.name, model=spec.model, mode=spec.mode, targets=targets,
                   record=state_record(profile.name, profile.to_dict(), [str(t.address) for t in targets]),
                   unit=unit_text(exec_start()),
                   warnings=tuple(profile.warnings()), hypervisor=profile.hypervisor)


def current_files(target: HostTarget) -> dict[str, str | None]:
    return {p: target.files.read(p) for p in TRACKED_FILES}


@dataclass
class PlanResult:
    plan: Plan
    inventory: Inventory
    desired: Desired
    holders: dict
    warnings: list[str] = field(default_factory=list)


def plan_profile(target: HostTarget, profile) -> PlanResult:
    """Discover, resolve the profile, and plan. Raises Refusal (RefusedError) with every problem."""
    inv = discover(target.paths)
    warnings: list[str] = []
    view = vm_view(target, inv, warnings)
    holders = function_holders(target.paths, inv, view.holders)
    if target.local_processes and not target.read_only and os.geteuid() != 0:
        warnings.append("not running as root: other users' processes holding VFIO devices could not be checked")
    desired = desired_state(profile, inv)
    if desired.mode is Mode.SRIOV:
        desired = replace(desired, firmware=_amdsmi_firmware(target, inv, desired, warnings))
    vm_problems: list[Problem] = []
    try:
        planned = planned_vms(profile, desired, inv)
    except (RefusedError, InputError) as exc:
        planned, vm_problems = PlannedVms(None), [Problem("vms", exc.message, exc.hint)]
    steps, taken, waiting = attach_steps(planned, view.domains, profile.vms.numa_policy.value, warnings)
    settled = planned.vms is not None and view.domains is not None and not (steps or waiting)
    plan = make_plan(desired, inv, current_files(target), holders, vm_steps=steps, vm_problems=vm_problems + taken,
                     vms=planned.vms, vms_settled=settled)
    plan = replace(plan, pending=waiting)  # running VMs that lack their functions: not in sync until shut down
    plan = add_gpu_clients(target, plan)
    if planned.vms is None and not vm_problems:
        warnings.append("which VM gets which VF is known only once gim has created the VFs (the PFs do not "
                        "report their SR-IOV offset and stride)")
    warnings += interrupted_run_warnings(target)
    if target.paths.etc is None:
        warnings.append(f"{target.paths.label} has no etc/ beside it: its config files read as absent")
    return PlanResult(plan, inv, desired, holders, warnings)


def _amdsmi_firmware(target: HostTarget, inv: Inventory, desired: Desired, warnings: list[str]) -> dict:
    """Each gim PF's firmware name from the host amd-smi, a second source of truth beside sysfs: a PF one of
    them sees and the other does not is a warning; where amd-smi cannot be asked, a multi-VF plan says that
    the firmware (1-VF or multi-VF build) was not checked."""
    smi = target.amdsmi()
    multi = any(t.vf_num > 1 for t in desired.targets)
    if smi.unavailable is not None:
        if multi:
            warnings.append(f"{smi.unavailable}: the GPUs' firmware (a 1-VF or a multi-VF build) was not checked, "
                            "only their TotalVFs")
        return {}
    listed = {g.bdf for g in smi.gpus}
    gim_pfs = {g.address for g in inv.gpus if g.driver == "gim"}
    if listed != gim_pfs:
        only_smi = ", ".join(str(a) for a in sorted(listed - gim_pfs)) or "none"
        only_sysfs = ", ".join(str(a) for a in sorted(gim_pfs - listed)) or "none"
        warnings.append(f"amd-smi and sysfs disagree on the GPUs gim drives (only amd-smi: {only_smi}; only "
                        f"sysfs: {only_sysfs}): check `amd-smi list` and `dmesg | grep gim`")
    return {address: fw.name for address, fw in smi.firmware.items()}


@dataclass
class StatusResult:
    profile: str | None  # None: nothing recorded (never provisioned, or released)
    items: list = field(default_factory=list)  # vgpu.status.Item
    warnings: list[str] = field(default_factory=list)
    # why the host cannot be called in sync whatever the items say: a run left its journal (it was
    # interrupted, or is running now), so the host may be half-applied. None when no run is pending.
    unfinished: str | None = None

    @property
    def in_sync(self) -> bool:
        return self.unfinished is None and all(i.ok for i in self.items)


def host_status(target: HostTarget, inv: Inventory | None = None) -> StatusResult:
    """The host now against the profile it recorded, item by item: devices, partitions, config files,
    persistence, and each assigned VM that exists. Raises Refusal when the recorded profile no longer
    fits the host (a GPU gone, say). ``inv``: the host's inventory when the caller has just read it."""
    from vgpu.status import status_items, vm_items

    warnings = interrupted_run_warnings(target)
    unfinished = warnings[0] if warnings else None
    profile = recorded_profile(target)
    if profile is None:
        return StatusResult(None, [], warnings, unfinished)
    inv = discover(target.paths) if inv is None else inv
    desired = desired_state(profile, inv)
    items = status_items(desired, inv, current_files(target))
    try:
        planned = planned_vms(profile, desired, inv)
    except (RefusedError, InputError):
        planned = PlannedVms(None)  # the capability items already say why
    if planned.vms:  # the hypervisor is asked only about VMs the profile assigns functions to
        items += vm_items(planned.vms, vm_view(target, inv, warnings).domains)
    return StatusResult(profile.name, items, warnings, unfinished)


def interrupted_run_warnings(target: HostTarget) -> list[str]:
    """A sentence when a crashed run left its journal: the next provision or release deals with it first."""
    if target.state_dir is None:
        return []
    holder = lock_holder(target.state_dir)
    if holder is not None:
        return [f"a vgpu run is changing this host now ({holder}): what is shown may change under it"]
    try:
        pending = pending_run(Journal(target.state_dir))
    except VgpuError as exc:
        return [exc.message]
    if pending is None:
        return []
    what = ("had applied all its steps; the next provision keeps and verifies them" if pending.complete else
            f"stopped after starting {len(pending.steps)} step(s); the next provision or release rolls them back "
            "first")
    return [f"an interrupted {pending.profile} run {what}"]


@dataclass
class ProvisionResult:
    plan: Plan
    outcome: Outcome | None
    recovered: list[str]
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    # applied and verified, but the host matches only after these (an ESXi reboot, a running VM to shut down)
    pending: tuple[str, ...] = ()


Confirm = Callable[[Plan], bool]


def provision(target: HostTarget, profile, *, dry_run: bool = False, force: bool = False,
              confirm: Confirm | None = None, hook: StepHook | None = None, lock_timeout: float = 30.0,
              vf_timeout: float = 60.0) -> ProvisionResult:
    """Apply ``profile``: lock, recover a crashed run, plan, check holders, apply, verify, or roll back."""
    kernel = None if dry_run else target.kernel
    with host_lock(target.state_dir, lock_timeout):
        executor = Executor(_context(target, kernel, vf_timeout), target.state_dir, hook) if not dry_run else None
        early: list[str] = []
        recovered = _recover(target, executor, force, confirm, early) if executor else []
        result = plan_profile(target, profile)
        result.warnings[:0] = early
        plan = result.plan
        if not plan.steps or dry_run:
            return ProvisionResult(plan, None, recovered, dry_run, result.warnings, plan.pending)
        check_holders(plan, force)
        if confirm is not None and not confirm(plan):
            raise NotConfirmed("not applied: the plan was not confirmed", hint="rerun with --yes to skip the question")
        baseline = current_files(target)
        outcome = executor.run(plan, baseline, verify=lambda: verify_with_gim_log(executor.ctx,
                                                                                  lambda: _verify(target, profile)))
    return ProvisionResult(plan, outcome, recovered, False, result.warnings, plan.pending)


def _recover(target: HostTarget, executor: Executor, force: bool, confirm: Confirm | None,
             warnings: list[str]) -> list[str]:
    """Deal with a run a crash interrupted, before planning anything new.

    All its steps applied (only verification was cut short): keep them; the plan that follows
    verifies them. Otherwise roll them back, which reloads gim or rebinds devices like any plan does,
    so it gets the same holder check (--force) and confirmation (--yes) first.
    """
    pending = executor.pending()
    if pending is None:
        return []
    if pending.complete:
        executor.forget()
        return [f"all {len(pending.steps)} step(s) of the {pending.profile} run had been applied; "
                "kept them (verified below)"]
    if not pending.steps:  # killed before its first step: nothing to undo
        executor.forget()
        return []
    inv = discover(target.paths)
    view = vm_view(target, inv, warnings)
    holders = function_holders(target.paths, inv, view.holders)
    rollback = Plan(profile=pending.profile, host=target.paths.label, action="rollback",
                    steps=tuple(_with_current_holders(step, inv, holders) for step in reversed(pending.steps)))
    held = sorted({h for step in pending.steps for a in undo_touches(step, inv) for h in holders.get(a, ())})
    if held and not force:
        raise InUseError(f"an interrupted {pending.profile} run must be rolled back first, and that would take "
                         f"devices from {', '.join(held)}",
                         hint="stop or migrate them first; --force proceeds anyway and breaks them")
    if view.domains is None and any(s.kind in ("attach-functions", "detach-functions") for s in pending.steps) \
            and not force:
        raise InUseError(f"an interrupted {pending.profile} run changed VM configurations, and libvirt cannot be "
                         "asked now to put them back or to say which VMs run",
                         hint="start libvirtd and rerun; --force rolls back the host side anyway")
    if confirm is not None and not confirm(rollback):
        raise NotConfirmed(f"not applied: the rollback of the interrupted {pending.profile} run was not confirmed",
                        hint="rerun with --yes to skip the question")
    return [f"undid '{line}'" for line in executor.recover()]


def undo_touches(step, inv: Inventory) -> tuple:
    """The functions undoing ``step`` takes from whoever uses them now (recovery checks their holders)."""
    kind = step.kind
    if kind == "reload-gim":
        return tuple(vf.address for g in inv.gpus for vf in g.vfs)
    if kind in ("bind-vfs", "set-memory-partition"):
        gpu = inv.gpu(step.pf)
        return tuple(vf.address for vf in gpu.vfs) if gpu else ()
    if kind in ("bind-device", "unbind-device"):
        return (step.address,)
    if kind in ("attach-functions", "detach-functions"):
        return tuple(step.functions)
    return ()


def _with_current_holders(step, inv: Inventory, holders) -> object:
    """``step`` with its disruption recomputed against who holds the functions now (the journal's
    copy names the holders of when it was planned)."""
    from vgpu.planner import disruption_for

    d = getattr(step, "disruption", None)
    if d is None:
        return step
    functions = undo_touches(step, inv)
    if not functions:
        return step
    # the GPU-client services stay as journaled: the undo stops and restarts the same ones
    return replace(step, disruption=replace(disruption_for(functions, holders, host_wide=d.host_wide),
                                            units=d.units, clients=d.clients))


def check_holders(plan: Plan, force: bool,
                  hint: str = "stop or migrate them first; --force proceeds anyway and breaks them") -> None:
    """Refuse (InUseError) a plan that takes devices from VMs or processes, unless --force."""
    holders = plan.holders()
    if holders and not force:
        raise InUseError(f"the plan would take devices from {', '.join(holders)}", hint=hint)


def _verify(target: HostTarget, profile) -> None:
    """Read the host back: success means planning again yields zero steps (what is pending outside vgpu, a
    running VM to shut down, is reported as pending, not as a failed verification)."""
    again = plan_profile(target, profile).plan
    if again.steps:
        pending = "; ".join(s.describe() for s in again.steps)
        raise VgpuError(f"verification failed: after applying, the host still differs ({pending})")


def recorded_profile(target: HostTarget):
    """The profile `provision` recorded on this host, or None when nothing was provisioned."""
    return parse_record(target.files.read(STATE_RECORD), f"/etc/{STATE_RECORD}")


def parse_record(text: str | None, where: str):
    """The profile in a state record (vgpu/persist.py), or None when there is none."""
    from vgpu.profiles import load_profile_data

    if text is None:
        return None
    try:
        spec = parse_json(text, "config file", where)["spec"]
    except InputFileError as exc:
        raise InputError(f"{where} is corrupt: {exc.problem}",
                         hint="run `vgpu provision --profile NAME` again to rewrite it") from None
    except (KeyError, TypeError) as exc:
        raise InputError(f"{where} is corrupt: {exc}",
                         hint="run `vgpu provision --profile NAME` again to rewrite it") from exc
    return load_profile_data(spec, source=where)


def is_sriov(profile) -> bool:
    return profile.gpu.mode is Mode.SRIOV


def release(target: HostTarget, *, dry_run: bool = False, force: bool = False, confirm: Confirm | None = None,
            lock_timeout: float = 30.0, vf_timeout: float = 60.0) -> ProvisionResult:
    """Take the host back to its default state, with the same safety as provision."""
    kernel = None if dry_run else target.kernel
    with host_lock(target.state_dir, lock_timeout):
        executor = None if dry_run else Executor(_context(target, kernel, vf_timeout), target.state_dir)
        warnings: list[str] = []
        recovered = _recover(target, executor, force, confirm, warnings) if executor else []
        plan = release_plan(target, warnings)
        if plan.in_sync or dry_run:
            return ProvisionResult(plan, None, recovered, dry_run, warnings)
        check_holders(plan, force)
        if confirm is not None and not confirm(plan):
            raise NotConfirmed("not released: the plan was not confirmed", hint="rerun with --yes")
        outcome = executor.run(plan, current_files(target), verify=lambda: _verify_released(target))
    return ProvisionResult(plan, outcome, recovered, False, warnings)


def release_plan(target: HostTarget, warnings: list[str]) -> Plan:
    """What release would do now: detach what vgpu attached to shut-off VMs, unbind, reload, clean up."""
    from vgpu.release import make_release_plan

    inv = discover(target.paths)
    view = vm_view(target, inv, warnings)
    holders = function_holders(target.paths, inv, view.holders)
    gpu_functions = [fn.address for g in inv.gpus for fn in (g, *g.vfs)]
    return add_gpu_clients(target, make_release_plan(inv, current_files(target), holders,
                                                     vm_steps=detach_steps(view.domains, gpu_functions)))


def add_gpu_clients(target: HostTarget, plan: Plan) -> Plan:
    """``plan`` with the GPU clients (exporters, agents, monitors) each of its steps disrupts (vgpu/gpu_clients.py)."""
    from vgpu.gpu_clients import with_gpu_clients
    from vgpu.host.holders import clients_for, gpu_clients

    return with_gpu_clients(plan, gpu_clients(target.paths),
                            lambda clients, functions, wide: clients_for(clients, target.paths, functions, wide))


def _context(target: HostTarget, kernel, vf_timeout: float) -> Context:
    """The executor's view of the host; the hypervisor is opened on first use, once per run."""
    opened: list = []

    def hypervisor():
        if not opened:
            opened.append(target.open_hypervisor())
        return opened[0]
    return Context(target.paths, kernel, target.files, vf_timeout=vf_timeout, hypervisor=hypervisor)


def _verify_released(target: HostTarget) -> None:
    again = release_plan(target, [])
    if not again.in_sync:
        raise VgpuError("verification failed: after release the host still has "
                        + "; ".join(s.describe() for s in again.steps))
