"""Builders of validation reports for the report tests (not a test module)."""

from __future__ import annotations

from vgpu.guest.agent.result import AgentResult, CheckResult
from vgpu.guest.report.model import Expectation, GuestReport, Outcome, ValidationReport


def agent(*statuses: str, measured=1300.0, expected=1000.0) -> AgentResult:
    checks = [CheckResult(name=f"check.{i}", status=s, measured=measured, expected=expected, unit="TFLOPS",
                          detail=f"{s} detail", seconds=0.5) for i, s in enumerate(statuses)]
    return AgentResult(hostname="vm", agent_version="0.1.0", started="2025-01-01T00:00:00Z", seconds=2.0,
                       checks=checks)


def guest(name: str, outcome: Outcome = Outcome.OK, *statuses: str, detail: str = "") -> GuestReport:
    return GuestReport(name=name, address=f"{name}:22", outcome=outcome, detail=detail, seconds=1.25,
                       expectation=Expectation(model="MI300X", compute="SPX", memory="NPS1", is_vf=True),
                       agent=agent(*statuses) if outcome is Outcome.OK else None)


def report(*guests: GuestReport, generated: str = "2025-06-01T12:00:00Z") -> ValidationReport:
    return ValidationReport(generated=generated, vgpu_version="0.1.0", guests=list(guests))


def every_outcome() -> ValidationReport:
    return report(guest("a", Outcome.OK, "pass", "skip"), guest("b", Outcome.OK, "pass", "fail", "error"),
                  *(guest(o.value, o, detail=f"{o.value} happened") for o in Outcome if o is not Outcome.OK))
