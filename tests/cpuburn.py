"""A CPU-burning process per core beside the tests: the suite must not depend on the machine being idle
(issue 20). ``cpu_burners`` is a fixture for a test that proves a race is closed under load; with
VGPU_TEST_CPU_BURN=1 every test of a session runs beside them (``burn_session``, autouse), e.g.
``VGPU_TEST_CPU_BURN=1 make test-hostile``. Imported by the tiers' conftest files."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest


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
