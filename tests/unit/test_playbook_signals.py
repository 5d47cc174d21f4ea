"""Which signals `vgpu playbook run` takes over while a playbook runs (automation/interrupt.StopOnSignal), and what
it passes on: SIGHUP only where it would otherwise end vgpu at once, and as SIGTERM (tests/ansible/test_playbook_cli.py
sends the real signals)."""
from __future__ import annotations

import json
import signal

import pytest

from vgpu.automation import interrupt
from vgpu.automation.interrupt import StopOnSignal as _StopOnSignal
from vgpu.errors import Stopped, install_entry_handlers, interrupt_signals, signal_of


@pytest.fixture
def hup():
    """SIGHUP's disposition put back after the test, whatever it set."""
    before = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, before)


def test_sighup_at_its_default_is_taken_for_the_run_and_given_back(hup):
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    int_before, term_before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with _StopOnSignal() as stop:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            assert signal.getsignal(s) == stop._handler
        signal.raise_signal(signal.SIGHUP)  # remembered, not fatal
        signal.raise_signal(signal.SIGINT)  # the first one counts
        assert (stop.signum, stop.sent) == (signal.SIGHUP, signal.SIGTERM)
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == (int_before, term_before)


@pytest.mark.parametrize("who", ["nohup", "rollout"])
def test_sighup_ignored_or_handled_by_the_caller_is_left_alone(hup, who):
    """nohup: it stays ignored and the playbook runs on; a roll-out (rollout/runner._Stop) lets the running playbook
    finish and stops between steps."""
    theirs = signal.SIG_IGN if who == "nohup" else (lambda signum, frame: None)
    signal.signal(signal.SIGHUP, theirs)
    with _StopOnSignal() as stop:
        assert signal.getsignal(signal.SIGHUP) == theirs
        assert signal.getsignal(signal.SIGTERM) == stop._handler
    assert signal.getsignal(signal.SIGHUP) == theirs and stop.signum is None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_are_passed_on_as_they_came(signum):
    with _StopOnSignal() as stop:
        signal.raise_signal(signum)
    assert (stop.signum, stop.sent) == (signum, signum)


def test_the_entry_handler_stands_in_for_sighups_default(hup):
    """main() installs a handler for SIGTERM and SIGHUP (exit 143/129 wherever they arrive); a run's own handlers
    still take SIGHUP over, as they did at its default, and nohup's SIG_IGN is left alone."""
    term = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        install_entry_handlers()
        assert signal.SIGHUP in interrupt_signals()
        with pytest.raises(Stopped) as got:
            signal.raise_signal(signal.SIGTERM)
        assert signal_of(got.value) == signal.SIGTERM
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        install_entry_handlers()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN and signal.SIGHUP not in interrupt_signals()
    finally:
        signal.signal(signal.SIGTERM, term)


def test_a_keyboard_interrupt_behind_clicks_abort_is_sigint():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("abort") from exc
    except RuntimeError as abort:
        assert signal_of(abort) == signal.SIGINT
    assert signal_of(EOFError()) is None


def status(profile, in_sync=True, unfinished=None) -> str:
    return json.dumps({"profile": profile, "in_sync": in_sync, "unfinished_run": unfinished})


@pytest.mark.parametrize("item, outcome", [
    ({"profile": "mi300x-4vf", "rc": 0, "stdout": status("mi300x-4vf")}, "applied"),
    ({"profile": "mi300x-4vf", "rc": 0, "stdout": status(None)}, "rolled back"),
    ({"profile": "mi300x-4vf", "rc": 1, "stdout": status("mi300x-4vf", False)}, "rolled back"),
    ({"profile": "mi300x-4vf", "rc": 0, "stdout": status("mi300x-1vf")}, "rolled back"),
    ({"profile": "", "state": "released", "rc": 0, "stdout": status(None)}, "applied"),
    ({"profile": "", "state": "released", "rc": 0, "stdout": status("mi300x-4vf")}, "rolled back"),
    ({"profile": "mi300x-4vf", "rc": 1, "stdout": status("mi300x-4vf", False, "an interrupted run stopped")},
     "unknown"),
    ({"profile": "mi300x-4vf", "rc": 7, "stdout": "", "stderr": "error: the host is still locked by vgpu pid 9"},
     "unknown"),
])
def test_a_hosts_outcome_is_what_it_says_when_read_back(item, outcome):
    got, seen = interrupt.outcome_of(item)
    assert got == outcome
    assert (seen["reason"] is not None) == (outcome == "unknown")
    if item["rc"] == 7:
        assert "still locked by vgpu pid 9" in seen["reason"]
