"""What every tier shares: the signal dispositions vgpu is tested under.

The suite proves vgpu's answer to SIGINT, SIGTERM and SIGHUP as a terminal session delivers them (exit 130 / 143 /
129, a run rolled back...). A test runner started in the background without job control (`make test &` in a
script, `nohup`, some CI agents) hands its children SIGINT and SIGQUIT (and under nohup SIGHUP) *ignored*, and vgpu
rightly keeps an ignored signal ignored (vgpu.errors.interrupt_signals), so those tests would wait on a process
that never stops. The suite therefore starts from the default dispositions, whatever it inherited; a test that
wants `nohup`'s SIG_IGN sets it itself (tests/unit/test_rollout_runner.py)."""
from __future__ import annotations

import signal

DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGQUIT: signal.SIG_DFL,
            signal.SIGHUP: signal.SIG_DFL, signal.SIGTERM: signal.SIG_DFL}


def pytest_configure(config) -> None:
    for sig, default in DEFAULTS.items():
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, default)
