"""Run a roll-out: wave after wave, each gated on its guests, stopping at the first wave that fails.

A wave's hosts go in one batch (or, when hosts left failed by earlier waves eat into the unavailability budget,
in batches that fit it). A batch is:

1. provision: playbooks/provision.yml on the batch's hosts (``--limit``), the profile as ``provision_profile``;
2. guest stack (``--guest-stack``): playbooks/install_guest_stack.yml on their guests;
3. validate: playbooks/validate.yml on their guests (``vgpu validate`` on the controller, reports kept in the
   wave's directory);
4. compare (``--baseline``): the wave's report against the baseline report, guest by guest, with the same
   thresholds as ``vgpu report --compare``.

A host is done when it was provisioned and every one of its guests passed and did not regress; otherwise it
failed, with the reason. The roll-out stops after a wave with a failed host; ``resume`` runs that wave's
unfinished hosts again (the roles are idempotent) and goes on. The record is saved after every change, so a
killed or interrupted roll-out resumes from what it last wrote; hosts it was working on are ``in_progress``.
"""

from __future__ import annotations

import hashlib
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from vgpu import inputs
from vgpu.errors import ExitCode, InputError, InterruptedRun, RefusedError
from vgpu.rollout import waves as W
from vgpu.rollout.state import HostRecord, Rollout, Spec, StateDir, WaveRecord, check_variable, now

HOSTS_PATTERN = "gim_hosts:passthrough_hosts"
GUESTS_PATTERN = "gpu_guests"
HOST_VAR = "vgpu_host"

@dataclass
class Request:
    """What `vgpu rollout run` was asked, before anything is checked."""

    inventory: Path
    profile: str
    guest_profile: str | None = None
    hosts_pattern: str = HOSTS_PATTERN
    guests_pattern: str = GUESTS_PATTERN
    canary: tuple[str, ...] = ()
    serial: tuple[str, ...] = W.DEFAULT_SERIAL
    max_unavailable: str = W.DEFAULT_MAX_UNAVAILABLE
    baseline: Path | None = None
    thresholds: tuple[str, ...] = ()
    guest_stack: bool = False
    extra_vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class Prepared:
    spec: Spec
    plan: W.WavePlan
    baseline: Any = None  # the baseline ValidationReport


def sha256_of(path: Path, kind: str) -> str:
    return hashlib.sha256(inputs.read_input(path, kind)).hexdigest()


def prepare(req: Request) -> Prepared:
    """Check everything a roll-out needs before it changes anything (InputError, exit 5): the profile, the
    inventory (read by Ansible), the canary, the sizes, the baseline report, the thresholds, the variables."""
    from vgpu.automation.inventory import read_inventory
    from vgpu.guest.report import compare as cmp
    from vgpu.profiles import load_profile

    load_profile(req.profile)  # an unknown or invalid profile stops here, not in the first wave
    if req.guest_profile:
        load_profile(req.guest_profile)
    for key, value in req.extra_vars.items():
        try:
            check_variable(key, value)
        except ValueError as exc:
            raise InputError(f"--extra-vars {exc}", hint="--profile, --guest-profile, --hosts and --guests set the "
                             "roll-out's own variables") from None
    serial = tuple(W.check_size(s, "--serial entry") for s in req.serial)
    W.check_size(req.max_unavailable, "--max-unavailable")
    canary = tuple(W.check_name(c, "--canary") for c in req.canary)
    thresholds = cmp.parse_thresholds(req.thresholds)
    inv_sha = sha256_of(req.inventory, "inventory")
    hosts_inv = read_inventory(req.inventory, limit=req.hosts_pattern)
    hosts = [W.check_name(h, "inventory host") for h in hosts_inv.hosts]
    guest_vars = _guests(req.inventory, req.guests_pattern)
    both = sorted(set(hosts) & set(guest_vars))
    if both:
        raise InputError(f"{both[0]} is both a roll-out host ({req.hosts_pattern}) and a guest "
                         f"({req.guests_pattern})", hint="a host and a guest are different inventory entries")
    by_host, warnings = W.guests_by_host(hosts, guest_vars, key=HOST_VAR)
    plan = W.plan_waves(hosts, by_host, canary=canary, serial=serial, max_unavailable=req.max_unavailable)
    plan.warnings[:0] = warnings
    baseline = base_sha = None
    if req.baseline is not None:
        baseline, base_sha = load_baseline(req.baseline)
    spec = Spec(inventory=str(Path(req.inventory).absolute()), inventory_sha256=inv_sha, profile=req.profile,
                guest_profile=req.guest_profile, hosts_pattern=req.hosts_pattern, guests_pattern=req.guests_pattern,
                canary=list(canary), serial=list(serial), max_unavailable=req.max_unavailable,
                baseline=None if req.baseline is None else str(Path(req.baseline).absolute()),
                baseline_sha256=base_sha, thresholds=thresholds, guest_stack=req.guest_stack,
                extra_vars=dict(req.extra_vars))
    return Prepared(spec, plan, baseline)


def _guests(inventory: Path, pattern: str) -> dict[str, dict]:
    from vgpu.automation.inventory import read_inventory

    try:
        inv = read_inventory(inventory, limit=pattern)
    except InputError as exc:
        if "no hosts" in exc.message:  # a fleet whose hosts have no guests yet: gated on provisioning alone
            return {}
        raise
    return {W.check_name(g, "inventory guest"): hv for g, hv in inv.hostvars.items()}


def check_against_inventory(rollout: Rollout) -> None:
    """Before a resume: every recorded host is still one of the inventory's roll-out hosts and every recorded guest
    one of its guests (the file's hash is checked too, by the runner), so a state file cannot send a playbook to
    hosts the roll-out never planned. Raises InputError."""
    from vgpu.automation.inventory import read_inventory

    spec = rollout.spec
    hosts = set(read_inventory(Path(spec.inventory), limit=spec.hosts_pattern).hosts)
    stray = sorted(set(rollout.hosts) - hosts)
    if stray:
        raise InputError(f"roll-out state: host {stray[0]} is not one of the inventory's {spec.hosts_pattern} hosts",
                         hint="the state belongs to another inventory; start a new roll-out")
    guests = set(_guests(Path(spec.inventory), spec.guests_pattern))
    stray = sorted({g for rec in rollout.hosts.values() for g in rec.guests} - guests)
    if stray:
        raise InputError(f"roll-out state: guest {stray[0]} is not one of the inventory's {spec.guests_pattern} "
                         "guests", hint="the state belongs to another inventory; start a new roll-out")


def load_baseline(path: Path):
    """The baseline report and the sha256 of the file it came from (a directory: its report JSON)."""
    from vgpu.guest.report import JSON_NAME
    from vgpu.guest.report import json as json_report

    report = json_report.load(Path(path))
    file = Path(path) / JSON_NAME if Path(path).is_dir() else Path(path)
    return report, sha256_of(file, "report")


def new_rollout(prep: Prepared) -> Rollout:
    stamp = now()
    waves = [WaveRecord(index=w.index, canary=w.canary, hosts=list(w.hosts)) for w in prep.plan.waves]
    hosts = {h: HostRecord(wave=w.index, guests=prep.plan.guests.get(h, [])) for w in prep.plan.waves for h in w.hosts}
    return Rollout(created=stamp, updated=stamp, state="running", spec=prep.spec,
                   max_unavailable_hosts=prep.plan.max_unavailable, waves=waves, hosts=hosts,
                   warnings=list(prep.plan.warnings))


# -- what a batch does: the playbooks ---------------------------------------------------------------------------

class Actions(Protocol):
    def provision(self, hosts: list[str], out: Path, note: Callable[[str], None]) -> dict[str, str | None]:
        """host -> None (provisioned) or why not."""

    def guest_stack(self, guests: list[str], out: Path, note: Callable[[str], None]) -> dict[str, str | None]:
        """guest -> None (installed) or why not."""

    def validate(self, guests: list[str], out: Path, note: Callable[[str], None]) -> tuple[Any, str | None]:
        """The validation report of ``guests`` (None when none was written) and the run's error, if any."""


class PlaybookActions:
    """The collection's playbooks through ansible-runner (vgpu.automation.playbooks), one run per phase."""

    def __init__(self, spec: Spec):
        self.spec = spec

    def _run(self, name: str, targets: list[str], extra: dict[str, Any], out: Path, note):
        import json

        from vgpu.automation.playbooks import run_playbook
        from vgpu.fsutil import atomic_write

        def on_change(tracker) -> None:
            note(f"{name} task: {tracker.task or 'starting'}")

        result = run_playbook(name, Path(self.spec.inventory), limit=",".join(targets),
                              extra_vars={**self.spec.extra_vars, **extra}, on_change=on_change)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / f"{name}.json", json.dumps(result.to_dict(), indent=2) + "\n", 0o600)
        return result

    @staticmethod
    def _per_target(result, targets: list[str], what: str) -> dict[str, str | None]:
        seen = {h.host: h for h in result.hosts}
        out: dict[str, str | None] = {}
        for t in targets:
            h = seen.get(t)
            if h is None:
                out[t] = result.error or f"not in the {what} play (check its hosts pattern)"
            elif h.status in ("failed", "unreachable"):
                out[t] = f"{what}: {h.status} at {h.failed_task or 'a task'}: {h.message or ''}".strip()
            else:
                out[t] = None
        return out

    def provision(self, hosts, out, note):
        result = self._run("provision", hosts, {
            "provision_profile": self.spec.profile, "vgpu_provision_hosts": self.spec.hosts_pattern,
            "vgpu_serial": [len(hosts)], "vgpu_max_fail_percentage": 100}, out, note)
        return self._per_target(result, hosts, "provision")

    def guest_stack(self, guests, out, note):
        result = self._run("install_guest_stack", guests, {"vgpu_guests": self.spec.guests_pattern}, out, note)
        return self._per_target(result, guests, "guest stack")

    def validate(self, guests, out, note):
        from vgpu.guest.report import JSON_NAME
        from vgpu.guest.report import json as json_report

        report_dir = out / "validate"
        if (report_dir / JSON_NAME).exists():
            (report_dir / JSON_NAME).unlink()  # a report left by an earlier attempt is not this run's
        result = self._run("validate", guests, {
            "vgpu_guests": self.spec.guests_pattern, "validate_report_dir": str(report_dir),
            "validate_profile": self.spec.guest_profile or self.spec.profile}, out, note)
        if not (report_dir / JSON_NAME).exists():
            failed = [h for h in result.hosts if h.status in ("failed", "unreachable")]
            why = result.error or (failed[0].message if failed else None) or "the validate play wrote no report"
            return None, why
        return json_report.load(report_dir), None


# -- the run ----------------------------------------------------------------------------------------------------

class _Stop:
    """SIGINT/SIGTERM between playbooks: remembered and acted on at the next step boundary (a playbook that is
    running handles the signal itself and raises InterruptedRun)."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_Stop":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
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
        """Run every wave not yet passed. Raises InterruptedRun after recording where it stopped."""
        self.r.state, self.r.reason = "running", None
        with self._stop:
            try:
                self._check_inputs()
                if skip_failed:
                    self._check_skip()
                left = [w for w in self.r.waves if w.state != "passed"]
                self._save(f"roll-out of {self.r.spec.profile}: {len(left)} of {len(self.r.waves)} waves to run, "
                           f"state in {self.store.path}")
                for wave in self.r.waves:
                    if wave.state == "passed" or self._settled(wave, skip_failed):
                        continue
                    if not self._run_wave(wave, skip_failed):
                        return Outcome(self.r, self._failure_code(wave))
            except InterruptedRun as exc:
                self.r.state, self.r.reason = "interrupted", exc.message
                self._save(f"roll-out interrupted: {exc.message}")
                raise
            except RefusedError as exc:
                self.r.state, self.r.reason = "stopped", exc.message
                self._save(f"roll-out stopped: {exc.message}")
                raise
        failed = [h for h, rec in self.r.hosts.items() if rec.state == "failed"]
        self.r.state = "done"
        self.r.reason = (f"{len(failed)} host(s) left failed: {', '.join(failed[:8])}" if failed else None)
        self._save("roll-out done" + (f": {self.r.reason}" if self.r.reason else ""))
        return Outcome(self.r, ExitCode.FAILURE if failed else ExitCode.OK)

    def _check_inputs(self) -> None:
        """A resume runs what was planned: the inventory and the baseline must be the files the roll-out started
        with (a host moved between groups would change which wave it is in)."""
        spec = self.r.spec
        if sha256_of(Path(spec.inventory), "inventory") != spec.inventory_sha256:
            raise InputError(f"inventory {spec.inventory} changed since the roll-out started",
                             hint="restore it, or start a new roll-out with another --state-dir")
        if spec.baseline and self.baseline is None:
            self.baseline, sha = load_baseline(Path(spec.baseline))
            if sha != spec.baseline_sha256:
                raise InputError(f"baseline report {spec.baseline} changed since the roll-out started",
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
        pending = [h for h in wave.hosts if self.r.hosts[h].state != "done"
                   and not (skip_failed and self.r.hosts[h].state == "failed")]
        down = sum(1 for h, rec in self.r.hosts.items() if rec.state == "failed" and h not in pending)
        room = self.r.max_unavailable_hosts - down
        if room < 1:
            raise RefusedError(f"{down} host(s) are failed and at most {self.r.max_unavailable_hosts} may be "
                               f"unavailable: {wave.label} "
                               "would take more down", hint="fix the failed hosts and resume them (without "
                               "--skip-failed), or start again with a larger --max-unavailable")
        wave.state, wave.started, wave.finished, wave.reason = "running", wave.started or now(), None, None
        wave.runs += 1
        out = self.store.wave_dir(wave.index) / f"run-{wave.runs}"
        for batch in W.split(pending, room):
            self._run_batch(wave, batch, out)
            failed = [h for h in batch if self.r.hosts[h].state == "failed"]
            if failed:
                wave.state, wave.finished = "failed", now()
                wave.reason = (f"{len(failed)} of {len(wave.hosts)} host(s) failed: {', '.join(failed[:8])}"
                               + (" ..." if len(failed) > 8 else ""))  # each host's record says why
                self.r.state = "stopped"
                self.r.reason = f"{wave.label} failed"
                self._save(f"{wave.label} failed")
                return False
        settled_failed = [h for h in wave.hosts if self.r.hosts[h].state == "failed"]
        wave.state, wave.finished = ("failed" if settled_failed else "passed"), now()
        self._save(f"{wave.label} {'settled' if settled_failed else 'passed'}")
        return True

    def _run_batch(self, wave: WaveRecord, batch: list[str], out: Path) -> None:
        recs = {h: self.r.hosts[h] for h in batch}
        for rec in recs.values():
            rec.state, rec.phase, rec.reason, rec.started, rec.finished = "in_progress", "provision", None, now(), None
            rec.attempts += 1
        self._save(f"{wave.label}: provisioning {', '.join(batch[:6])}")
        note = self._note(wave)
        self._stop.check()
        self._fail(recs, self.actions.provision(batch, out, note), wave, "provision")
        wave.reports["provision"] = _rel(out / "provision.json", self.store.path)
        live = [h for h in batch if recs[h].state == "in_progress"]
        guests = {g: h for h in live for g in recs[h].guests}
        if guests and self.r.spec.guest_stack:
            self._phase(recs, live, "guest-stack", wave)
            self._stop.check()
            self._fail_guests(recs, guests, self.actions.guest_stack(list(guests), out, note), "guest stack")
            guests = {g: h for g, h in guests.items() if recs[h].state == "in_progress"}
        if guests:
            self._phase(recs, sorted(set(guests.values())), "validate", wave)
            self._stop.check()
            report, error = self.actions.validate(list(guests), out, note)
            if report is not None:
                wave.reports["validate"] = _rel(out / "validate" / "validation-report.html", self.store.path)
            self._gate_validation(recs, guests, report, error)
            if self.baseline is not None and report is not None:  # failed guests too: by how much, for the record
                self._phase(recs, sorted({h for h in guests.values() if recs[h].state == "in_progress"}), "compare",
                            wave)
                self._gate_comparison(recs, guests, report, out)
                wave.reports["compare"] = _rel(out / "compare" / "comparison.html", self.store.path)
        for rec in recs.values():
            if rec.state == "in_progress":
                rec.state, rec.finished = "done", now()
        self._save(f"{wave.label}: batch finished")

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

    def _fail_guests(self, recs, guests: dict[str, str], results: dict[str, str | None], what: str) -> None:
        for g, why in results.items():
            if why is not None and g in guests:
                self._fail_host(recs[guests[g]], f"guest {g}: {why}")

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
        d.mkdir(parents=True, exist_ok=True)
        write_files(d, {d / cmp.COMPARE_JSON: cmp.render_json(comp), d / cmp.COMPARE_JUNIT: cmp.render_junit(comp),
                        d / cmp.COMPARE_HTML: cmp.render_html(comp)})
        for delta in comp.regressions:
            h = guests.get(delta.guest)
            if h is not None:
                change = "" if delta.relative is None else f" {delta.relative:+.1f}%"
                limit = "" if delta.threshold is None else f" (threshold {delta.threshold:g}%)"
                self._fail_host(recs[h], f"guest {delta.guest}: {delta.check} {delta.what} regressed from "
                                         f"{delta.baseline} to {delta.current}{change}{limit}")


def _why(guest) -> str:
    bad = [c for c in guest.checks if c.status in ("fail", "error")]
    if bad:
        first = bad[0]
        return f"{', '.join(c.name for c in bad)} (first: {first.detail or first.status})"[:600]
    return (guest.detail or guest.outcome.value)[:600]


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))

