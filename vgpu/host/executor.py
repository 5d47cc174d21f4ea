"""Applying a Plan safely: host lock, journal, rollback on failure, recovery after a crash.

Before each step the executor journals the step and what its undo needs; after it, that the step
is done. A failing step rolls back every applied step (and the failing one, which may be half
done) in reverse. A run killed mid-way leaves the journal behind: the next run takes the lock,
finds it, rolls it back, and only then plans afresh.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vgpu.errors import ApplyError, HostError, LockedError, VgpuError
from vgpu.host import steps as handlers
from vgpu.host.files import FileStore
from vgpu.model.plan import Plan, Step, step_from_dict

JOURNAL_SCHEMA = "vgpu.journal/v1"


@dataclass
class Outcome:
    applied: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)


@contextlib.contextmanager
def host_lock(state_dir: Path, timeout: float = 30.0) -> Iterator[None]:
    """Exclusive flock on <state>/lock; LockedError naming the holder after ``timeout`` seconds."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
    path = state_dir / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another vgpu run"
                    raise LockedError(f"the host is locked by {holder}",
                                      hint="wait for it to finish; the lock frees itself when that run ends") from exc
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"vgpu pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


class Journal:
    def __init__(self, state_dir: Path):
        self.store = FileStore(state_dir)

    def load(self) -> dict | None:
        text = self.store.read("journal.json")
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise HostError(f"the journal {self.store.path('journal.json')} is corrupt: {exc}",
                            hint="inspect it, then remove it to continue") from exc
        return data if data.get("schema") == JOURNAL_SCHEMA else None

    def save(self, data: dict) -> None:
        self.store.write("journal.json", json.dumps(data, indent=1), 0o600)

    def clear(self) -> None:
        self.store.write("journal.json", None)


StepHook = Callable[[int, Step, str], None]  # (index, step, "before"|"after")


class Executor:
    def __init__(self, ctx: handlers.Context, state_dir: Path, hook: StepHook | None = None):
        self.ctx = ctx
        self.journal = Journal(state_dir)
        self.hook = hook

    def recover(self) -> list[str]:
        """Roll back a run that died mid-way (its journal is still here). Call with the lock held."""
        data = self.journal.load()
        if data is None:
            return []
        self.ctx.baseline = data.get("baseline", {})
        done = [(step_from_dict(e["step"]), e["info"]) for e in data.get("entries", [])]
        undone = self._rollback(done)
        self.journal.clear()
        return undone

    def run(self, plan: Plan, baseline: dict[str, str | None],
            verify: Callable[[], None] | None = None) -> Outcome:
        """Apply every step, then ``verify``; on any failure roll back and raise ApplyError."""
        self.ctx.baseline = dict(baseline)
        data = {"schema": JOURNAL_SCHEMA, "pid": os.getpid(), "profile": plan.profile,
                "baseline": self.ctx.baseline, "entries": []}
        self.journal.save(data)
        outcome, done = Outcome(), []
        for index, step in enumerate(plan.steps):
            try:
                info = handlers.prepare(step, self.ctx)
                data["entries"].append({"step": step.to_dict(), "info": info, "done": False})
                self.journal.save(data)
                self._fire(index, step, "before")
                done.append((step, info))
                handlers.apply(step, self.ctx, info)
                data["entries"][-1]["done"] = True
                self.journal.save(data)
                self._fire(index, step, "after")
                outcome.applied.append(step.describe())
            except VgpuError as exc:
                outcome.rolled_back = self._rollback(done)
                self.journal.clear()
                raise ApplyError(f"step {index + 1} ({step.describe()}) failed: {exc.message}; "
                                 f"rolled back {len(outcome.rolled_back)} step(s)", hint=exc.hint) from exc
        if verify is not None:
            try:
                verify()
            except VgpuError as exc:
                outcome.rolled_back = self._rollback(done)
                self.journal.clear()
                raise ApplyError(f"{exc.message}; rolled back {len(outcome.rolled_back)} step(s)",
                                 hint=exc.hint) from exc
        self.journal.clear()
        return outcome

    def _rollback(self, done: list[tuple[Step, dict]]) -> list[str]:
        undone, errors = [], []
        for step, info in reversed(done):
            try:
                handlers.undo(step, self.ctx, info)
                undone.append(step.describe())
            except VgpuError as exc:  # keep going: a partial rollback beats none
                errors.append(f"{step.describe()}: {exc.message}")
        if errors:
            raise ApplyError("rollback incomplete: " + "; ".join(errors),
                             hint="the host is in a mixed state: run `vgpu status` and fix by hand")
        return undone

    def _fire(self, index: int, step: Step, when: str) -> None:
        if self.hook is not None:
            self.hook(index, step, when)
