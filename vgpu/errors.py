"""One exception family for everything an operator can cause or fix.

Each subclass carries a documented exit code (docs/exit-codes.md). The CLI prints
``error: <message>`` (one line, plus an optional ``hint``) and exits with the code;
tracebacks appear only with ``--debug``.
"""

from __future__ import annotations

import signal


class ExitCode:
    """Process exit codes. Keep in sync with docs/exit-codes.md."""

    OK = 0
    FAILURE = 1  # a check ran and found a problem (host not ready, validation failed, drift)
    USAGE = 2  # bad command line (click's own code)
    CHANGES_PENDING = 3  # plan: the host differs from the profile
    REFUSED = 4  # plan/provision: the profile cannot be applied to this host
    BAD_INPUT = 5  # invalid profile, machine spec, snapshot, PCI address, sysfs root
    IN_USE = 6  # a device is held by a VM or process
    LOCKED = 7  # another vgpu run holds the host lock
    APPLY_FAILED = 8  # a step failed; applied steps were rolled back
    REMOTE = 9  # unreachable guest/host, host-key refusal
    INTERNAL = 70  # a bug: please report with --debug output
    HANGUP = 129  # SIGHUP (the terminal or SSH session went away): 128 + 1
    INTERRUPTED = 130  # SIGINT (Ctrl-C): 128 + 2, as shells report it
    TERMINATED = 143  # SIGTERM: 128 + 15


class VgpuError(Exception):
    """Base class: ``message`` says what and why, ``hint`` says what to do."""

    exit_code = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None, subject: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.subject = subject

    def __str__(self) -> str:
        return self.message


class InputError(VgpuError):
    """Something the user gave us is malformed: a profile, a spec, an address, a path."""

    exit_code = ExitCode.BAD_INPUT


class UsageError(VgpuError):
    """A command-line value vgpu checks itself, as click does its own: exit 2, nothing was done."""

    exit_code = ExitCode.USAGE


class HostError(VgpuError):
    """The host (sysfs, modules, drivers) did not behave as expected."""

    exit_code = ExitCode.FAILURE


class RefusedError(VgpuError):
    """A profile cannot be applied to this host; nothing was changed."""

    exit_code = ExitCode.REFUSED


class InUseError(VgpuError):
    """A device that would be disturbed is held by a VM or a process."""

    exit_code = ExitCode.IN_USE


class LockedError(VgpuError):
    exit_code = ExitCode.LOCKED


class ApplyError(VgpuError):
    exit_code = ExitCode.APPLY_FAILED


class RemoteError(VgpuError):
    exit_code = ExitCode.REMOTE


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP where no step is running (start-up, planning, reading): raised like the KeyboardInterrupt
    of SIGINT, so it unwinds every ``except Exception`` (atomic writes remove their temporary file) and main()
    answers 128 + the signal, as docs/exit-codes.md promises wherever the signal arrives."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop_now(signum, _frame) -> None:
    raise Stopped(signum)


def install_entry_handlers() -> dict:
    """At the CLI's entry: SIGTERM, and SIGHUP where it would end vgpu at once (its default), stop vgpu like
    Ctrl-C does (exit 143 / 129, not a bare kill); an ignored SIGHUP (nohup) stays ignored. A run that changes a
    host defers them while a step runs (executor.deferred_signals). Returns what they were, for the caller to put
    back (main() called in-process, as tests do)."""
    previous = {}
    for sig in (signal.SIGHUP, signal.SIGTERM):
        if signal.getsignal(sig) == signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _stop_now)
    return previous
class NotConfirmed(VgpuError):
    """A disruptive plan was not confirmed (declined, no terminal to ask, or --json without --yes): nothing was
    changed. Exit 1; `provision/release --json` say ``result: "not-confirmed"`` (docs/plan-json.md)."""


def interrupt_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop a vgpu run at a consistent point (InterruptedRun): SIGINT, SIGTERM, and SIGHUP
    where it would otherwise end vgpu at once (its default, or the entry handler standing in for it); ignored
    (nohup) or handled by a caller (a roll-out), SIGHUP is left as it is."""
    hup = (signal.SIGHUP,) if signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, _stop_now) else ()
    return (signal.SIGINT, signal.SIGTERM, *hup)


def signal_of(exc: BaseException) -> int | None:
    """The signal behind a KeyboardInterrupt (Stopped carries its own; a bare one is SIGINT's), following the
    exception chain: click turns a KeyboardInterrupt into Abort."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KeyboardInterrupt):
            return getattr(exc, "signum", signal.SIGINT)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


class InterruptedRun(VgpuError):
    """SIGINT, SIGTERM or SIGHUP: the run stopped at a consistent point (before any change, or after rolling
    back what it had applied). Exit 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP (128 + the signal, as shells do)."""

    def __init__(self, message: str, signum: int, *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.signum = signum
        self.exit_code = 128 + signum
        self.result = None  # what the run can still say (a fleet run: each host's outcome, read back)
