"""`vgpu playbook list` and `vgpu playbook run`: the vgpu.instinct playbooks through ansible-runner."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from vgpu.errors import ExitCode

STYLES = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold red"}


@click.group()
def playbook() -> None:
    """Run the collection's playbooks (prepare hosts, provision, guest stack, validate) with live progress."""


@playbook.command("list")
def list_playbooks() -> None:
    """The shipped playbooks and what each does."""
    from vgpu.automation.playbooks import first_comment, playbooks
    from vgpu.cli.render import add_row, console, table

    rows = table("Playbooks (vgpu playbook run NAME --inventory FILE)", ("name", "what it does"))
    for name, path in playbooks().items():
        add_row(rows, name, first_comment(path))
    console().print(rows)


@playbook.command("run")
@click.argument("name")
@click.option("-i", "--inventory", required=True, type=click.Path(path_type=Path),
              help="Ansible inventory (INI or YAML), read by Ansible; checked before anything runs.")
@click.option("-l", "--limit", metavar="PATTERN", help="Ansible host pattern (a group, hosts, :!excluded).")
@click.option("-e", "--extra-vars", "extra", multiple=True, metavar="KEY=VALUE",
              help="A variable for the play (repeatable); values are strings.")
@click.option("--check", is_flag=True, help="Ansible's check mode: what would change (provision: vgpu's plan).")
@click.option("--diff", is_flag=True, help="Show what changes, per host and task (provision: the plan's steps).")
@click.option("-v", "--verbose", "verbosity", count=True,
              help="Ansible's verbosity (-v ... -vvvv), in the run's kept output (--keep-artifacts).")
@click.option("--vault-password-file", type=click.Path(path_type=Path), metavar="FILE",
              help="Ansible Vault password file (or script) for vault-encrypted variables.")
@click.option("--ask-vault-pass", is_flag=True,
              help="Ask for the Vault password on the terminal (kept in memory, never in a file or argv).")
@click.option("--artifacts-dir", type=click.Path(path_type=Path), metavar="DIR",
              help="Where a failed or interrupted run keeps its artifacts (events, output, command line); "
                   "default $XDG_STATE_HOME/vgpu/playbook-runs or ~/.local/state/vgpu/playbook-runs.")
@click.option("--keep-artifacts", is_flag=True, help="Keep the artifacts of a successful run too.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (schema vgpu.playbook-run/v1).")
def run(name, inventory, limit, extra, check, diff, verbosity, vault_password_file, ask_vault_pass, artifacts_dir,
        keep_artifacts, as_json) -> int:
    """Run playbook NAME over an inventory: live progress per host, then each host's result.

    Exit 0: every host ok or changed; 1: ansible-playbook failed and no host says why; 8: a host failed; 9: a host
    was unreachable; 5: bad inventory or variables (nothing ran); 130/143/129: interrupted (SIGINT/SIGTERM/SIGHUP),
    each host's outcome (applied, rolled back, unknown, not started) read back from it after the stop.
    """
    from vgpu.automation.playbooks import parse_extra_vars, run_playbook
    from vgpu.errors import InterruptedRun

    extra_vars = parse_extra_vars(extra)
    options = _options(verbosity, vault_password_file, ask_vault_pass, artifacts_dir, keep_artifacts)
    try:
        with _Live(enabled=sys.stderr.isatty()) as live:
            result = run_playbook(name, inventory, limit=limit, extra_vars=extra_vars, check=check, diff=diff,
                                  on_change=live.update, options=options)
    except InterruptedRun as exc:  # the per-host outcomes first, then the one error line (main) and 128 + signal
        if getattr(exc, "result", None) is not None:
            _report(exc.result, as_json)
            _say_artifacts(exc.result)
        raise
    _report(result, as_json)
    _say_artifacts(result)
    from vgpu.cli.render import safe
    if result.error:
        click.echo(f"error: {safe(result.error, markup=False)}", err=True)
    elif not result.hosts:
        click.echo(f"warning: no host of {safe(inventory, markup=False)} is in the hosts playbook {safe(name, markup=False)}"
                   " runs on (see its hosts: line and the variable that overrides it, docs/ansible.md)", err=True)
    return result.exit_code


def _options(verbosity: int, vault_file, ask_vault: bool, artifacts_dir, keep: bool):
    """The run's options, checked before anything runs (exit 5)."""
    from vgpu.automation.playbooks import RunOptions, check_vault_file
    from vgpu.errors import InputError

    if verbosity > 6:
        raise InputError("-v: at most -vvvvvv (Ansible's highest verbosity)")
    if vault_file is not None and ask_vault:
        raise InputError("--vault-password-file and --ask-vault-pass: give one of them")
    password = None
    if ask_vault:
        import getpass
        if not sys.stdin.isatty():
            raise InputError("--ask-vault-pass needs a terminal to ask on", hint="use --vault-password-file FILE")
        password = getpass.getpass("Vault password: ")
    return RunOptions(verbosity=verbosity, vault_password_file=check_vault_file(vault_file) if vault_file else None,
                      vault_password=password, artifacts_dir=artifacts_dir, keep_always=keep)


def _say_artifacts(result) -> None:
    if result.artifacts_problem:
        from vgpu.cli.render import safe
        click.echo(f"warning: {safe(result.artifacts_problem, markup=False)}", err=True)
    if result.artifacts:
        from vgpu.cli.render import safe
        click.echo(f"artifacts of this run (events, Ansible's output, command line): "
                   f"{safe(result.artifacts, markup=False)}", err=True)


def _report(result, as_json: bool) -> None:
    if as_json:
        from vgpu.cli.render import print_json
        print_json(result.to_dict())
    else:
        _show(result)


class _Live:
    """Per-host progress on stderr: a live rich table on a terminal, one line per host result otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._live = None
        self._seen: dict[str, tuple] = {}

    def __enter__(self) -> "_Live":
        if self.enabled:
            from rich.live import Live

            from vgpu.cli.render import live_console
            self._live = Live(console=live_console(err=True), transient=True, refresh_per_second=8)
            self._live.start()
        return self

    def update(self, tracker) -> None:
        from vgpu.cli.render import add_row, cell, console, safe, table

        if self._live is not None:
            rows = table(f"task: {tracker.task or '-'}", ("host", "ok", "changed", "failed", "unreachable", "now"))
            for h in sorted(tracker.hosts.values(), key=lambda h: h.host):
                add_row(rows, h.host, h.ok, h.changed, cell(h.failed, "red" if h.failed else None),
                        cell(h.unreachable, "red" if h.unreachable else None), h.task)
            self._live.update(rows)
            return
        for h in tracker.hosts.values():  # plain: a line whenever a host's counts change
            key = (h.ok, h.changed, h.failed, h.unreachable)
            if self._seen.get(h.host) != key:
                self._seen[h.host] = key
                state = "unreachable" if h.unreachable else "failed" if h.failed else "ok"
                console(err=True).print(f"{safe(h.host)}: {state} ok={h.ok} changed={h.changed} "
                                        f"task: {safe(tracker.task)}")

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()


def _show(result) -> None:
    from vgpu.cli.render import add_row, cell, console, safe, table

    title = f"{result.playbook} on {result.inventory}" + (" (check mode)" if result.check else "")
    stopped = result.interrupted is not None
    title += " (interrupted: each host read back after the stop)" if stopped else ""
    rows = table(title, ("host", "result", "ok", "changed", "skipped", "failed task", "message")
                 + (("after the stop",) if stopped else ()))
    for h in result.hosts:
        after = (f"{h.outcome}" + (f": {h.read_back['reason']}" if (h.read_back or {}).get("reason") else ""),)
        add_row(rows, h.host, cell(h.status, STYLES.get(h.status)), h.ok, h.changed, h.skipped, h.failed_task,
                h.message, *(after if stopped else ()))
    out = console()
    out.print(rows)
    for h in result.hosts:  # --diff: what each task changed (or would change, in check mode)
        for d in h.diffs:
            out.print(f"--- diff: {safe(h.host)} / {safe(d['task'])}", markup=False)
            for line in d["diff"].splitlines():
                out.print(safe(line, markup=False), markup=False, highlight=False)
    if stopped:
        return
    counts = {s: sum(h.status == s for h in result.hosts) for s in STYLES}
    verdict = "[green]all hosts ok[/]" if result.exit_code == ExitCode.OK else "[bold red]not all hosts ok[/]"
    out.print(f"{verdict}: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" ({safe(result.status)})")
