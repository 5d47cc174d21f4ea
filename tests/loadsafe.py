"""A suite that does not depend on the machine being idle (issue 20): waiting for events instead of for a time,
and a CPU-burning process per core beside the tests. ``wait_until`` polls a condition with no time budget that
decides an outcome (HANG only catches a hung test); ``cpu_burners`` is a fixture for a test that proves a race is
closed under load; with VGPU_TEST_CPU_BURN=1 every test of a session runs beside them (``burn_session``, autouse),
e.g. ``VGPU_TEST_CPU_BURN=1 make test-hostile``. Imported by the tiers' conftest files."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Hang guards only: a run that is merely slow (a loaded machine) never reaches them; no outcome depends on them.
HANG = 600


def wait_until(done: Callable[[], bool], proc: subprocess.Popen | None = None, what: str = "") -> None:
    """Poll ``done()`` until it holds; a process that exits first fails the test with its output."""
    deadline = time.monotonic() + HANG
    while not done():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"hung: {what}"
        time.sleep(0.05)


def signalled(pause: Path) -> list[str]:
    """The signals a `vgpu provision` paused by the simulator's hook received while it waited (vgpu/sim/hooks.py:
    VGPU_SIM_PAUSE_DIR/signalled), in order."""
    path = pause / "signalled"
    return path.read_text().split() if path.exists() else []


@contextlib.contextmanager
def burning() -> Iterator[list[subprocess.Popen]]:
    """``python -c 'while 1: pass'`` once per core, killed (and reaped) after."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGKILL)
            p.wait()


@pytest.fixture
def cpu_burners() -> Iterator[list[subprocess.Popen]]:
    with burning() as procs:
        yield procs


@pytest.fixture(scope="session", autouse=True)
def burn_session() -> Iterator[None]:
    """VGPU_TEST_CPU_BURN=1: burners for the whole session (one set, started by the first xdist worker only)."""
    first = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    if os.environ.get("VGPU_TEST_CPU_BURN") != "1" or not first:
        yield
        return
    with burning():
        yield
