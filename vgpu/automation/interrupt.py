"""A `vgpu playbook run` (or a roll-out's playbook) stopped by SIGINT, SIGTERM or SIGHUP: one defined outcome per
host, read back from the host after the stop (docs/ansible.md, "Interrupted runs").

The contract. `vgpu provision` on a host defers a stop while a step runs; a stop that reaches it before its run
has been verified rolls every applied step back, one that comes later (or never reaches it: its task had ended)
leaves the verified profile in place. So every host ends either rolled back or applied, never half. After the
run's processes have stopped, vgpu asks each host on which a provision task had started for its state
(`vgpu status --json --wait`, over the same connection the play used) and reports, per host:

- ``applied``: the host records the profile the run applied and is in sync with it;
- ``rolled back``: the host does not record it and no run is left half-done (the run's steps were undone, or its
  provision stopped before the first step);
- ``unknown``: it could not be read back (unreachable, vgpu failed), or a run is still unfinished there; the
  reason says which;
- ``not started``: no provision task had started on it (not read back: the play never changed it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from vgpu.errors import interrupt_signals

GRACE = 60.0  # seconds the plays' processes get to finish after SIGINT/SIGTERM/SIGHUP is passed on
# What the run's processes get for each signal vgpu receives: for SIGHUP (the terminal or SSH session went away)
# SIGTERM, which every vgpu on a host answers by finishing its step and rolling back (an older one would end
# mid-step on SIGHUP): the run stops as it does on SIGTERM.
PASSED_ON = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}
READBACK = Path(__file__).with_name("readback.yml")
APPLIED, ROLLED_BACK, UNKNOWN, NOT_STARTED = "applied", "rolled back", "unknown", "not started"
# How long the read-back's `vgpu status --wait` waits for a vgpu still rolling back on its host (over SSH it is
# not one of vgpu's processes: the module stops it when its controller goes away, vgpu_provision.py).
READBACK_WAIT = 600


class StopOnSignal:
    """SIGINT/SIGTERM/SIGHUP during a run: passed on at once (SIGHUP as SIGTERM) to every process the run has
    started (ansible-playbook, its workers and the modules they run: a `vgpu provision` there finishes its step
    and rolls back, as on a terminal), and again to any it starts later (a module forked as the signal came), each
    process once; the run is cancelled once they have all exited or GRACE seconds have passed (ansible-runner
    then SIGKILLs what is left of ansible-playbook's process group).

    SIGHUP is taken only where it would otherwise end vgpu at once (its default): ignored (nohup) it stays ignored,
    and a caller that handles it itself keeps it (the roll-out lets the running playbook finish, rollout/runner.py)."""

    def __init__(self):
        self.signum: int | None = None
        self.signalled: set[int] = set()
        self.deadline = 0.0
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        """ansible-runner's cancel callback, polled while the play runs."""
        if self.signum is None:
            return False
        return not self._pass_on() or time.monotonic() > self.deadline

    def drain(self) -> None:
        """After the run: wait (within the grace period) for every process of it to finish; a module's process
        outlives ansible-playbook when its worker is gone, and the host is read back only after that."""
        while self.signum is not None and self._pass_on() and time.monotonic() < self.deadline:
            time.sleep(0.1)

    def _pass_on(self) -> set[int]:
        """Signal each living process of the run not signalled yet; those of the run still alive, counting the
        ones signalled earlier that are no longer below vgpu (a module whose worker died is re-parented, and is
        still waiting for its `vgpu provision` to roll back)."""
        current = _descendants(os.getpid())
        for pid in current - self.signalled:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, self.sent)
        self.signalled |= current
        return {pid for pid in self.signalled if _alive(pid)}

    @property
    def sent(self) -> int:
        """The signal the run's processes get for the one vgpu received."""
        return PASSED_ON[self.signum]

    def _handler(self, signum, _frame) -> None:
        if self.signum is None:
            self.signum = signum
            self.deadline = time.monotonic() + GRACE
            self._pass_on()  # now, not at ansible-runner's next poll: the hosts' steps go on meanwhile

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in interrupt_signals()}
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._previous.items():
            signal.signal(s, old)


def outcome_of(item: dict) -> tuple[str, dict]:
    """A host's outcome from what the read-back play returned for it: (outcome, read_back)."""
    target, state = item.get("profile") or None, item.get("state") or "provisioned"
    try:
        doc = json.loads(item.get("stdout") or "")
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "in_sync" not in doc:
        why = " ".join(str(item.get("stderr") or "").split())[-400:] or f"vgpu status exited {item.get('rc')}"
        return UNKNOWN, {"reason": f"could not read the host back: {why}"}
    seen = {"profile": doc.get("profile"), "in_sync": doc.get("in_sync"), "unfinished_run": doc.get("unfinished_run")}
    if doc.get("unfinished_run"):
        return UNKNOWN, {**seen, "reason": str(doc["unfinished_run"])[:400]}
    wanted = doc.get("profile") is None if state == "released" else (doc.get("profile") == target and doc["in_sync"])
    if wanted:
        return APPLIED, {**seen, "reason": None}
    return ROLLED_BACK, {**seen, "reason": None}


class ReadbackTracker:
    """Collects the read-back play's result per host (its last task returns the status and the target)."""

    def __init__(self):
        self.items: dict[str, dict] = {}
        self.unreachable: dict[str, str] = {}

    def __call__(self, event: dict) -> bool:
        kind, data = event.get("event", ""), event.get("event_data") or {}
        res, host = data.get("res") or {}, data.get("host")
        if kind == "runner_on_ok" and host and isinstance(res.get("msg"), dict) and "vgpu_readback" in res["msg"]:
            self.items[host] = res["msg"]["vgpu_readback"]
        elif kind in ("runner_on_unreachable", "runner_on_failed") and host and not data.get("ignore_errors"):
            self.unreachable[host] = " ".join(str(res.get("msg") or "").split())[:400] or kind
        return True


def read_back(hosts: list[str], *, inventory: Path, envvars: dict, extravars: dict, private: Path,
              workdir: str) -> dict[str, tuple]:
    """host -> (outcome, read_back) for ``hosts``, asked over the play's own connection after the stop; run in
    ``workdir``, where the interrupted play ran, so the inventory's relative paths mean the same."""
    import ansible_runner

    if not hosts:
        return {}
    tracker = ReadbackTracker()
    extra = {**extravars, "vgpu_readback_hosts": ",".join(hosts), "provision_readback_wait": READBACK_WAIT}
    ansible_runner.run(private_data_dir=str(private), project_dir=workdir, playbook=str(READBACK),
                       inventory=str(inventory), limit=",".join(hosts), extravars=extra, envvars=envvars, quiet=True,
                       event_handler=tracker, settings={"suppress_ansible_output": True})
    out = {}
    for h in hosts:
        if h in tracker.items:
            out[h] = outcome_of(tracker.items[h])
        else:
            why = tracker.unreachable.get(h, "the read-back play returned nothing for it")
            out[h] = (UNKNOWN, {"reason": f"could not read the host back: {why}"})
    return out


def _stat(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...


def _alive(pid: int) -> bool:
    fields = _stat(str(pid))
    return bool(fields) and fields[0] != "Z"


def _descendants(root: int) -> set[int]:
    """Every living process below ``root`` (children, their children, ...), from /proc; zombies left out."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields and fields[0] != "Z":
                parent[int(entry.name)] = int(fields[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found
