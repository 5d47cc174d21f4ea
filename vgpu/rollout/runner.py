"""Run a roll-out: wave after wave, each gated on its guests, stopping at the first wave that fails.

A wave's hosts go in one batch (or, when hosts left failed by earlier waves eat into the unavailability budget,
in batches that fit it). A batch is (actions.py runs each phase's playbook):

1. provision: playbooks/provision.yml on the batch's hosts, the profile as ``provision_profile``;
2. guest stack (``--guest-stack``): playbooks/install_guest_stack.yml on their guests;
3. validate: playbooks/validate.yml on their guests (``vgpu validate`` on the controller, reports kept in the
   wave's directory);
4. compare (``--baseline``): the wave's report against the baseline report, guest by guest, with the same
   thresholds as ``vgpu report --compare``.

A host is done when it was provisioned and every one of its guests passed and did not regress; otherwise it
failed, with the reason. The roll-out stops after a wave with a failed host; ``resume`` runs that wave's
unfinished hosts again (the roles are idempotent) and goes on. The record is saved after every change, so a
killed or interrupted roll-out resumes from what it last wrote; hosts it was working on are ``in_progress``.
Whatever ends a run early (a signal, a lost terminal, an error) is recorded before the run exits.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu.errors import ExitCode, InputError, InterruptedRun, RefusedError, VgpuError, interrupt_signals
from vgpu.rollout import waves as W
from vgpu.rollout.actions import Actions
from vgpu.rollout.plan import load_baseline, sha256_of
from vgpu.rollout.state import HostRecord, Rollout, StateDir, WaveRecord, now

class _Stop:
    """A signal between playbooks: remembered and acted on at the next step boundary (a playbook that is running
    handles SIGINT/SIGTERM itself and raises InterruptedRun)."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_Stop":
        if threading.current_thread() is threading.main_thread():
            # SIGHUP (the operator's SSH session went away) only where it would end vgpu: under nohup it stays
            # ignored, as the operator asked (vgpu.errors.interrupt_signals, the rule of every vgpu run).
            self._previous = {s: signal.signal(s, self._handler) for s in interrupt_signals()}
        return self

    def _handler(self, signum, _frame) -> None:
        self.signum = self.signum or signum

    def check(self) -> None:
        if self.signum is not None:
            raise InterruptedRun(f"interrupted by {signal.Signals(self.signum).name} between two steps",
                                 self.signum)

    def __exit__(self, *exc) -> None:
        for s, old in self._previous.items():
            signal.signal(s, old)


@dataclass
class Outcome:
    rollout: Rollout
    exit_code: int


class Runner:
    def __init__(self, store: StateDir, rollout: Rollout, actions: Actions, *, baseline=None,
                 on_change: Callable[[Rollout, str], None] | None = None):
        self.store = store
        self.r = rollout
        self.actions = actions
        self.baseline = baseline
        self.on_change = on_change or (lambda r, note: None)
        self._stop = _Stop()

    def _save(self, note: str = "") -> None:
        self.store.save(self.r)
        self.on_change(self.r, note)

    def run(self, *, skip_failed: bool = False) -> Outcome:
        """Run every wave not yet passed. Refusals (InputError, RefusedError) before the first wave change
        nothing; anything that ends the run later is recorded first, then raised."""
        self._check_inputs()
        if skip_failed:
            self._check_skip()
        resume = f"vgpu rollout resume --state-dir {self.store.path}"
        with self._stop:
            try:
                self.r.state, self.r.reason = "running", None
                left = [w for w in self.r.waves if w.state != "passed"]
                self._save(f"roll-out of {self.r.spec.profile}: {len(left)} of {len(self.r.waves)} waves to run, "
                           f"state in {self.store.path}")
                for wave in self.r.waves:
                    if wave.state == "passed" or self._settled(wave, skip_failed):
                        continue
                    if not self._run_wave(wave, skip_failed):
                        return Outcome(self.r, self._failure_code(wave))
            except InterruptedRun as exc:
                self._record("interrupted", exc.message)
                raise InterruptedRun(exc.message, exc.signum, hint=f"resume: {resume}") from None
            except RefusedError as exc:
                self._record("stopped", exc.message)
                raise
            except VgpuError as exc:  # the playbooks went missing, the state directory filled up, ...
                self._record("interrupted", exc.message)
                exc.hint = (exc.hint + "; then " if exc.hint else "") + f"resume: {resume}"
                raise
            except Exception as exc:  # a bug: still leave a record that says where the run was
                self._record("interrupted", f"internal error: {type(exc).__name__}: {exc}"[:500])
                raise
        failed = [h for h, rec in self.r.hosts.items() if rec.state == "failed"]
        unfinished = [h for h, rec in self.r.hosts.items() if rec.state in ("not_started", "in_progress")]
        self.r.state = "done"
        self.r.reason = (f"{len(failed)} host(s) left failed: {', '.join(failed[:8])}" if failed else None)
        self._save("roll-out done" + (f": {self.r.reason}" if self.r.reason else ""))
        return Outcome(self.r, ExitCode.FAILURE if failed or unfinished else ExitCode.OK)

    def _record(self, state: str, reason: str) -> None:
        self.r.state, self.r.reason = state, reason[:4000]
        try:
            self._save(f"roll-out {state}: {reason}")
        except VgpuError:  # the record cannot be written (the error being reported, perhaps): say the first
            pass

    def _check_inputs(self) -> None:
        """A resume runs what was planned: the inventory and the baseline must be the files the roll-out started
        with (a host moved between groups would change which wave it is in)."""
        spec = self.r.spec
        self._check_inventory()
        if spec.baseline and self.baseline is None:
            self.baseline, sha = load_baseline(Path(spec.baseline))
            if sha != spec.baseline_sha256:
                raise InputError(f"baseline report {spec.baseline} changed since the roll-out started",
                                 hint="restore it, or start a new roll-out with another --state-dir")

    def _check_inventory(self) -> None:
        spec = self.r.spec
        if sha256_of(Path(spec.inventory), "inventory") != spec.inventory_sha256:
            raise InputError(f"inventory {spec.inventory} changed since the roll-out started",
                             hint="restore it, or start a new roll-out with another --state-dir")

    def _check_skip(self) -> None:
        canary = self.r.waves[0]
        bad = [h for h in canary.hosts if self.r.hosts[h].state == "failed"]
        if bad:
            raise RefusedError(f"the canary host {bad[0]} failed: a roll-out does not go past a failed canary",
                               hint="fix it and resume without --skip-failed")

    def _settled(self, wave: WaveRecord, skip_failed: bool) -> bool:
        states = {self.r.hosts[h].state for h in wave.hosts}
        return skip_failed and states <= {"done", "failed"}

    def _failure_code(self, wave: WaveRecord) -> int:
        phases = {self.r.hosts[h].phase for h in wave.hosts if self.r.hosts[h].state == "failed"}
        return ExitCode.APPLY_FAILED if phases & {"provision", "guest-stack"} else ExitCode.FAILURE

    def _run_wave(self, wave: WaveRecord, skip_failed: bool) -> bool:
        self._check_inventory()  # every playbook reads the file again: it must still be the planned one
        pending = [h for h in wave.hosts if self.r.hosts[h].state != "done"
                   and not (skip_failed and self.r.hosts[h].state == "failed")]
        down = sum(1 for h, rec in self.r.hosts.items() if rec.state == "failed" and h not in pending)
        room = self.r.max_unavailable_hosts - down
        if room < 1:
            raise RefusedError(f"{down} host(s) are failed and at most {self.r.max_unavailable_hosts} may be "
                               f"unavailable: {wave.label} would take more down", hint="fix the failed hosts and "
                               "resume them (without --skip-failed), or start again with a larger --max-unavailable")
        self._stop.check()  # a signal after the last wave ended: the next one is not marked started
        wave.state, wave.started, wave.finished, wave.reason = "running", wave.started or now(), None, None
        wave.runs += 1
        wave.reports = {}
        for n, batch in enumerate(W.split(pending, room), start=1):
            self._run_batch(wave, batch, self.store.run_dir(wave.index, wave.runs, n))
            failed = [h for h in batch if self.r.hosts[h].state == "failed"]
            if failed:
                wave.state, wave.finished = "failed", now()
                wave.reason = (f"{len(failed)} of {len(wave.hosts)} host(s) failed: {', '.join(failed[:8])}"
                               + (" ..." if len(failed) > 8 else ""))  # each host's record says why
                self.r.state, self.r.reason = "stopped", f"{wave.label} failed"
                self._save(f"{wave.label} failed")
                return False
        settled_failed = [h for h in wave.hosts if self.r.hosts[h].state == "failed"]
        wave.state, wave.finished = ("failed" if settled_failed else "passed"), now()
        self._save(f"{wave.label} {'settled' if settled_failed else 'passed'}")
        return True

    def _run_batch(self, wave: WaveRecord, batch: list[str], out: Path) -> None:
        self._stop.check()  # before any host of the batch is marked in progress
        recs = {h: self.r.hosts[h] for h in batch}
        for rec in recs.values():
            rec.state, rec.phase, rec.reason, rec.started, rec.finished = "in_progress", "provision", None, now(), None
            rec.attempts, rec.stopped = rec.attempts + 1, None
        self._save(f"{wave.label}: provisioning {', '.join(batch[:6])}" + (" ..." if len(batch) > 6 else ""))
        note = self._note(wave)
        try:
            provisioned = self.actions.provision(batch, out, note)
        except InterruptedRun as exc:
            self._stopped(recs, exc)
            raise
        self._fail(recs, provisioned, wave, "provision")
        wave.reports["provision"] = self._rel(out / "provision.json")
        live = [h for h in batch if recs[h].state == "in_progress"]
        guests = {g: h for h in live for g in recs[h].guests}
        if guests and self.r.spec.guest_stack:
            self._phase(recs, live, "guest-stack", wave)
            self._stop.check()
            for g, why in self.actions.guest_stack(list(guests), out, note).items():
                if why is not None and g in guests:
                    self._fail_host(recs[guests[g]], f"guest {g}: {why}")
            guests = {g: h for g, h in guests.items() if recs[h].state == "in_progress"}
        if guests:
            self._phase(recs, sorted(set(guests.values())), "validate", wave)
            self._stop.check()
            report, error = self.actions.validate(list(guests), out, note)
            if report is not None:
                wave.reports["validate"] = self._rel(out / "validate" / "validation-report.html")
            self._gate_validation(recs, guests, report, error)
            if self.baseline is not None and report is not None:  # failed guests too: by how much, for the record
                self._phase(recs, sorted({h for h in guests.values() if recs[h].state == "in_progress"}), "compare",
                            wave)
                self._gate_comparison(recs, guests, report, out)
                wave.reports["compare"] = self._rel(out / "compare" / "comparison.html")
        for rec in recs.values():
            if rec.state == "in_progress":
                rec.state, rec.finished = "done", now()
        self._save(f"{wave.label}: batch finished")

    @staticmethod
    def _stopped(recs: dict[str, HostRecord], exc: InterruptedRun) -> None:
        """A provision stopped by a signal: each host's outcome as read back from it after the stop (applied,
        rolled back, unknown, not started; vgpu.automation.interrupt). The host stays ``in_progress``: a resume
        provisions it again (the roles are idempotent: an applied host is in sync)."""
        hosts = {h.host: h for h in (exc.result.hosts if exc.result is not None else [])}
        for name, rec in recs.items():
            h = hosts.get(name)
            rec.stopped = h.outcome if h is not None and h.outcome else "unknown"
            why = (h.read_back or {}).get("reason") if h is not None else "the run said nothing about it"
            rec.reason = (f"provision interrupted by {signal.Signals(exc.signum).name}; read back after the stop: "
                          f"{rec.stopped}" + (f" ({why})" if why else ""))[:3000]

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.store.path))

    def _note(self, wave: WaveRecord) -> Callable[[str], None]:
        def note(text: str) -> None:
            self.on_change(self.r, f"{wave.label}: {text}")
        return note

    def _phase(self, recs: dict[str, HostRecord], hosts: list[str], phase: str, wave: WaveRecord) -> None:
        for h in hosts:
            recs[h].phase = phase
        self._save(f"{wave.label}: {phase}")

    def _fail(self, recs: dict[str, HostRecord], results: dict[str, str | None], wave, phase: str) -> None:
        for h, why in results.items():
            if why is not None and h in recs and recs[h].state == "in_progress":
                recs[h].state, recs[h].reason, recs[h].finished = "failed", why[:3000], now()
        self._save(f"{wave.label}: {phase} finished")

    @staticmethod
    def _fail_host(rec: HostRecord, why: str) -> None:
        if rec.state == "in_progress":
            rec.state, rec.reason, rec.finished = "failed", why[:3000], now()
        elif rec.reason and len(rec.reason) < 2000:
            rec.reason += f"; {why}"[:1000]

    def _gate_validation(self, recs, guests: dict[str, str], report, error: str | None) -> None:
        if report is None:
            for h in set(guests.values()):
                self._fail_host(recs[h], f"validation did not run: {error}")
            return
        by_name = {g.name: g for g in report.guests}
        for g, h in guests.items():
            got = by_name.get(g)
            if got is None:
                self._fail_host(recs[h], f"guest {g} is not in the validation report")
            elif got.verdict != "pass":
                self._fail_host(recs[h], f"guest {g}: validation {got.verdict}: {_why(got)}")

    def _gate_comparison(self, recs, guests: dict[str, str], report, out: Path) -> None:
        from vgpu.guest.report import write_files
        from vgpu.guest.report import compare as cmp
        from vgpu.guest.report.model import ValidationReport

        base = ValidationReport(generated=self.baseline.generated, vgpu_version=self.baseline.vgpu_version,
                                guests=[g for g in self.baseline.guests if g.name in guests])
        comp = cmp.compare(base, report, thresholds=self.r.spec.thresholds, baseline_name=str(self.r.spec.baseline),
                           current_name=str(out / "validate"))
        d = out / "compare"
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_files(d, {d / cmp.COMPARE_JSON: cmp.render_json(comp), d / cmp.COMPARE_JUNIT: cmp.render_junit(comp),
                        d / cmp.COMPARE_HTML: cmp.render_html(comp)})
        by_guest: dict[str, list[str]] = {}  # one reason per guest, naming each regressed check once
        for delta in comp.regressions:
            if delta.guest in guests:
                change = "" if delta.relative is None else f" {delta.relative:+.1f}%"
                limit = "" if delta.threshold is None else f" (threshold {delta.threshold:g}%)"
                by_guest.setdefault(delta.guest, []).append(f"{delta.check} {delta.what} {delta.baseline} -> "
                                                            f"{delta.current}{change}{limit}")
        for g, checks in by_guest.items():
            self._fail_host(recs[guests[g]], f"guest {g} regressed: {', '.join(checks)}")


def _why(guest) -> str:
    bad = [c for c in guest.checks if c.status in ("fail", "error")]
    if bad:
        first = bad[0]
        return f"{', '.join(c.name for c in bad)} (first: {first.detail or first.status})"[:600]
    return (guest.detail or guest.outcome.value)[:600]
