"""Rendering plans, refusals, provision results and status for people (vgpu.cli.term) and scripts (JSON)."""

from __future__ import annotations

from vgpu.cli.common import next_command
from vgpu.cli.render import add_row, cell, console, print_json, safe, table
from vgpu.model.plan import Plan


def show_plan(plan: Plan, warnings: list[str]) -> None:
    out = console()
    for w in (*plan.warnings, *warnings):
        out.print(f"[yellow]warning:[/] {safe(w)}")
    line = matrix_line(plan.matrix)
    if line:
        out.print(f"[bold]capability matrix[/]: {safe(line)}")
    if plan.in_sync:
        out.print(f"[green]in sync[/]: {safe(plan.host)} already matches profile {safe(plan.profile)};"
                  " nothing to do")
        return
    _show_pending(out, plan.pending)
    if not plan.steps:
        out.print(f"[bold yellow]not in sync[/]: {safe(plan.host)} matches {safe(plan.profile)} once the pending "
                  f"action above is done and `{safe(profile_command('provision', plan))}` runs again")
        return
    undo = plan.action == "rollback"
    title = (f"Rollback of the interrupted {plan.profile} run on {plan.host} (each step undone, in this order)"
             if undo else f"Plan: {plan.profile} on {plan.host}")
    steps = table(title, ("#", "undo" if undo else "step", "disrupts"))
    for i, step in enumerate(plan.steps, 1):
        add_row(steps, i, step.describe(), _disrupts(step))
    out.print(steps)
    _show_disruptions(out, plan)
    _show_vms(out, plan)
    holders = plan.holders()
    if holders:
        out.print(f"[bold red]in use:[/] {safe(', '.join(holders))} would lose devices"
                  " (provision refuses without --force)")
    verdict = "[bold yellow]disruptive[/]" if plan.disruptive else "non-disruptive"
    how = {"apply": f" Apply with `{safe(profile_command('provision', plan))}`.",
           "release": f" Apply with `{safe(next_command('release'))}`."}.get(plan.action, "")
    out.print(f"{len(plan.steps)} step(s), {verdict}.{how}")


def profile_command(verb: str, plan: Plan, *extra: str) -> str:
    """`vgpu VERB --profile P` for ``plan``'s profile on the same host: the profile as the command line named it
    (a file stays a file, --recorded stays --recorded for provision), else by its name."""
    import click
    params = getattr(click.get_current_context(silent=True), "params", None) or {}
    if verb == "provision" and params.get("recorded"):
        return next_command(verb, "--recorded", *extra)
    return next_command(verb, "--profile", params.get("profile_ref") or plan.profile, *extra)


def matrix_line(matrix: dict | None) -> str | None:
    """One line naming the capability-matrix row the plan was checked against (docs/hardware.md §9)."""
    if not matrix:
        return None
    host = matrix.get("host") or {}
    seen = f"host: GIM {host.get('gim') or '?'}, {host.get('os') or '?'} {host.get('version') or '?'}, " \
           f"kernel {host.get('kernel') or '?'}"
    row = matrix.get("row")
    if row is None:
        return f"no row applies ({matrix['level']}); {seen}"
    where = row["host"]
    on = "any host OS" if where is None else f"{where['os']} {where['version']}" + (
        f" (kernel {where['kernel']})" if where.get("kernel") else "")
    return f"row GIM {row['gim']} / {on} / {row['gpu']}, level {matrix['level']} ({row['source']}); {seen}"


def _show_pending(out, pending) -> None:
    """What must happen outside vgpu before the host can match the profile (an ESXi reboot)."""
    for line in pending:
        out.print(f"[bold yellow]pending[/] (vgpu does not do this): {safe(line)}")


def _show_vms(out, plan: Plan) -> None:
    """Which VM gets which functions once applied (the profile's `vms`), one line per VM."""
    if not plan.vms:
        return
    out.print(f"[bold]VM assignment[/] ({len(plan.vms)} VM(s), from the profile's vms section):")
    for vm, functions in plan.vms:
        out.print(f"  {safe(vm)}: {safe(', '.join(str(a) for a in functions))}")


def _show_disruptions(out, plan: Plan) -> None:
    """Every function, VM and process each disruptive step takes away, in full (the table abbreviates)."""
    for i, step in enumerate(plan.steps, 1):
        d = getattr(step, "disruption", None)
        if d is None or not d.any:
            continue
        scope = "host-wide: every VF on this host goes away" if d.host_wide else "these functions change driver"
        out.print(f"[bold]step {i} disrupts[/] ({scope}):")
        for address in d.functions:
            out.print(f"  - {safe(address)}")
        for vm in d.vms:
            out.print(f"  - VM {safe(vm)} (loses its device)")
        for proc in d.processes:
            out.print(f"  - {safe(proc)} (holds /dev/vfio)")
        for unit in d.units:
            out.print(f"  - service {safe(unit)} (a GPU client: stopped before the step, started and verified after)")
        for client in d.clients:
            out.print(f"  - {safe(client)} (a GPU client outside any service: provision refuses without --force)")


def _disrupts(step) -> str:
    d = getattr(step, "disruption", None)
    if d is None or not d.any:
        return "-"
    parts = []
    if d.host_wide:
        parts.append("HOST-WIDE")
    if d.functions:
        shown = ", ".join(str(a) for a in d.functions[:4])
        more = f" (+{len(d.functions) - 4} more)" if len(d.functions) > 4 else ""
        parts.append(f"{len(d.functions)} function(s): {shown}{more}")
    if d.vms:
        parts.append("VMs: " + ", ".join(d.vms))
    if d.processes:
        parts.append("processes: " + ", ".join(d.processes))
    if d.units:
        parts.append("services stopped and restarted: " + ", ".join(d.units))
    if d.clients:
        parts.append("GPU clients: " + ", ".join(d.clients))
    return "; ".join(parts)


def print_plan_json(plan: Plan, warnings: list[str]) -> None:
    data = plan.to_dict()
    data["warnings"] = list(plan.warnings) + list(warnings)
    print_json(data)


def show_refusal(exc, profile: str, host: str, as_json: bool) -> None:
    if as_json:
        print_json({"schema": "vgpu.plan/v1", "profile": profile, "host": host, "refused": True,
                    "problems": [{"subject": p.subject, "message": p.message, "fix": p.fix}
                                 for p in getattr(exc, "problems", ())] or [{"subject": "profile",
                                                                             "message": exc.message, "fix": exc.hint}]})
        return
    err = console(err=True)
    err.print(f"[bold red]refused[/]: profile {safe(profile)} cannot be applied to {safe(host)};"
              " nothing was changed:")
    for p in getattr(exc, "problems", ()) or ():
        err.print(f"  - {safe(p.subject)}: {safe(p.message)}" + (f" (fix: {safe(p.fix)})" if p.fix else ""))
    if not getattr(exc, "problems", None):
        err.print(f"  - {safe(exc.message)}" + (f" (fix: {safe(exc.hint)})" if exc.hint else ""))


def show_provision(result) -> None:
    out = console()
    for line in result.recovered:
        out.print(f"[yellow]recovered[/] an interrupted run: {safe(line)}")
    if result.dry_run or result.outcome is None:
        show_plan(result.plan, result.warnings)
        return
    for w in (*result.plan.warnings, *result.warnings):
        out.print(f"[yellow]warning:[/] {safe(w)}")
    for line in result.outcome.applied:
        out.print(f"[green]done[/] {safe(line)}")
    pending = getattr(result, "pending", ())
    if pending:
        _show_pending(out, pending)
        out.print(f"[bold yellow]not finished[/]: the steps above were applied and read back; {safe(result.plan.host)} "
                  "matches the profile once the pending action is done and provision runs again")
        return
    if result.plan.action == "release":
        out.print(f"[bold green]verified[/]: {safe(result.plan.host)} is released (read back from the host)")
        return
    out.print(f"[bold green]verified[/]: {safe(result.plan.host)} now matches {safe(result.plan.profile)}"
              " (read back from the host)")


def show_unprovisioned(host: str, as_json: bool, unfinished: str | None = None) -> None:
    if as_json:
        print_json({"schema": "vgpu.status/v1", "host": host, "profile": None, "in_sync": unfinished is None,
                    "unfinished_run": unfinished, "items": []})
        return
    console().print(f"{safe(host)}: no profile recorded (never provisioned, or released)")
    _show_unfinished(unfinished)


def _show_unfinished(unfinished: str | None) -> None:
    """On stdout, where the verdict is read: a pending run means the host may be half-applied."""
    if unfinished is not None:
        console().print(f"[bold red]NOT in sync[/]: {safe(unfinished)}")


def show_status(profile: str, host: str, items, as_json: bool, unfinished: str | None = None) -> None:
    in_sync = unfinished is None and all(i.ok for i in items)
    if as_json:
        print_json({"schema": "vgpu.status/v1", "host": host, "profile": profile, "in_sync": in_sync,
                    "unfinished_run": unfinished,
                    "items": [{"subject": i.subject, "what": i.what, "expected": i.expected, "actual": i.actual,
                               "ok": i.ok} for i in items]})
        return
    rows = table(f"Status of {host} against recorded profile {profile}", ("", "subject", "item", "expected", "actual"),
                 keep_whole=("subject",))
    for i in items:
        add_row(rows, cell("ok", "green") if i.ok else cell("DRIFT", "bold red"), i.subject, i.what, i.expected,
                i.actual)
    out = console()
    out.print(rows)
    if unfinished is not None:
        _show_unfinished(unfinished)
        return
    if in_sync:
        out.print("[green]in sync[/]")
        return
    fixes = [f"{i.subject}: {i.fix}" for i in items if not i.ok and i.fix]
    first = f"{'; '.join(fixes)}; then " if fixes else ""
    out.print(f"[bold red]drift[/]: {sum(not i.ok for i in items)} item(s) differ; {safe(first)}"
              f"`{safe(next_command('provision', '--recorded'))}` re-applies")


PROVISION_SCHEMA = "vgpu.provision/v1"


class ProvisionReport:
    """What `provision` and `release` say, for people or (``--json``) as one vgpu.provision/v1 document.

    Every way the command ends goes through here: done (applied, in sync or planned), refused,
    nothing recorded, or an error (ApplyError, InUseError, LockedError, InterruptedRun, ...). With
    --json an error still prints the document (``result: "failed"``, the sentence, the hint and the
    exit code) and is then re-raised, so stderr gets the usual one ``error:`` line and the exit code is
    the documented one (docs/plan-json.md, docs/exit-codes.md).
    """

    def __init__(self, action: str, as_json: bool, profile: str | None):
        self.action, self.as_json = action, as_json
        self.profile, self.host = profile, None

    def __enter__(self) -> "ProvisionReport":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        from vgpu.errors import NotConfirmed, VgpuError
        if self.as_json and isinstance(exc, VgpuError):
            self._emit(result="not-confirmed" if isinstance(exc, NotConfirmed) else "failed", changed=False,
                       error={"message": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code),
                              "kind": type(exc).__name__})
        return False

    def _emit(self, *, result: str, changed: bool, plan: Plan | None = None, applied=(), recovered=(),
              warnings=(), problems=None, error=None) -> None:
        print_json({"schema": PROVISION_SCHEMA, "action": self.action, "profile": self.profile,
                    "host": self.host, "result": result, "changed": changed,
                    "applied": list(applied), "recovered": list(recovered), "warnings": list(warnings),
                    "plan": None if plan is None else plan.to_dict(), "problems": problems, "error": error})

    def done(self, result) -> None:
        if not self.as_json:
            show_provision(result)
            return
        self.profile = result.plan.profile if self.action == "apply" else self.profile
        applied = result.outcome.applied if result.outcome is not None else []
        outcome = ("planned" if result.dry_run and not result.plan.in_sync else
                   "pending" if result.pending else "in-sync" if result.outcome is None else "applied")
        self._emit(result=outcome, changed=bool(applied or result.recovered), plan=result.plan, applied=applied,
                   recovered=result.recovered, warnings=(*result.plan.warnings, *result.warnings))

    def refused(self, exc) -> int:
        from vgpu.errors import ExitCode
        if not self.as_json:
            show_refusal(exc, self.profile or "?", self.host or "?", False)
            return ExitCode.REFUSED
        problems = [{"subject": p.subject, "message": p.message, "fix": p.fix}
                    for p in getattr(exc, "problems", ())] or [{"subject": "profile", "message": exc.message,
                                                                 "fix": exc.hint}]
        self._emit(result="refused", changed=False, problems=problems)
        return ExitCode.REFUSED

    def nothing_recorded(self) -> int:
        from vgpu.errors import ExitCode
        if self.as_json:
            self._emit(result="nothing-recorded", changed=False)
        else:
            console().print("no profile is recorded on this host: nothing to re-apply")
        return ExitCode.OK
