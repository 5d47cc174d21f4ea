"""The ``vgpu`` command line: thin click commands that parse, call services and render.

Subcommands are imported lazily (only the one that runs), so ``vgpu discover --json`` starts
fast. Every VgpuError becomes one ``error:`` line and its documented exit code
(docs/exit-codes.md); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import sys

import click

from vgpu import __version__
from vgpu.errors import ExitCode, VgpuError, install_entry_handlers, signal_of

# name -> "module:attribute"; each module defines one click command or group.
COMMANDS: dict[str, str] = {
    "discover": "vgpu.cli.discover:discover",
    "host": "vgpu.cli.host:host",
    "sim": "vgpu.cli.sim:sim",
    "profiles": "vgpu.cli.profiles:profiles",
    "plan": "vgpu.cli.plan:plan",
    "provision": "vgpu.cli.plan:provision",
    "status": "vgpu.cli.plan:status",
    "release": "vgpu.cli.plan:release",
    "export": "vgpu.cli.plan:export",
    "validate": "vgpu.cli.validate:validate",
    "report": "vgpu.cli.validate:report",
    "playbook": "vgpu.cli.playbook:playbook",
    "metrics": "vgpu.cli.metrics:metrics",
    "rollout": "vgpu.cli.rollout:rollout",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(n for n in COMMANDS if self._available(n))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        # No except here: a command module that fails to import (a broken install, a bug) is an
        # internal error (main(): one line, exit 70), never "No such command" (exit 2).
        return getattr(importlib.import_module(module), attr)

    @staticmethod
    def _available(name: str) -> bool:
        module = COMMANDS[name].split(":")[0]
        return importlib.util.find_spec(module) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vgpu")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Provision AMD Instinct MI300-family GPUs for VMs and prove each VM works."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> None:
    import signal

    previous = install_entry_handlers()
    try:
        _main(sys.argv[1:] if argv is None else argv)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _main(args: list[str]) -> None:
    debug = "--debug" in args
    try:
        rc = cli.main(args=args, prog_name="vgpu", standalone_mode=False)
    except VgpuError as exc:
        if debug:
            raise
        _print_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        signum = signal_of(exc)
        if signum is not None:  # click turns a KeyboardInterrupt (Ctrl-C, or Stopped) into Abort
            _interrupted(signum)
        click.echo("aborted", err=True)
        sys.exit(ExitCode.FAILURE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        _interrupted(signal_of(exc) or 2)
    except Exception as exc:  # a bug: one line and a distinct code, not a traceback (unless --debug)
        if debug:
            raise
        from vgpu.cli.render import safe  # the exception text may quote outside content
        click.echo(f"error: internal error ({type(exc).__name__}: {safe(str(exc), markup=False)}); "
                   "this is a bug in vgpu", err=True)
        click.echo("hint: rerun with --debug and report the traceback", err=True)
        sys.exit(ExitCode.INTERNAL)
    sys.exit(rc if isinstance(rc, int) else 0)


def _interrupted(signum: int) -> None:
    """SIGINT, SIGTERM or SIGHUP where no step of a host change was running (start-up, planning, reading, or after
    a run ended): one line, 128 + the signal (docs/exit-codes.md). A step in hand defers the signal and ends in
    InterruptedRun instead (executor.deferred_signals), so no host is left half-changed here."""
    import signal
    click.echo(f"error: interrupted by {signal.Signals(signum).name} while no step was running", err=True)
    click.echo("hint: `vgpu status` shows the host as it is", err=True)
    sys.exit(128 + signum)


def _print_error(exc: VgpuError) -> None:
    from vgpu.cli.render import safe  # messages quote paths, names and file content: no raw control characters
    click.echo(f"error: {safe(exc.message, markup=False)}", err=True)
    if exc.hint:
        click.echo(f"hint: {safe(exc.hint, markup=False)}", err=True)
