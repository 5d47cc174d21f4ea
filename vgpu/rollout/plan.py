"""Everything a roll-out checks before it changes anything, and the record it starts from.

``prepare`` reads the inventory through vgpu's one inventory reader (Ansible's own view, group_vars and host_vars
included) and refuses (InputError, exit 5), before a state directory exists: an unknown profile or one given as a
file (each host reads the profile it is given: it must be a shipped name), bad sizes, canaries or variables, a
host that is also a guest, a guest whose ``vgpu_host`` is not a literal host name, a roll-out host with no guest
to validate (its wave would be gated on provisioning alone; ``--allow-unvalidated`` accepts that), and a baseline
that is not a validation report. It records hashes of the inventory file, of the inventory as Ansible resolves
it, and of the baseline, so a resume runs against what was planned.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vgpu import inputs
from vgpu.errors import InputError
from vgpu.rollout import waves as W
from vgpu.rollout.state import HostRecord, Rollout, Spec, WaveRecord, check_variable, now

HOSTS_PATTERN = "gim_hosts:passthrough_hosts"
GUESTS_PATTERN = "gpu_guests"
HOST_VAR = "vgpu_host"
MAX_WARNINGS = 12  # a plan lists at most this many; the rest are counted


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
    allow_unvalidated: bool = False
    extra_vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class Prepared:
    spec: Spec
    plan: W.WavePlan
    baseline: Any = None  # the baseline ValidationReport


@dataclass
class Fleet:
    """The roll-out's hosts (inventory order) and guests as Ansible resolves them, and a hash of that view."""

    hosts: list[str]
    guests: dict[str, dict]
    view_sha256: str


def sha256_of(path: Path, kind: str) -> str:
    return hashlib.sha256(inputs.read_input(path, kind)).hexdigest()


def read_fleet(inventory: Path, hosts_pattern: str, guests_pattern: str) -> Fleet:
    from vgpu.automation.inventory import read_inventory

    inv = read_inventory(inventory, limit=hosts_pattern)
    hosts = [W.check_name(h, "inventory host") for h in inv.hosts]
    try:
        guests_inv = read_inventory(inventory, limit=guests_pattern)
        guests = {W.check_name(g, "inventory guest"): hv for g, hv in guests_inv.hostvars.items()}
    except InputError as exc:
        if not exc.message.startswith(f"inventory {inventory}: no hosts"):
            raise
        guests = {}
    view = json.dumps({"hosts": {h: inv.hostvars[h] for h in hosts}, "guests": guests}, sort_keys=True, default=str)
    return Fleet(hosts, guests, hashlib.sha256(view.encode()).hexdigest())


def prepare(req: Request) -> Prepared:
    """Check everything a roll-out needs before it changes anything, and build its spec and waves."""
    from vgpu.guest.report import compare as cmp
    from vgpu.profiles import _looks_like_path, load_profile

    if _looks_like_path(req.profile) or (req.guest_profile and _looks_like_path(req.guest_profile)):
        raise InputError(f"--profile {req.profile}: a roll-out applies shipped profiles by name (each host reads the "
                         "profile it is given, and a file here is not on the hosts)", hint="vgpu profiles list")
    load_profile(req.profile)  # an unknown or invalid profile stops here, not in the first wave
    if req.guest_profile:
        load_profile(req.guest_profile)
    for key, value in req.extra_vars.items():
        try:
            check_variable(key, value)
        except ValueError as exc:
            raise InputError(f"--extra-vars {exc}", hint="--profile, --guest-profile, --hosts, --guests and "
                             "--baseline set the roll-out's own variables") from None
    serial = tuple(W.check_size(s, "--serial entry") for s in req.serial)
    W.check_size(req.max_unavailable, "--max-unavailable")
    canary = tuple(W.check_name(c, "--canary") for c in req.canary)
    thresholds = cmp.parse_thresholds(req.thresholds)
    inv_sha = sha256_of(req.inventory, "inventory")
    fleet = read_fleet(req.inventory, req.hosts_pattern, req.guests_pattern)
    both = sorted(set(fleet.hosts) & set(fleet.guests))
    if both:
        raise InputError(f"{both[0]} is both a roll-out host ({req.hosts_pattern}) and a guest "
                         f"({req.guests_pattern})", hint="a host and a guest are different inventory entries")
    by_host, notes = W.guests_by_host(fleet.hosts, fleet.guests, key=HOST_VAR)
    plan = W.plan_waves(fleet.hosts, by_host, canary=canary, serial=serial, max_unavailable=req.max_unavailable)
    bare = [h for h in fleet.hosts if not by_host.get(h)]
    if bare and not req.allow_unvalidated:
        raise InputError(f"{len(bare)} of the roll-out's {len(fleet.hosts)} hosts have no guest to validate "
                         f"({', '.join(bare[:5])}{' ...' if len(bare) > 5 else ''}): their waves would be gated on "
                         "provisioning alone", hint=f"give each host's guests (in {req.guests_pattern}) the host "
                         f"variable {HOST_VAR}: HOST, or accept it with --allow-unvalidated")
    baseline = base_sha = None
    if req.baseline is not None:
        baseline, base_sha = load_baseline(req.baseline)
        notes += baseline_notes(baseline, req.baseline)
        known = {g.name for g in baseline.guests}
        unpaired = [g for h in fleet.hosts for g in by_host.get(h, []) if g not in known]
        if unpaired:
            notes.append(f"{len(unpaired)} guest(s) are not in the baseline and are validated but not compared: "
                         + ", ".join(unpaired[:5]) + (" ..." if len(unpaired) > 5 else ""))
    plan.warnings = _collapse(notes + plan.warnings)
    try:
        spec = Spec(inventory=str(Path(req.inventory).absolute()), inventory_sha256=inv_sha,
                    inventory_view_sha256=fleet.view_sha256, profile=req.profile, guest_profile=req.guest_profile,
                    hosts_pattern=req.hosts_pattern, guests_pattern=req.guests_pattern, canary=list(canary),
                    serial=list(serial), max_unavailable=req.max_unavailable,
                    baseline=None if req.baseline is None else str(Path(req.baseline).absolute()),
                    baseline_sha256=base_sha, thresholds=thresholds, guest_stack=req.guest_stack,
                    allow_unvalidated=req.allow_unvalidated, extra_vars=dict(req.extra_vars))
    except ValidationError as exc:
        raise InputError(f"roll-out {inputs.validation_problem(exc, limit=200)}") from None
    return Prepared(spec, plan, baseline)


def _collapse(warnings: list[str]) -> list[str]:
    """At most MAX_WARNINGS lines; similar ones (a capped wave, a guest without a host) once, then counted."""
    out: list[str] = []
    for w in warnings:
        if len(out) < MAX_WARNINGS:
            out.append(w)
    if len(warnings) > len(out):
        out.append(f"... and {len(warnings) - len(out)} more warning(s) like these")
    return out


def check_against_inventory(rollout: Rollout) -> None:
    """Before a resume: the inventory Ansible resolves (the file, its group_vars and host_vars) is the one the
    roll-out was planned on, and every recorded host and guest is in it, so a state file cannot send a playbook
    to hosts the roll-out never planned. Raises InputError."""
    spec = rollout.spec
    fleet = read_fleet(Path(spec.inventory), spec.hosts_pattern, spec.guests_pattern)
    stray = sorted(set(rollout.hosts) - set(fleet.hosts))
    if stray:
        raise InputError(f"roll-out state: host {stray[0]} is not one of the inventory's {spec.hosts_pattern} hosts",
                         hint="the state belongs to another inventory; start a new roll-out")
    stray = sorted({g for rec in rollout.hosts.values() for g in rec.guests} - set(fleet.guests))
    if stray:
        raise InputError(f"roll-out state: guest {stray[0]} is not one of the inventory's {spec.guests_pattern} "
                         "guests", hint="the state belongs to another inventory; start a new roll-out")
    if fleet.view_sha256 != spec.inventory_view_sha256:
        raise InputError(f"inventory {spec.inventory} resolves differently than when the roll-out started (a host or "
                         "guest, a group, or a variable in it or its group_vars/host_vars changed)",
                         hint="restore it, or start a new roll-out with another --state-dir")


def baseline_notes(baseline, path: Path) -> list[str]:
    """What makes a baseline a poor yardstick: no guest of it passed (a wave compared with it "regresses" against
    a broken run, so a broken wave passes), or some did not (those guests are compared with failures)."""
    verdicts = [g.verdict for g in baseline.guests]
    bad = [g.name for g in baseline.guests if g.verdict != "pass"]
    if verdicts and not bad:
        return []
    if len(bad) == len(verdicts):
        return [f"the baseline {path}: none of its {len(verdicts)} guest(s) passed ({verdicts.count('fail')} failed, "
                f"{verdicts.count('error')} not validated): comparing with it cannot show a regression; give a "
                "baseline from a run whose guests passed"]
    return [f"the baseline {path}: {len(bad)} of its {len(verdicts)} guest(s) did not pass ("
            + ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else "") + "): they are compared with a failed run"]


def load_baseline(path: Path):
    """The baseline report and the sha256 of exactly the bytes it was read from (a directory: its report JSON)."""
    from vgpu.guest.report import JSON_NAME
    from vgpu.guest.report.model import ValidationReport

    file = Path(path) / JSON_NAME if Path(path).is_dir() else Path(path)
    raw = inputs.read_input(file, "report")
    data = inputs.parse_json(inputs.decode_text(raw, "report", file), "report", file)
    return ValidationReport.from_dict(data, source=f"report {file}"), hashlib.sha256(raw).hexdigest()


def new_rollout(prep: Prepared) -> Rollout:
    stamp = now()
    waves = [WaveRecord(index=w.index, canary=w.canary, hosts=list(w.hosts)) for w in prep.plan.waves]
    hosts = {h: HostRecord(wave=w.index, guests=prep.plan.guests.get(h, [])) for w in prep.plan.waves for h in w.hosts}
    return Rollout(created=stamp, updated=stamp, state="running", spec=prep.spec,
                   max_unavailable_hosts=prep.plan.max_unavailable, waves=waves, hosts=hosts,
                   warnings=list(prep.plan.warnings))
