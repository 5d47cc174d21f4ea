"""`vgpu rollout run|resume|status`: a canary, then waves, each gated on validating its guests (docs/rollout.md)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from vgpu.errors import ExitCode, InputError

HOST_STYLES = {"done": "green", "in_progress": "yellow", "failed": "bold red", "not_started": "dim"}
WAVE_STYLES = {"passed": "green", "running": "yellow", "failed": "bold red", "pending": "dim"}
STATE_DIR_HELP = "The roll-out's directory: its state (state.json) and each wave's reports."
STATE_DIR = click.Path(path_type=Path, readable=False)  # vgpu says what is wrong with it, as one line
BIG = 40  # more hosts than this: the tables show counts per wave and only the hosts that need a look


@click.group()
def rollout() -> None:
    """Roll a profile out over a fleet: a canary, then waves, each gated on its guests' validation."""


@rollout.command("run")
@click.option("-i", "--inventory", required=True, type=click.Path(path_type=Path, readable=False),
              help="Ansible inventory: the hypervisor hosts and the guests (each guest names its host in vgpu_host).")
@click.option("--profile", required=True, help="The shipped vgpu profile the hosts get (provision_profile).")
@click.option("--guest-profile", default=None,
              help="The profile guests are validated against (default: --profile; a guest's vgpu_guest_profile wins).")
@click.option("--state-dir", required=True, type=STATE_DIR, help=STATE_DIR_HELP + " A new directory.")
@click.option("--hosts", "hosts_pattern", default="gim_hosts:passthrough_hosts", show_default=True,
              help="Ansible pattern of the hosts to roll out to.")
@click.option("--guests", "guests_pattern", default="gpu_guests", show_default=True,
              help="Ansible pattern of the guests to validate.")
@click.option("--canary", multiple=True, metavar="HOST",
              help="A canary host (repeatable); default: the first --serial batch in inventory order.")
@click.option("--serial", default="1,25%", show_default=True, metavar="N|P%,...",
              help="Batch sizes as in Ansible's serial: the first is the canary's, the last repeats.")
@click.option("--max-unavailable", default="25%", show_default=True, metavar="N|P%",
              help="Most hosts down at once, failed ones included; caps every wave.")
@click.option("--baseline", type=click.Path(path_type=Path, readable=False), default=None,
              help="A validation report (JSON or report directory) each wave is compared with; a regression "
                   "fails the wave.")
@click.option("--threshold", "thresholds", multiple=True, metavar="CHECK=PERCENT",
              help="Regression threshold for checks starting with CHECK (as vgpu report --compare).")
@click.option("--guest-stack", is_flag=True, help="Install the guest driver and ROCm on each wave's guests "
              "(install_guest_stack.yml) before validating them.")
@click.option("--allow-unvalidated", is_flag=True,
              help="Accept hosts with no guest to validate (their waves are gated on provisioning alone).")
@click.option("-e", "--extra-vars", "extra", multiple=True, metavar="KEY=VALUE",
              help="A variable for every playbook of the roll-out (repeatable); recorded for resume.")
@click.option("--dry-run", is_flag=True, help="Print the waves and what each would do; change and write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan (--dry-run) or the final state as JSON.")
def run(inventory, profile, guest_profile, state_dir, hosts_pattern, guests_pattern, canary, serial,
        max_unavailable, baseline, thresholds, guest_stack, allow_unvalidated, extra, dry_run, as_json) -> int:
    """Start a roll-out: the canary, then each wave, stopping at the first wave that fails.

    Exit 0: every host done; 1: a wave failed validation or regressed (the roll-out stopped); 8: a host
    could not be provisioned; 4: refused (failed hosts fill --max-unavailable); 5: bad input (nothing ran);
    7: another run holds the state directory; 130/143/129: interrupted by SIGINT/SIGTERM/SIGHUP (resume continues).
    """
    from vgpu.automation.playbooks import parse_extra_vars
    from vgpu.rollout import plan as P
    from vgpu.rollout import waves as W
    from vgpu.rollout.state import StateDir

    store = StateDir(state_dir)
    store.check_new()  # read-only: a dry run refuses a directory the real run would refuse
    req = P.Request(inventory=inventory, profile=profile, guest_profile=guest_profile, hosts_pattern=hosts_pattern,
                    guests_pattern=guests_pattern, canary=tuple(canary), serial=W.parse_serial(serial),
                    max_unavailable=max_unavailable, baseline=baseline, thresholds=tuple(thresholds),
                    guest_stack=guest_stack, allow_unvalidated=allow_unvalidated, extra_vars=parse_extra_vars(extra))
    prep = P.prepare(req)
    if dry_run:
        _show_plan(prep, as_json)
        return ExitCode.OK
    state = P.new_rollout(prep)  # every check passed: only now is the directory made
    store.create()
    with store.lock():
        store.check_unclaimed()  # a second `run` that raced this one for the directory
        store.save(state)
        return _execute(store, state, prep.baseline, as_json, skip_failed=False)


@rollout.command("resume")
@click.option("--state-dir", required=True, type=STATE_DIR, help=STATE_DIR_HELP)
@click.option("--skip-failed", is_flag=True, help="Leave the failed hosts failed (they still count against "
              "--max-unavailable) and go on with the next waves; never past a failed canary.")
@click.option("--json", "as_json", is_flag=True, help="Print the final state as JSON.")
def resume(state_dir, skip_failed, as_json) -> int:
    """Go on from where a roll-out stopped: the stopped wave's unfinished hosts again, then the rest.

    Exit codes as for run.
    """
    from vgpu.rollout.plan import check_against_inventory, sha256_of
    from vgpu.rollout.state import StateDir

    store = StateDir(state_dir)
    state = store.load()
    if sha256_of(Path(state.spec.inventory), "inventory") == state.spec.inventory_sha256:
        check_against_inventory(state)  # before the lock: a refused resume leaves nothing behind
    with store.lock():
        latest = store.load()  # what the last run wrote before it let go of the lock
        if latest.spec != state.spec or set(latest.hosts) != set(state.hosts):
            raise InputError(f"the roll-out in {state_dir} changed while resume read it", hint="run resume again")
        state = latest
        if state.state == "done" and all(h.state == "done" for h in state.hosts.values()):
            click.echo(f"the roll-out in {state_dir} is done: nothing to resume", err=True)
            _finish(state, as_json, state_dir)
            return ExitCode.OK
        if state.spec.extra_vars and not as_json:
            click.echo("variables: " + " ".join(f"{k}={v}" for k, v in state.spec.extra_vars.items()), err=True)
        return _execute(store, state, None, as_json, skip_failed=skip_failed)


@rollout.command("status")
@click.option("--state-dir", required=True, type=STATE_DIR, help=STATE_DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON (schema vgpu.rollout/v1).")
@click.option("--textfile", metavar="FILE|-", default=None,
              help="Write the roll-out's progress as Prometheus metrics instead (node_exporter's textfile "
                   "collector, a *.prom file; - for standard output; docs/metrics.md).")
def status(state_dir, as_json, textfile) -> int:
    """The roll-out's waves and each host's state. Exit 0 when done, 1 when stopped or a host failed, 3 while
    it is still running or was interrupted."""
    from vgpu.executor import lock_holder
    from vgpu.rollout.state import StateDir

    target = None
    if textfile is not None:
        from vgpu.inputs import output_target
        target = output_target(textfile, "metrics output")  # checked before anything is read
    store = StateDir(state_dir)
    state = store.load(trusted=False)  # only read: anyone may look
    holder = lock_holder(store.path)
    if textfile is not None:
        from vgpu.cli.output import write_output
        from vgpu.metrics import render, rollout_registry
        write_output(target, render(rollout_registry(state, running=holder is not None)), "metrics output",
                     mode=0o644)
    else:
        _finish(state, as_json, state_dir, running=holder, checked=True)
    if state.state == "done":
        ok = all(h.state == "done" for h in state.hosts.values())
        return ExitCode.OK if ok else ExitCode.FAILURE
    return ExitCode.FAILURE if state.state == "stopped" else ExitCode.CHANGES_PENDING


def _execute(store, state, baseline, as_json: bool, *, skip_failed: bool) -> int:
    from vgpu.cli.render import console, safe
    from vgpu.rollout.actions import PlaybookActions
    from vgpu.rollout.runner import Runner

    err = console(err=True)
    for warning in state.warnings:
        err.print(f"[yellow]warning[/]: {safe(warning)}", highlight=False)
    with _Live(enabled=sys.stderr.isatty() and not as_json) as live:
        runner = Runner(store, state, PlaybookActions(state.spec), baseline=baseline, on_change=live.update)
        outcome = runner.run(skip_failed=skip_failed)
    _finish(outcome.rollout, as_json, store.path)
    return outcome.exit_code


def _finish(state, as_json: bool, state_dir: Path, running: str | None = None, checked: bool = False) -> None:
    """The state as a table (or JSON), what it means, where the failed wave's reports are, how to go on.
    ``checked``: ``running`` says whether a run holds the roll-out now (status)."""
    if as_json:
        from vgpu.cli.render import print_json
        print_json(state.to_dict())
        return
    from vgpu.cli.render import console, safe

    out = console()
    out.print(state_table(state))
    line = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in state.counts().items() if n)
    orphaned = checked and state.state == "running" and running is None
    if running:
        out.print(f"[yellow]running now[/] ({safe(running)})")
    verdicts = {"done": "[green]done[/]", "stopped": "[bold red]stopped[/]", "interrupted": "[yellow]interrupted[/]",
                "running": "[yellow]running[/]"}
    verdict = "[yellow]interrupted[/] (no run holds it: the last one ended without recording why)" if orphaned \
        else verdicts[state.state]
    out.print(f"roll-out {verdict}: {line}" + (f" - {safe(state.reason)}" if state.reason else ""))
    _show_failed_hosts(out, state)
    for wave in state.waves:
        if wave.state == "failed":
            for name, rel in wave.reports.items():
                out.print(f"{wave.label} {safe(name)}: {safe(str(Path(state_dir) / rel))}", highlight=False)
    if state.state in ("stopped", "interrupted") or orphaned:
        out.print(f"resume: vgpu rollout resume --state-dir {safe(str(state_dir))}", highlight=False)


# Phases after provisioning: a host that failed there was provisioned (and verified) with the new profile, and a
# roll-out does not roll a host back when its guests fail: it stays so until resumed or changed by hand.
PROVISIONED_PHASES = ("guest-stack", "validate", "compare")


def reason_lines(reason: str | None) -> list[str]:
    """A host's reason as one line per guest (its problems together) and one per other cause, in order."""
    groups: dict[str, list[str]] = {}
    for part in filter(None, (p.strip() for p in (reason or "").split("; "))):
        head = " ".join(part.split(":", 1)[0].split()[:2]) if part.startswith("guest ") else part
        groups.setdefault(head, []).append(part[len(head):].lstrip(": ") if head != part else part)
    return [k if k in v else f"{k}: {'; '.join(v)}" for k, v in groups.items()]


def _show_failed_hosts(out, state) -> None:
    """Each failed host's reason, grouped per guest, below the table (whose cell only says how many); and that a
    host that failed after provisioning keeps the new profile."""
    from vgpu.cli.render import safe

    for h, rec in state.hosts.items():
        if rec.state != "failed":
            continue
        kept = (f"; it stays provisioned with {state.spec.profile} (a failed wave is not rolled back)"
                if rec.phase in PROVISIONED_PHASES else "")
        out.print(f"[bold red]{safe(h)} failed[/] at {safe(rec.phase or '?')}{safe(kept)}:", highlight=False)
        for line in reason_lines(rec.reason):
            out.print(f"  - {safe(line)}", highlight=False)


def state_table(state):
    from vgpu.cli.render import add_row, cell, table

    rows = table(f"roll-out of {state.spec.profile} ({len(state.hosts)} hosts, at most "
                 f"{state.max_unavailable_hosts} unavailable)", ("wave", "host", "state", "phase", "guests", "reason"))
    big = len(state.hosts) > BIG
    for wave in state.waves:
        hosts = [h for h in wave.hosts if not big or state.hosts[h].state in ("in_progress", "failed")]
        counts = {}
        for h in wave.hosts:
            counts[state.hosts[h].state] = counts.get(state.hosts[h].state, 0) + 1
        summary = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items()) if big else ""
        add_row(rows, cell(f"{wave.label} ({wave.state})", WAVE_STYLES.get(wave.state)), summary, "", "", "",
                wave.reason if wave.state == "failed" else "")
        for h in hosts:
            rec = state.hosts[h]
            reason = rec.reason
            if rec.state == "failed":  # in full below the table, one line per guest
                reason = f"{len(reason_lines(rec.reason))} problem(s), listed below"
            add_row(rows, "", h, cell(rec.state.replace("_", " "), HOST_STYLES.get(rec.state)),
                    rec.phase if rec.state != "done" else "", len(rec.guests), reason)
    return rows


def _show_plan(prep, as_json: bool) -> None:
    spec, plan = prep.spec, prep.plan
    steps = ["provision.yml on the wave's hosts (provision_profile=" + spec.profile + ")"]
    if spec.guest_stack:
        steps.append("install_guest_stack.yml on their guests (decoupled amdgpu driver + ROCm)")
    steps.append("validate.yml on their guests (vgpu validate against "
                 + (spec.guest_profile or spec.profile) + "; a guest's vgpu_guest_profile wins)")
    if spec.baseline:
        steps.append(f"compare with the baseline {spec.baseline} (a regression fails the wave; thresholds "
                     + ", ".join(f"{k}={v:g}%" for k, v in spec.thresholds.items()) + ")")
    gate = "every host provisioned, every guest passes" + (" and does not regress" if spec.baseline else "")
    if as_json:
        from vgpu.cli.render import print_json
        print_json({"schema": "vgpu.rollout-plan/v1", "spec": spec.model_dump(mode="json"),
                    "max_unavailable_hosts": plan.max_unavailable, "steps": steps, "gate": gate,
                    "waves": [{"index": w.index, "canary": w.canary, "hosts": list(w.hosts),
                               "guests": {h: plan.guests.get(h, []) for h in w.hosts}} for w in plan.waves],
                    "warnings": plan.warnings})
        return
    from vgpu.cli.render import add_row, console, safe, table

    out = console()
    out.print(f"roll-out of {safe(spec.profile)}: {len(plan.hosts)} hosts in {len(plan.waves)} waves, at most "
              f"{plan.max_unavailable} unavailable at once", highlight=False)
    rows = table("waves", ("wave", "hosts", "guests"))
    for w in plan.waves:
        add_row(rows, "canary" if w.canary else f"wave {w.index}", ", ".join(w.hosts),
                ", ".join(g for h in w.hosts for g in plan.guests.get(h, [])) or "-")
    out.print(rows)
    out.print("each wave, in order:")
    for i, step in enumerate(steps, 1):
        out.print(f"  {i}. {safe(step)}", highlight=False)
    out.print(f"gate: {gate}; the roll-out stops at the first wave that fails")
    if spec.extra_vars:
        out.print("variables for every playbook: " + safe(" ".join(f"{k}={v}" for k, v in spec.extra_vars.items())),
                  highlight=False)
    for w in plan.warnings:
        out.print(f"[yellow]warning[/]: {safe(w)}", highlight=False)
    out.print("dry run: nothing was changed or written")


class _Live:
    """The waves and hosts as a live table on a terminal (redrawn at most 4 times a second; big fleets as counts);
    a line per change otherwise (logs, CI)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._live = None
        self._last = ""
        self._drawn = 0.0

    def __enter__(self) -> "_Live":
        if self.enabled:
            from rich.live import Live

            from vgpu.cli.render import live_console
            self._live = Live(console=live_console(err=True), transient=True, auto_refresh=False)
            self._live.start()
        return self

    def update(self, state, note: str) -> None:
        from vgpu.cli.render import console, safe

        if self._live is not None:
            now = time.monotonic()
            if now - self._drawn < 0.25 and " task: " in note:
                return  # task chatter between two redraws
            self._drawn = now
            from rich.console import Group
            from rich.text import Text
            self._live.update(Group(state_table(state), Text(safe(note, markup=False))), refresh=True)
            return
        if note and note != self._last and " task: " not in note:  # task-level chatter: the live view only
            self._last = note
            console(err=True).print(safe(note), highlight=False)

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()
