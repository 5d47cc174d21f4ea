"""Which signals `vgpu playbook run` takes over while a playbook runs (automation/playbooks._StopOnSignal), and what
it passes on: SIGHUP only where it would otherwise end vgpu at once, and as SIGTERM (tests/ansible/test_playbook_cli.py
sends the real signals)."""
from __future__ import annotations

import signal

import pytest

from vgpu.automation.playbooks import _StopOnSignal


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
