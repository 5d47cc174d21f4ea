"""Applying a Plan safely: host lock, journal, rollback on failure, recovery after a crash.

Before each step the executor journals the step and what its undo needs; after it, that the step
is done. A failing step rolls back every applied step (and the failing one, which may be half
done) in reverse. A run killed mid-way leaves the journal behind: the next run takes the lock
and finds it. If every step had been applied (only the verification was cut short) the steps are
kept and the next plan verifies them; otherwise the next run rolls them back (after the same holder
check and confirmation as any disruptive change, vgpu/provision.py) and only then plans afresh.

It is the same for every platform: what a step does is in that platform's StepTable (Linux/KVM:
vgpu/host/steps.py; ESXi: vgpu/esxi/steps.py), and the lock and journal live in the state
directory the platform names (/var/lib/vgpu on a Linux host; per ESXi host on the controller).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import stat
import time
from collections.abc import Callable, Iterator
from typing import Any
from dataclasses import dataclass, field
from pathlib import Path

from vgpu.errors import ApplyError, HostError, InputError, InterruptedRun, LockedError, VgpuError, interrupt_signals
from vgpu.host.files import FileStore
from vgpu.journal_check import journal_problem
from vgpu.inputs import InputFileError, load_json, write_error
from vgpu.model.plan import Plan, Step, step_from_dict

JOURNAL_SCHEMA = "vgpu.journal/v1"


@dataclass
class Outcome:
    applied: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)


@contextlib.contextmanager
def host_lock(state_dir: Path | None, timeout: float = 30.0, *, what: str = "the host") -> Iterator[None]:
    """Exclusive flock on <state>/lock; LockedError naming the holder after ``timeout`` seconds.
    ``state_dir`` None (a capture, which nothing changes) has no lock to take."""
    if state_dir is None:
        yield
        return
    path = state_dir / "lock"
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        # never through a symlink, never a FIFO or device: the lock file is truncated and written below
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        # a lock file of the wrong kind is something in the state directory to remove (exit 5), not a full disk
        if exc.errno == errno.ELOOP:
            raise InputError(f"the lock file {path} is a symbolic link; vgpu will not follow it",
                             hint=f"remove it: vgpu makes its own lock file in {state_dir}") from None
        if exc.errno == errno.EISDIR:
            raise InputError(f"the lock file {path} is a directory, not a regular file; vgpu will not use it",
                             hint=f"remove that directory (rmdir {path}): vgpu makes its own lock file in "
                                  f"{state_dir}") from None
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):
            raise InputError(f"the state directory {state_dir} cannot be used: it, or a directory above it, is a "
                             "regular file", hint=f"move that file away (is $VGPU_STATE_DIR a file?): vgpu makes "
                                                  f"{state_dir} itself") from None
        raise _lock_error(exc, path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"the lock file {path} is not a regular file; vgpu will not write into it",
                         hint=f"remove it: vgpu makes its own lock file in {state_dir}")
    try:
        _flock_within(fd, fcntl.LOCK_EX, timeout, f"{what} is locked")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"vgpu pid {os.getpid()} since {_holder_time()}\n".encode(), 0)
        except OSError as exc:  # a full or read-only /var/lib/vgpu
            raise _lock_error(exc, path) from None
        yield
    finally:
        os.close(fd)


def _holder_time() -> str:
    """Now, as the holder line shows when a run took the lock: ISO 8601 with the date and the UTC offset
    (2026-12-04T09:12:03+00:00), never misread on another day or by someone in another time zone."""
    from datetime import datetime
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _lock_error(exc: OSError, path: Path) -> HostError:
    """One line naming the lock file and why it cannot be taken (permission, full or read-only disk)."""
    denied = exc.errno in (errno.EACCES, errno.EPERM)
    return HostError(f"cannot take the host lock {path}: {write_error(exc, 'host lock', path).problem}",
                     hint="changing a host needs root (run with sudo)" if denied else
                     f"free space on (or remount read-write) the file system holding {path.parent}")


def lock_holder(state_dir: Path | None) -> str | None:
    """Who holds the host lock right now ("vgpu pid N since <ISO 8601 time>"), or None when nobody does."""
    if state_dir is None:
        return None
    try:
        fd = os.open(state_dir / "lock", os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _holder(fd)
        return None if holder.startswith(f"vgpu pid {os.getpid()} ") else (holder or "another vgpu run")
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def wait_unlocked(state_dir: Path | None, timeout: float) -> None:
    """Return once no vgpu run holds the host lock (a shared flock, released at once: nothing is written, so a
    read-only command stays read-only); LockedError naming the holder after ``timeout`` seconds. The read-back of
    an interrupted fleet run uses it: the host's vgpu may still be rolling back (vgpu.automation.interrupt)."""
    if state_dir is None:
        return
    try:
        fd = os.open(state_dir / "lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # no lock file: no run has ever held it (a missing or unreadable one: status says why)
    try:
        _flock_within(fd, fcntl.LOCK_SH, timeout, "the host is still locked")
    finally:
        os.close(fd)


def _flock_within(fd: int, kind: int, timeout: float, said: str) -> None:
    """flock ``fd`` (LOCK_EX or LOCK_SH), trying for ``timeout`` seconds; after that LockedError "SAID by HOLDER"
    (``said``: "the host is locked", ...)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                raise LockedError(f"{said} by {_holder(fd) or 'another vgpu run'}",
                                  hint="wait for it to finish; the lock frees itself when that run ends") from exc
            time.sleep(0.1)


def _holder(fd: int) -> str:
    """What the run holding the lock wrote into it: "vgpu pid N since 2026-12-04T09:12:03+00:00" ("" if
    nothing; an older vgpu wrote the time of day alone)."""
    return os.pread(fd, 200, 0).decode(errors="replace").strip()


class Journal:
    def __init__(self, state_dir: Path):
        self.store = FileStore(state_dir)

    def load(self) -> dict | None:
        """The journal, None when there is none. Read through vgpu.inputs (size cap, text, bounded
        nesting); a damaged one is an InputError (docs/troubleshooting.md: inspect, then remove)."""
        path = self.store.path("journal.json")
        hint = "inspect it and the host (`vgpu status`), then remove it to continue"
        try:
            data = load_json(path, "journal")
        except InputFileError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # ENOTDIR: the state directory is a file (no journal)
                return None
            if exc.errno is not None:
                raise HostError(str(exc), hint="reading the journal needs root (run with sudo)") from None
            raise InputError(f"the journal {path} is damaged: {exc.problem}", hint=hint) from None
        if not isinstance(data, dict) or data.get("schema") != JOURNAL_SCHEMA:
            raise InputError(f"the journal {path} is damaged: not a {JOURNAL_SCHEMA} journal", hint=hint)
        problem = journal_problem(data)  # every field used below, checked here once
        if problem is not None:
            raise InputError(f"the journal {path} is damaged: {problem}", hint=hint)
        return data

    def save(self, data: dict) -> None:
        self.store.write("journal.json", json.dumps(data, indent=1), 0o600)

    def clear(self) -> None:
        self.store.write("journal.json", None)


@dataclass(frozen=True)
class Pending:
    """What an interrupted run left in its journal."""

    profile: str
    steps: tuple[Step, ...]  # started, in order (the last may be half done)
    planned: int | None  # how many steps its plan had (None: a journal from before this was recorded)
    all_done: bool  # every step of the plan was applied: only the verification was cut short

    rolling_back: bool = False  # the run had started undoing its steps when it died

    @property
    def complete(self) -> bool:
        return self.all_done and self.planned == len(self.steps) and not self.rolling_back


def pending_run(journal: Journal) -> Pending | None:
    """What the journal says an interrupted run left, or None when there is no journal."""
    data = journal.load()
    if data is None:
        return None
    entries = _entries(journal, data)
    planned = data.get("steps")
    return Pending(profile=str(data.get("profile", "?")), steps=tuple(step for step, _, _ in entries),
                   planned=planned if isinstance(planned, int) else None,
                   all_done=all(done for _, _, done in entries), rolling_back=bool(data.get("rolling_back")))


def _entries(journal: Journal, data: dict) -> list[tuple[Step, dict, bool]]:
    """The journal's steps (Journal.load has checked their shape: vgpu/journal_check.py)."""
    return [(step_from_dict(e["step"]), dict(e["info"]), e["done"]) for e in data.get("entries", [])]


StepHook = Callable[[int, Step, str], None]  # (index, step, "before"|"after")
Prepare = Callable[[Any, Any], dict]
Change = Callable[[Any, Any, dict], None]


class StepTable:
    """How one platform applies and undoes each kind of step it plans: (prepare, apply, undo) per step
    type. ``plans`` names every step type that platform's planners emit; a type without a handler is
    an error when the table is built (at import), never a KeyError in the middle of a run."""

    def __init__(self, platform: str, handlers: dict[type[Step], tuple[Prepare, Change, Change]],
                 plans: tuple[type[Step], ...]):
        missing = [t.kind for t in plans if t not in handlers]
        extra = [t.kind for t in handlers if t not in plans]
        if missing or extra:
            raise TypeError(f"{platform} step table: no handler for {missing}, handlers for unplanned {extra}")
        self.platform = platform
        self.handlers = dict(handlers)

    def _for(self, step: Step) -> tuple[Prepare, Change, Change]:
        try:
            return self.handlers[type(step)]
        except KeyError:  # a journal from the other platform, or a bug
            raise HostError(f"{self.platform} cannot apply a {step.kind} step") from None

    def prepare(self, step: Step, ctx) -> dict:
        return self._for(step)[0](step, ctx)

    def apply(self, step: Step, ctx, info: dict) -> None:
        self._for(step)[1](step, ctx, info)

    def undo(self, step: Step, ctx, info: dict) -> None:
        self._for(step)[2](step, ctx, info)


class Executor:
    def __init__(self, ctx, state_dir: Path, hook: StepHook | None = None, table: StepTable | None = None):
        if table is None:
            from vgpu.host.steps import TABLE as table  # the Linux/KVM handlers
        self.ctx = ctx
        self.table = table
        self.journal = Journal(state_dir)
        self.hook = hook

    def pending(self) -> Pending | None:
        """The run a crash interrupted (its journal is still here), or None. Call with the lock held."""
        return pending_run(self.journal)

    def recover(self) -> list[str]:
        """Roll back a run that died mid-way (its journal is still here). Call with the lock held,
        after checking what the rollback disrupts (``pending``)."""
        data = self.journal.load()
        if data is None:
            return []
        baseline = data.get("baseline", {})
        self.ctx.baseline = baseline if isinstance(baseline, dict) else {}
        with deferred_signals() as signals:
            undone = self._rollback([(step, info) for step, info, _ in _entries(self.journal, data)])
            self.journal.clear()
        if signals.received:
            raise InterruptedRun(f"interrupted by {signal.Signals(signals.received).name}: the interrupted "
                                 f"{data.get('profile', '?')} run was rolled back first ({len(undone)} step(s)); "
                                 "nothing new was applied", signals.received)
        return undone

    def forget(self) -> None:
        """Drop the journal of a run whose steps all completed (it is kept, not rolled back)."""
        self.journal.clear()

    def run(self, plan: Plan, baseline: dict[str, str | None],
            verify: Callable[[], None] | None = None) -> Outcome:
        """Apply every step, then ``verify``; on any failure roll back and raise ApplyError. SIGINT,
        SIGTERM and SIGHUP are deferred while a step runs: the step finishes, then everything applied is
        rolled back like a failure and InterruptedRun (exit 130 / 143 / 129) is raised."""
        self.ctx.baseline = dict(baseline)
        data = {"schema": JOURNAL_SCHEMA, "pid": os.getpid(), "profile": plan.profile,
                "steps": len(plan.steps), "baseline": self.ctx.baseline, "entries": []}
        outcome, done = Outcome(), []
        with deferred_signals() as signals:
            self.journal.save(data)
            for index, step in enumerate(plan.steps):
                try:
                    info = self.table.prepare(step, self.ctx)
                    data["entries"].append({"step": step.to_dict(), "info": info, "done": False})
                    self.journal.save(data)
                    self._fire(index, step, "before")
                    done.append((step, info))
                    self.table.apply(step, self.ctx, info)
                    data["entries"][-1]["done"] = True
                    self.journal.save(data)
                    self._fire(index, step, "after")
                    outcome.applied.append(step.describe())
                except Exception as exc:  # anything, not just our errors: a half-applied host is rolled back
                    if getattr(exc, "unsettled", False):
                        raise  # the step may still be running on the host (an ESXi task past its deadline):
                        # undoing now would race it; the journal stays, as after a crash, for the next run
                    self._undo(data, done, outcome, exc, f"step {index + 1} ({step.describe()}) failed: ")
                if signals.received:
                    self._undo_interrupted(data, done, outcome, signals.received,
                                           f"after step {index + 1} of {len(plan.steps)} ({step.describe()})")
            if verify is not None:
                try:
                    verify()
                except Exception as exc:
                    self._undo(data, done, outcome, exc, "")
                if signals.received:
                    self._undo_interrupted(data, done, outcome, signals.received, "during the verification")
            self.journal.clear()
        return outcome

    def _undo(self, data: dict, done: list[tuple[Step, dict]], outcome: Outcome, exc: Exception,
              prefix: str) -> None:
        err = _as_vgpu_error(exc)
        outcome.rolled_back = self._rollback_journaled(data, done)
        self.journal.clear()
        raise ApplyError(f"{prefix}{err.message}; rolled back {len(outcome.rolled_back)} step(s)",
                         hint=err.hint) from exc

    def _undo_interrupted(self, data: dict, done: list[tuple[Step, dict]], outcome: Outcome, signum: int,
                          where: str) -> None:
        outcome.rolled_back = self._rollback_journaled(data, done)
        self.journal.clear()
        raise InterruptedRun(f"interrupted by {signal.Signals(signum).name} {where}: rolled back "
                             f"{len(outcome.rolled_back)} step(s); the host is as it was before this run", signum)

    def _rollback_journaled(self, data: dict, done: list[tuple[Step, dict]]) -> list[str]:
        """Roll back, first marking the journal so that a crash during the rollback is never taken
        for a run whose steps all completed."""
        data["rolling_back"] = True
        try:
            self.journal.save(data)
        except (VgpuError, OSError):
            # a full or failing disk (often why the step failed): roll back all the same. Each entry was saved
            # before its step ran, so the journal on disk still names every step to undo if this run dies too
            pass
        return self._rollback(done)

    def _rollback(self, done: list[tuple[Step, dict]]) -> list[str]:
        undone, errors = [], []
        for step, info in reversed(done):
            try:
                self.table.undo(step, self.ctx, info)
                undone.append(step.describe())
            except Exception as exc:  # keep going: a partial rollback beats none
                errors.append(f"{step.describe()}: {_as_vgpu_error(exc).message}")
        if errors:
            raise ApplyError("rollback incomplete: " + "; ".join(errors),
                             hint="the host is in a mixed state: run `vgpu status` and fix by hand")
        return undone

    def _fire(self, index: int, step: Step, when: str) -> None:
        if self.hook is not None:
            self.hook(index, step, when)


class _Signals:
    received: int | None = None  # the first SIGINT/SIGTERM/SIGHUP, None while none came
    told = False


@contextlib.contextmanager
def deferred_signals() -> Iterator[_Signals]:
    """Hold SIGINT and SIGTERM while the host is being changed: they are recorded, not raised, so a
    step is never cut in half and the rollback is never abandoned. A repeated signal is ignored with
    one notice (SIGKILL still works: the journal tells the next run what to roll back). SIGHUP (the
    terminal or SSH session went away) likewise, unless it is ignored (nohup: the run goes on). Outside
    the main thread, where handlers cannot be installed, signals behave as usual."""
    state = _Signals()

    def handler(signum, _frame):
        if state.received is None:
            state.received = signum
            note = (f"\nvgpu: {signal.Signals(signum).name} received: finishing the current step, then rolling "
                    "back what this run applied\n")
        elif not state.told:
            state.told = True
            note = ("vgpu: rolling back; interrupting again is ignored until the host is consistent "
                    "(SIGKILL leaves a journal that the next run rolls back)\n")
        else:
            return
        with contextlib.suppress(OSError):
            os.write(2, note.encode())

    try:
        previous = {sig: signal.signal(sig, handler) for sig in interrupt_signals()}
    except ValueError:  # not the main thread
        yield state
        return
    try:
        yield state
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _as_vgpu_error(exc: Exception) -> VgpuError:
    """Our errors as they are; anything else (an OSError, a libvirt error) as one HostError sentence."""
    if isinstance(exc, VgpuError):
        return exc
    return HostError(f"{type(exc).__name__}: {exc}")
