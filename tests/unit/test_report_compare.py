"""The before/after comparison's rules, on hand-built reports."""

from __future__ import annotations

import pytest

from vgpu.errors import InputError
from vgpu.guest.agent.result import CheckResult
from vgpu.guest.report.compare import compare, parse_thresholds
from vgpu.guest.report.model import GuestReport, Outcome, ValidationReport


def _report(**guests):
    from vgpu.guest.agent.result import AgentResult
    out = []
    for name, checks in guests.items():
        agent = AgentResult(hostname=name, agent_version="1", started="2026-12-04T00:00:00Z", seconds=1.0,
                            checks=[CheckResult(*c) for c in checks])
        out.append(GuestReport(name=name, address=name, outcome=Outcome.OK, agent=agent))
    return ValidationReport(generated="2026-12-04T00:00:00Z", vgpu_version="t", guests=out)


def test_throughput_down_beyond_threshold_regresses_and_up_improves():
    base = _report(a=[("fp8.hipblaslt", "pass", 1000.0, None, "TFLOPS")], b=[("fp8.hipblaslt", "pass", 1000.0)])
    cur = _report(a=[("fp8.hipblaslt", "pass", 940.0, None, "TFLOPS")], b=[("fp8.hipblaslt", "pass", 1100.0)])
    comp = compare(base, cur)
    verdicts = {d.guest: (d.verdict, d.relative) for d in comp.deltas}
    assert verdicts == {"a": ("regressed", -6.0), "b": ("improved", 10.0)}
    assert comp.exit_code == 1
    assert compare(base, cur, thresholds=parse_thresholds(("fp8=7",))).exit_code == 0


def test_pass_to_fail_regresses_whatever_the_numbers_and_versions_are_only_changed():
    base = _report(a=[("driver.dkms", "pass", "amdgpu/6.12: installed"), ("rocm.version", "pass", "6.4.1")])
    cur = _report(a=[("driver.dkms", "fail", "not installed"), ("rocm.version", "pass", "7.0.0")])
    by_check = {(d.check, d.what): d.verdict for d in compare(base, cur).deltas}
    assert by_check[("driver.dkms", "status")] == "regressed"
    assert by_check[("rocm.version", "measured")] == "changed"


def test_guests_pair_by_name_and_the_unpaired_are_listed():
    comp = compare(_report(a=[], b=[]), _report(b=[], c=[]))
    assert comp.only_baseline == ["a"] and comp.only_current == ["c"] and comp.exit_code == 0


def test_longest_prefix_wins_and_times_are_lower_is_better():
    base = _report(a=[("hip.bandwidth", "pass", 4000.0, None, "GB/s", "", 2.0)])
    cur = _report(a=[("hip.bandwidth", "pass", 3900.0, None, "GB/s", "", 3.0)])
    comp = compare(base, cur, thresholds=parse_thresholds(("hip=1",)))
    verdicts = {d.what: d.verdict for d in comp.deltas}
    assert verdicts == {"measured": "same", "seconds": "regressed"}  # hip.bandwidth=5 beats hip=1; +50% time


@pytest.mark.parametrize("bad", ["fp8", "=3", "fp8=-1", "fp8=nan", "fp8=1e9", "fp8=x"])
def test_malformed_thresholds_are_refused(bad):
    with pytest.raises(InputError):
        parse_thresholds((bad,))
