"""`vgpu plan`, `provision`, `status`, `release`, `export`."""

from __future__ import annotations

import contextlib
import signal
import sys

import click

from vgpu.cli.common import host_options, open_host
from vgpu.errors import ExitCode, InterruptedRun, NotConfirmed, VgpuError, interrupt_signals


def _profile_option(fn):
    return click.option("--profile", "profile_ref", metavar="NAME|FILE", required=True,
                        help="A shipped profile name (`vgpu profiles list`) or a profile YAML file.")(fn)


def _load(profile_ref: str):
    from vgpu.profiles import load_profile
    return load_profile(profile_ref)


@click.command()
@_profile_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (schema vgpu.plan/v1).")
@host_options
def plan(profile_ref, as_json, host) -> int:
    """Show what provisioning a profile would change and disrupt. Changes nothing.

    Exit 0: in sync; 3: changes pending; 4: refused (each problem on its own line).
    """
    from vgpu.planner import Refusal

    profile = _load(profile_ref)
    with open_host(host) as target:
        try:
            result = target.plan(profile)
        except Refusal as exc:
            return _refused(exc, profile.name, target.label, as_json)
    from vgpu.cli import planview
    if as_json:
        planview.print_plan_json(result.plan, result.warnings)
    else:
        planview.show_plan(result.plan, result.warnings)
    return ExitCode.OK if result.plan.in_sync else ExitCode.CHANGES_PENDING


def _refused(exc, profile: str, host: str, as_json: bool) -> int:
    from vgpu.cli import planview
    planview.show_refusal(exc, profile, host, as_json)
    return ExitCode.REFUSED


@click.command()
@click.option("--profile", "profile_ref", metavar="NAME|FILE", default=None,
              help="A shipped profile name or a profile YAML file.")
@click.option("--recorded", is_flag=True, help="Re-apply the profile recorded on this host (the boot unit uses this).")
@click.option("--dry-run", is_flag=True, help="Show the plan and stop.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before disruptive steps.")
@click.option("--force", is_flag=True, help="Proceed even when VMs or processes hold devices the plan disrupts.")
@click.option("--lock-timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the host lock.")
@click.option("--vf-timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for gim to create VFs after a reload.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON (schema vgpu.provision/v1); never asks: disruptive plans need --yes.")
@host_options
def provision(profile_ref, recorded, dry_run, yes, force, lock_timeout, vf_timeout, as_json, host) -> int:
    """Apply a profile: configure gim, create VFs, set partitions, bind vfio-pci, persist; verify by read-back.

    Exit 0: applied and verified, or nothing to do; 1: not confirmed; 3: --dry-run with changes pending, or applied
    but pending (a running VM to shut down, an ESXi reboot); 4: refused; 5: bad input; 6: a device in use; 7: host
    locked; 8: a step failed and was rolled back; 130/143/129: interrupted (SIGINT/SIGTERM/SIGHUP), rolled back.
    """
    from vgpu.cli import planview
    from vgpu.planner import Refusal

    if bool(profile_ref) == bool(recorded):
        raise click.UsageError("give exactly one of --profile NAME|FILE and --recorded")
    report = planview.ProvisionReport("apply", as_json, profile_ref)
    with report, open_host(host) as target:
        report.host = target.label
        profile = target.recorded_profile() if recorded else _load(profile_ref)
        if profile is None:
            return report.nothing_recorded()
        report.profile = profile.name
        try:
            result = target.provision(profile, dry_run=dry_run, force=force, confirm=_confirm_for(yes, as_json),
                                      hook=target.step_hook, lock_timeout=lock_timeout, vf_timeout=vf_timeout)
        except Refusal as exc:
            return report.refused(exc)
    report.done(result)
    if (dry_run and not result.plan.in_sync) or result.pending:
        return ExitCode.CHANGES_PENDING  # planned only, or applied but waiting for a reboot of the host
    return ExitCode.OK


def _confirm_for(yes: bool, as_json: bool):
    """How a disruptive plan is confirmed: --yes skips it; --json never asks (its stdout is the document)."""
    if yes:
        return None
    return _refuse_unconfirmed if as_json else _confirm


def _refuse_unconfirmed(plan) -> bool:
    if not plan.disruptive:
        return True
    raise NotConfirmed("the plan disrupts devices and --json runs never ask to confirm: nothing was changed",
                       hint=f"review `{_review_command(plan, json=True)}`, then rerun with --yes")


def _review_command(plan, *, json: bool = False) -> str:
    """The command that shows ``plan`` again without changing anything, on the same host."""
    from vgpu.cli.common import next_command
    from vgpu.cli.planview import profile_command

    extra = ("--json",) if json else ()
    if plan.action == "release":
        return next_command("release", "--dry-run", *extra)
    if plan.action == "rollback":  # what an interrupted run left: status names it
        return next_command("status", *extra)
    return profile_command("plan", plan, *extra)


def _confirm(plan) -> bool:
    """Ask before disruptive steps; without a terminal, refuse (scripts must say --yes)."""
    if not plan.disruptive:
        return True
    from vgpu.cli import planview
    planview.show_plan(plan, [])
    if not sys.stdin.isatty():
        raise NotConfirmed("the plan disrupts devices and no terminal is attached to confirm it",
                           hint=f"review `{_review_command(plan)}`, then rerun with --yes")
    try:
        with _signals_raise():
            return click.confirm("Apply these disruptive steps?", default=False)
    except _Signalled as exc:
        click.echo("", err=True)
        raise InterruptedRun("interrupted at the confirmation question: nothing was changed", exc.signum) from None
    except click.exceptions.Abort:  # end of input (Ctrl-D, a closed terminal): click printed nothing after it
        click.echo("", err=True)
        raise NotConfirmed("no answer at the confirmation question (standard input ended): nothing was changed",
                           hint=f"answer y to apply the steps, or review `{_review_command(plan)}` and rerun "
                                "with --yes") from None


class _Signalled(Exception):
    """SIGINT/SIGTERM/SIGHUP at the prompt (click would turn a KeyboardInterrupt into Abort, exit 1)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_raise():
    def handler(signum, _frame):
        raise _Signalled(signum)
    previous = {sig: signal.signal(sig, handler) for sig in interrupt_signals()}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print status as JSON.")
@click.option("--wait", type=click.FloatRange(0, 86400), default=None, metavar="SECONDS",
              help="First wait up to SECONDS for a vgpu run changing the host to finish (exit 7 if it does not).")
@host_options
def status(as_json, wait, host) -> int:
    """Compare the host with its recorded profile, item by item. Exit 0 in sync, 1 drift."""
    from vgpu.cli import planview
    from vgpu.planner import Refusal

    with open_host(host) as target:
        if wait is not None:
            from vgpu.executor import wait_unlocked
            wait_unlocked(getattr(target, "state_dir", None), wait)
        try:
            result = target.status()
        except Refusal as exc:
            planview.show_refusal(exc, exc.profile, target.label, as_json)
            return ExitCode.FAILURE
    from vgpu.cli.render import safe
    for warning in result.warnings:
        click.echo(f"warning: {safe(warning, markup=False)}", err=True)
    if result.profile is None:
        planview.show_unprovisioned(target.label, as_json, result.unfinished)
    else:
        planview.show_status(result.profile, target.label, result.items, as_json, result.unfinished)
    return ExitCode.OK if result.in_sync else ExitCode.FAILURE


@click.command()
@click.option("--dry-run", is_flag=True, help="Show the release plan and stop.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before disruptive steps.")
@click.option("--force", is_flag=True, help="Proceed even when VMs or processes hold the devices.")
@click.option("--lock-timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the host lock.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON (schema vgpu.provision/v1); never asks: disruptive plans need --yes.")
@host_options
def release(dry_run, yes, force, lock_timeout, as_json, host) -> int:
    """Return the host to its default state: VFs off vfio-pci, vgpu's config and boot unit removed.

    Exit 0: released and verified, or nothing to do; 1: not confirmed; 3: --dry-run with changes pending; 5: bad
    input; 6: a device in use; 7: host locked; 8: a step failed and was rolled back; 130/143/129: interrupted
    (SIGINT/SIGTERM/SIGHUP), rolled back.
    """
    from vgpu.cli import planview

    report = planview.ProvisionReport("release", as_json, None)
    with report, open_host(host) as target:
        report.host = target.label
        result = target.release(dry_run=dry_run, force=force, confirm=_confirm_for(yes, as_json),
                                lock_timeout=lock_timeout)
    report.done(result)
    return ExitCode.CHANGES_PENDING if dry_run and not result.plan.in_sync else ExitCode.OK


@click.command()
@click.option("--name", default="exported", show_default=True, help="Name of the exported profile.")
@click.option("--model", default=None, help="Export this model's GPUs (needed on mixed hosts).")
@click.option("-o", "--output", default="-", metavar="FILE|-", show_default=True,
              help="Write the profile here; - for standard output.")
@host_options
def export(name, model, output, host) -> None:
    """Write the host's current GPU setup as a profile (that `plan` reports in sync)."""
    import yaml

    from vgpu.cli.output import write_output
    from vgpu.inputs import output_target
    from vgpu.profiles import load_profile_text

    target = output_target(output, "profile output")  # checked before the host is read
    warnings: list[str] = []
    with open_host(host) as host_target:
        data = host_target.export(name, model, warnings)
    from vgpu.cli.render import safe
    for warning in warnings:  # the VM assignment could not be read: say the export lacks it
        click.echo(f"warning: {safe(warning, markup=False)}; the profile has no vms section", err=True)
    text = yaml.safe_dump(data, sort_keys=False)
    load_profile_text(text, source=f"{name}.yaml")  # what we export must load back
    write_output(target, text.encode(), "profile output", mode=0o644)
    if target is not None:
        click.echo(f"wrote {safe(target, markup=False)}", err=True)
