"""The suite runs from the default signal dispositions even when started with them ignored (tests/conftest.py):
otherwise the signal tests of every tier hang on a vgpu that keeps an inherited SIG_IGN, as it should."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_test_sees_the_default_dispositions():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
        assert signal.getsignal(sig) == signal.SIG_DFL, sig


def _ignore_like_a_background_job() -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def test_a_suite_started_with_sigint_and_sighup_ignored_still_tests_from_the_defaults(tmp_path):
    here = Path(__file__).relative_to(ROOT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           f"--basetemp={tmp_path / 'inner'}",
                           f"{here}::test_a_test_sees_the_default_dispositions"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=_ignore_like_a_background_job)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
