"""The validation report: per guest, how it was reached and what each agent check found.

Pure data, no I/O. ``ValidationReport.to_dict()`` is the versioned JSON document
(schema ``vgpu.validation-report/v1``, vgpu/schemas/validation-report-v1.json); ``from_dict``
reads one back with one-line ``InputError``s, so ``vgpu report`` can re-render and merge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from vgpu.errors import ExitCode, InputError
from vgpu.guest.agent.result import STATUSES, AgentResult, CheckResult

REPORT_SCHEMA = "vgpu.validation-report/v1"


class Outcome(str, Enum):
    """How far the fan-out got with one guest. Only OK carries agent checks."""

    OK = "ok"
    UNREACHABLE = "unreachable"
    AUTH_FAILED = "auth-failed"
    HOST_KEY_REFUSED = "host-key-refused"
    TIMEOUT = "timeout"
    AGENT_ERROR = "agent-error"

    @property
    def reached(self) -> bool:
        """True when the agent ran (or tried to run) on the guest."""
        return self in (Outcome.OK, Outcome.AGENT_ERROR)


@dataclass(frozen=True)
class Expectation:
    """What the guest was validated against (a summary, not the full agent expectation)."""

    model: str | None = None
    compute: str | None = None
    memory: str | None = None
    is_vf: bool | None = None
    profile: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "compute": self.compute, "memory": self.memory,
                "is_vf": self.is_vf, "profile": self.profile}


@dataclass
class GuestReport:
    name: str
    address: str  # "host:port" or "local:<dir>"; never credentials
    outcome: Outcome
    detail: str = ""
    seconds: float = 0.0
    expectation: Expectation = field(default_factory=Expectation)
    agent: AgentResult | None = None

    @property
    def checks(self) -> list[CheckResult]:
        return list(self.agent.checks) if self.agent else []

    @property
    def verdict(self) -> str:
        """pass: reached and nothing failed; fail: a check failed or errored; error: not validated."""
        if self.outcome is not Outcome.OK:
            return "error"
        bad = any(c.status in ("fail", "error") for c in self.checks)
        return "fail" if bad else "pass"

    def to_dict(self) -> dict[str, Any]:
        agent = None
        if self.agent is not None:
            agent = {k: getattr(self.agent, k) for k in ("hostname", "agent_version", "started", "seconds")}
        return {"name": self.name, "address": self.address, "outcome": self.outcome.value,
                "verdict": self.verdict, "detail": self.detail, "seconds": round(self.seconds, 3),
                "expectation": self.expectation.to_dict(), "agent": agent,
                "checks": [_check_dict(c) for c in self.checks]}


def _finite(v: Any) -> Any:
    """JSON has no NaN or infinity: keep such a measurement as text rather than lose it."""
    return str(v) if isinstance(v, float) and not math.isfinite(v) else v


def _check_dict(c: CheckResult) -> dict[str, Any]:
    return {"name": c.name, "status": c.status, "measured": _finite(c.measured),
            "expected": _finite(c.expected),
            "unit": c.unit, "detail": c.detail, "seconds": c.seconds}


@dataclass
class ValidationReport:
    generated: str  # ISO 8601 UTC
    vgpu_version: str
    guests: list[GuestReport] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        verdicts = [g.verdict for g in self.guests]
        checks = {s: 0 for s in STATUSES}
        for g in self.guests:
            for c in g.checks:
                checks[c.status] += 1
        outcomes = {o.value: sum(g.outcome is o for g in self.guests) for o in Outcome}
        return {"guests": len(self.guests), "passed": verdicts.count("pass"),
                "failed": verdicts.count("fail"), "errors": verdicts.count("error"),
                "outcomes": outcomes, "checks": checks, "not_judged": self.not_judged(), "exit_code": self.exit_code}

    def not_judged(self) -> list[dict[str, str]]:
        """Every check that gave no verdict (status skip), with its reason: what a sign-off must read."""
        return [{"guest": g.name, "check": c.name, "reason": c.detail} for g in self.guests for c in g.checks
                if c.status == "skip"]

    @property
    def exit_code(self) -> int:
        """9 when any guest could not be reached or trusted, 1 when any check failed, else 0.

        An agent that ran but printed garbage counts as a failed validation (1): the guest was
        reachable, its software stack is what is broken.
        """
        if any(not g.outcome.reached for g in self.guests):
            return ExitCode.REMOTE
        if any(g.verdict != "pass" for g in self.guests):
            return ExitCode.FAILURE
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {"schema": REPORT_SCHEMA, "generated": self.generated, "vgpu_version": self.vgpu_version,
                "summary": self.summary(), "guests": [g.to_dict() for g in self.guests]}

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "report") -> "ValidationReport":
        """Read a report back. Raises InputError naming ``source`` and the bad field."""
        if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
            got = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise InputError(f"{source} is not a vgpu validation report (schema {got!r}, "
                             f"expected {REPORT_SCHEMA!r})")
        problems = report_problems(data)
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise InputError(f"{source} is a malformed validation report: {'; '.join(problems[:5])}{more}")
        try:
            guests = [_guest_from_dict(g) for g in data["guests"]]
            return cls(generated=str(data["generated"]), vgpu_version=str(data["vgpu_version"]),
                       guests=guests)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{source} is a malformed validation report: {_describe(exc)}") from exc


_TEXT, _NUMBER, _OBJECT, _LIST = "string", "number", "object", "array"
# field -> (allowed JSON types, required). null is allowed wherever the field is not required.
_TOP = {"generated": ({_TEXT}, True), "vgpu_version": ({_TEXT}, True), "guests": ({_LIST}, True)}
_GUEST = {"name": ({_TEXT}, True), "address": ({_TEXT}, True), "outcome": ({_TEXT}, True),
          "detail": ({_TEXT}, False), "seconds": ({_NUMBER}, False), "expectation": ({_OBJECT}, False),
          "agent": ({_OBJECT}, False), "checks": ({_LIST}, False)}
_AGENT = {"hostname": ({_TEXT}, True), "agent_version": ({_TEXT}, True), "started": ({_TEXT}, True),
          "seconds": ({_NUMBER}, True)}
_EXPECTATION = {"model": ({_TEXT}, False), "compute": ({_TEXT}, False), "memory": ({_TEXT}, False),
                "is_vf": ({"boolean"}, False), "profile": ({_TEXT}, False)}
_CHECK = {"name": ({_TEXT}, True), "status": ({_TEXT}, True), "measured": ({_NUMBER, _TEXT}, False),
          "expected": ({_NUMBER, _TEXT}, False), "unit": ({_TEXT}, False), "detail": ({_TEXT}, False),
          "seconds": ({_NUMBER}, False)}


def report_problems(data: dict[str, Any]) -> list[str]:
    """Every way ``data`` departs from the report's shape, one short phrase each (JSON paths)."""
    problems = _fields(data, _TOP, "")
    for i, g in enumerate(data.get("guests") if isinstance(data.get("guests"), list) else []):
        where = f"guests[{i}]"
        if not isinstance(g, dict):
            problems.append(f"{where}: expected an object, got {_json_type(g)}")
            continue
        problems += _fields(g, _GUEST, where)
        if isinstance(g.get("outcome"), str) and g["outcome"] not in {o.value for o in Outcome}:
            problems.append(f"{where}.outcome: {g['outcome'][:40]!r} is not one of "
                            f"{', '.join(o.value for o in Outcome)}")
        if isinstance(g.get("expectation"), dict):
            problems += _fields(g["expectation"], _EXPECTATION, f"{where}.expectation")
        if isinstance(g.get("agent"), dict):
            problems += _fields(g["agent"], _AGENT, f"{where}.agent")
        for j, c in enumerate(g.get("checks") if isinstance(g.get("checks"), list) else []):
            if not isinstance(c, dict):
                problems.append(f"{where}.checks[{j}]: expected an object, got {_json_type(c)}")
                continue
            problems += _fields(c, _CHECK, f"{where}.checks[{j}]")
            if isinstance(c.get("status"), str) and c["status"] not in STATUSES:
                problems.append(f"{where}.checks[{j}].status: {c['status'][:40]!r} is not one of "
                                f"{', '.join(STATUSES)}")
    return problems


def _fields(obj: dict[str, Any], spec: dict[str, tuple[set[str], bool]], where: str) -> list[str]:
    out = []
    for key, (types, required) in spec.items():
        name = f"{where}.{key}" if where else key
        if obj.get(key) is None:
            if required:
                out.append(f"{name}: missing field {key!r}" if key not in obj else f"{name}: is null")
        elif _json_type(obj[key]) not in types:
            out.append(f"{name}: expected {' or '.join(sorted(types))}, got {_json_type(obj[key])}")
        elif isinstance(obj[key], float) and not math.isfinite(obj[key]):
            # 1e400 parses to inf, NaN/Infinity are accepted by Python's json: no report vgpu writes holds one
            out.append(f"{name}: {obj[key]!r} is not a finite number")
    return out


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return _NUMBER
    return {str: _TEXT, dict: _OBJECT, list: _LIST}.get(type(v), "null" if v is None else type(v).__name__)


def _describe(exc: Exception) -> str:
    return f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)


def _guest_from_dict(g: dict[str, Any]) -> GuestReport:
    exp = g.get("expectation") or {}
    expectation = Expectation(**{k: exp.get(k) for k in ("model", "compute", "memory", "is_vf", "profile")})
    agent = None
    if g.get("agent") is not None:
        a = g["agent"]
        checks = [CheckResult(**{k: c.get(k) for k in ("name", "status", "measured", "expected", "unit")},
                              detail=c.get("detail") or "", seconds=float(c.get("seconds") or 0.0))
                  for c in g.get("checks", [])]
        agent = AgentResult(hostname=str(a["hostname"]), agent_version=str(a["agent_version"]),
                            started=str(a["started"]), seconds=float(a["seconds"]), checks=checks)
    return GuestReport(name=str(g["name"]), address=str(g["address"]), outcome=Outcome(g["outcome"]),
                       detail=str(g.get("detail") or ""), seconds=float(g.get("seconds") or 0.0),
                       expectation=expectation, agent=agent)


def merge(reports: list[ValidationReport], *, generated: str, vgpu_version: str) -> ValidationReport:
    """One report holding every guest; a guest named in several keeps its newest result."""
    latest: dict[str, tuple[str, GuestReport]] = {}
    for rep in reports:
        for g in rep.guests:
            seen = latest.get(g.name)
            if seen is None or rep.generated >= seen[0]:
                latest[g.name] = (rep.generated, g)
    return ValidationReport(generated=generated, vgpu_version=vgpu_version,
                            guests=[g for _, g in latest.values()])
