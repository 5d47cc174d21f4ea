"""Test hooks of simulated hosts: a simulated host's target carries them (vgpu.sim.host.SimHost.target),
so they can only ever fire on a simulated host and the production CLI has no trace of them.

VGPU_SIM_KILL_AT=INDEX:before|after SIGKILLs the process at that step. VGPU_SIM_PAUSE_AT=INDEX:before|after (or
``start``: when the command opens the simulated host, before it plans) with VGPU_SIM_PAUSE_DIR=DIR writes
DIR/ready there and waits for DIR/go, so a test can send a real signal at exactly that point; every SIGINT,
SIGTERM or SIGHUP that reaches the process while it waits is appended to DIR/signalled (its name, one a line)
before vgpu's own handler runs, so the test knows the signal arrived without waiting for any length of time.
VGPU_SIM_PAUSE_ONLY=SIMDIR pauses only the simulated host in SIMDIR (one host of a fleet run).
VGPU_SIM_TRACE=FILE appends "pid index moment" per step.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

# Not a timing assumption: a safety net so that a test that died never leaves a process waiting for ever.
ABANDONED = 3600.0
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _pauses_here(root: Path | None) -> bool:
    only = os.environ.get("VGPU_SIM_PAUSE_ONLY")
    return not only or (root is not None and Path(only).resolve() == Path(root).resolve().parent)


def pause(pause_dir: str) -> None:
    """Write DIR/ready, then wait for DIR/go, noting each signal that arrives meanwhile in DIR/signalled."""
    def noting(old):
        def handler(signum, frame):
            with open(Path(pause_dir, "signalled"), "a") as fh:
                fh.write(signal.Signals(signum).name + "\n")
            if callable(old):
                old(signum, frame)
            elif old == signal.SIG_DFL:  # what the signal would have done: end the process
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
        return handler

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s, old in previous.items():
        if old != signal.SIG_IGN:
            signal.signal(s, noting(old))
    try:
        Path(pause_dir, "ready").write_text(str(os.getpid()))
        deadline = time.monotonic() + ABANDONED
        while not Path(pause_dir, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        for s, old in previous.items():
            if old != signal.SIG_IGN:
                signal.signal(s, old)


def pause_at_start(root: Path | None = None) -> None:
    """VGPU_SIM_PAUSE_AT=start: hold the command when it opens the simulated host (start-up, before planning)."""
    pause_dir = os.environ.get("VGPU_SIM_PAUSE_DIR")
    if os.environ.get("VGPU_SIM_PAUSE_AT") == "start" and pause_dir and _pauses_here(root):
        pause(pause_dir)


def step_hook_from_env(root: Path | None = None) -> Callable | None:
    kill, trace = os.environ.get("VGPU_SIM_KILL_AT"), os.environ.get("VGPU_SIM_TRACE")
    pause_at, pause_dir = os.environ.get("VGPU_SIM_PAUSE_AT"), os.environ.get("VGPU_SIM_PAUSE_DIR")
    if pause_at and not _pauses_here(root):
        pause_at = None
    if not (kill or trace or (pause_at and pause_dir)):
        return None

    def at(spec: str | None, i: int, moment: str) -> bool:
        index, _, when = (spec or "").partition(":")
        return bool(spec) and str(i) == index and moment == (when or "before")

    def hook(i, step, moment):
        if trace:
            with open(trace, "a") as fh:
                fh.write(f"{os.getpid()} {i} {moment}\n")
        if pause_dir and at(pause_at, i, moment):
            pause(pause_dir)
        if at(kill, i, moment):
            os.kill(os.getpid(), signal.SIGKILL)
    return hook
