"""The before/after comparison's rules, on hand-built reports."""

from __future__ import annotations

import pytest

from vgpu.errors import InputError, UsageError
from vgpu.guest.agent.result import CheckResult
from vgpu.guest.report.compare import CHECK_NAMES, DEFAULT_THRESHOLDS, compare, parse_thresholds
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


@pytest.mark.parametrize("unknown", ["fp9=3", "c0=1", "FP8=3", "hip.bandwidthx=1", "fp8.hipblaslt.verify.x=1"])
def test_a_threshold_for_no_known_check_is_a_usage_error_naming_it_and_the_checks(unknown):
    with pytest.raises(UsageError) as caught:
        parse_thresholds(("fp8=3", unknown))  # a good one first: the bad one still stops it all
    assert caught.value.exit_code == 2
    key = unknown.partition("=")[0]
    assert f"no check is named {key!r} or starts with it" in caught.value.message
    assert caught.value.message.endswith("the checks: " + ", ".join(CHECK_NAMES))
    assert "\n" not in caught.value.message and caught.value.hint is None  # one line


def test_every_check_name_and_prefix_of_one_is_accepted():
    prefixes = {n[:k] for n in CHECK_NAMES for k in range(1, len(n) + 1)} | set(DEFAULT_THRESHOLDS)
    limits = parse_thresholds(tuple(f"{p}=7" for p in sorted(prefixes)))
    assert limits == {p: 7.0 for p in prefixes}
    assert parse_thresholds(()) == DEFAULT_THRESHOLDS  # nothing given: the defaults, unchanged


def test_the_known_check_names_are_exactly_those_the_agent_reports():
    """Every name the agent's sources give a check result (result/against/error/skip and the helpers that pass a
    name on, the tuples of names a loop reports): a new or renamed check must be added to CHECK_NAMES."""
    import ast
    from pathlib import Path

    import vgpu.guest.agent as agent

    reporters = {"result", "against", "error", "skip", "_cu_result", "_vram_result"}
    found = set()
    for path in Path(agent.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and getattr(node.func, "id", None) in reporters:
                if isinstance(node.args[0], ast.Constant):
                    found.add(node.args[0].value)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("HIP_CHECKS", "WORKLOAD_NAMES")
                                                      for t in node.targets):
                found |= {e.value for e in node.value.elts}
    assert found == set(CHECK_NAMES)
    assert all(any(n.startswith(p) for n in CHECK_NAMES) for p in DEFAULT_THRESHOLDS)
