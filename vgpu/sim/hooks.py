"""Test hooks of simulated hosts: a simulated host's target carries them (vgpu.sim.host.SimHost.target),
so they can only ever fire on a simulated host and the production CLI has no trace of them.

VGPU_SIM_KILL_AT=INDEX:before|after SIGKILLs the process at that step; VGPU_SIM_PAUSE_AT=INDEX:before|after
with VGPU_SIM_PAUSE_DIR=DIR writes DIR/ready there and waits (at most 60 s) for DIR/go, so a test can send a
real signal at exactly that point; VGPU_SIM_TRACE=FILE appends "pid index moment" per step.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def step_hook_from_env() -> Callable | None:
    kill, trace = os.environ.get("VGPU_SIM_KILL_AT"), os.environ.get("VGPU_SIM_TRACE")
    pause, pause_dir = os.environ.get("VGPU_SIM_PAUSE_AT"), os.environ.get("VGPU_SIM_PAUSE_DIR")
    if not (kill or trace or (pause and pause_dir)):
        return None

    def at(spec: str | None, i: int, moment: str) -> bool:
        index, _, when = (spec or "").partition(":")
        return bool(spec) and str(i) == index and moment == (when or "before")

    def hook(i, step, moment):
        if trace:
            with open(trace, "a") as fh:
                fh.write(f"{os.getpid()} {i} {moment}\n")
        if pause_dir and at(pause, i, moment):
            Path(pause_dir, "ready").write_text(str(os.getpid()))
            deadline = time.monotonic() + 60
            while not Path(pause_dir, "go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        if at(kill, i, moment):
            os.kill(os.getpid(), signal.SIGKILL)
    return hook
