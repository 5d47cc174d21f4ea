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


def test_longest_prefix_wins_and_a_slower_run_is_shown_not_judged():
    base = _report(a=[("hip.bandwidth", "pass", 4000.0, None, "GB/s", "", 2.0)])
    cur = _report(a=[("hip.bandwidth", "pass", 3900.0, None, "GB/s", "", 3.0)])
    comp = compare(base, cur, thresholds=parse_thresholds(("hip=1",)))
    verdicts = {d.what: d.verdict for d in comp.deltas}
    assert verdicts == {"measured": "same", "seconds": "changed"}  # hip.bandwidth=5 beats hip=1; +50% time
    assert comp.exit_code == 0


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


def test_every_check_name_in_the_agents_sources_is_a_known_check():
    """Every literal name the agent's sources give a check result (result/against/error/skip/unjudged and the
    helpers that pass a name on, the tuples of names a loop reports) is in metrics.CHECKS (= CHECK_NAMES); that
    every known check is reported, with a direction, is test_agent_sim's (the agent completes the list)."""
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
            if isinstance(node, ast.Call) and len(node.args) > 1 and getattr(node.func, "id", None) in (
                    "unjudged", "against") and isinstance(node.args[1], ast.Constant):
                found.add(node.args[1].value)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("HIP_CHECKS", "WORKLOAD_NAMES")
                                                      for t in node.targets):
                found |= {e.value for e in node.value.elts}
    assert found and found <= set(CHECK_NAMES)
    assert all(any(n.startswith(p) for n in CHECK_NAMES) for p in DEFAULT_THRESHOLDS)


@pytest.mark.parametrize("check, unit, old, new, verdict", [
    # issue 23: errors four times larger were "+300% improved"
    ("fp8.hipblaslt.verify", "norm_error", 0.002, 0.008, "regressed"),
    ("fp8.hipblaslt.verify", "norm_error", 0.008, 0.002, "improved"),
    ("fp8.torch.error", "relative error", 0.0017, 0.0068, "regressed"),
    ("fp8.torch.error", "relative error", 0.0068, 0.0017, "improved"),
    ("hip.vector_add", "mismatches", 0, 3, "regressed"),  # from 0: beyond any percentage
    ("fp8.hipblaslt", "TFLOPS", 1290.0, 987.0, "regressed"),
    ("rocminfo.compute_units", "CU", 304, 38, "regressed"),
    # the direction is the check's, not the unit's: a report that calls a throughput "s" cannot flip it
    ("bf16.hipblaslt", "s", 612.0, 300.0, "regressed"),
])
def test_each_metric_is_judged_in_its_own_direction(check, unit, old, new, verdict):
    base = _report(a=[(check, "pass", old, None, unit)])
    cur = _report(a=[(check, "pass", new, None, unit)])
    [d] = [d for d in compare(base, cur).deltas if d.what == "measured"]
    assert d.verdict == verdict


def test_every_known_check_declares_a_direction_and_the_unknown_is_never_judged():
    from vgpu.guest.agent.metrics import CHECKS, DIRECTIONS
    from vgpu.guest.report.compare import direction
    assert {direction(c) for c in CHECKS} <= set(DIRECTIONS)
    assert direction("fp8.hipblaslt.verify") == "lower" and direction("fp8.hipblaslt") == "higher"
    base, cur = _report(a=[("vendor.thing", "pass", 1.0)]), _report(a=[("vendor.thing", "pass", 100.0)])
    assert [d.verdict for d in compare(base, cur).deltas] == ["changed"]


@pytest.mark.parametrize("old, new", [(1e-308, 1e308), (5e-324, 1.0), (-1e308, 1e308), (1e308, -1e308)])
def test_a_change_past_what_a_float_holds_is_judged_by_its_sign_and_stays_finite(old, new):
    import json

    from vgpu.guest.report.compare import render_json
    base = _report(a=[("fp8.hipblaslt", "pass", old, None, "TFLOPS")])
    cur = _report(a=[("fp8.hipblaslt", "pass", new, None, "TFLOPS")])
    comp = compare(base, cur)
    [d] = comp.deltas
    assert d.verdict == ("improved" if new > old else "regressed")
    doc = json.loads(render_json(comp))  # allow_nan=False: would raise on an inf
    assert doc["deltas"][0]["verdict"] == d.verdict


def test_a_guest_or_a_check_twice_in_one_report_is_refused():
    once = _report(a=[("fp8.hipblaslt", "pass", 1.0)])
    twice = ValidationReport(generated="x", vgpu_version="t", guests=once.guests * 2)
    with pytest.raises(InputError, match="current lists guest 'a' twice: refusing to guess"):
        compare(once, twice)
    dup = _report(a=[("fp8.hipblaslt", "pass", 1.0), ("fp8.hipblaslt", "fail", 0.5)])
    with pytest.raises(InputError, match="baseline: guest 'a' has check 'fp8.hipblaslt' twice"):
        compare(dup, once)


def test_run_times_are_shown_never_judged():
    """A GEMM runs about expectation["seconds"] by design, and a compile's or a tool's wall time is the guest's CPU
    and load: a busy host must not fail a healthy guest's roll-out gate."""
    base = _report(a=[("fp8.hipblaslt", "pass", 1290.0, None, "TFLOPS", "", 0.6),
                      ("hip.compile", "pass", "gfx942", None, None, "", 10.0)])
    cur = _report(a=[("fp8.hipblaslt", "pass", 1290.0, None, "TFLOPS", "", 0.9),
                     ("hip.compile", "pass", "gfx942", None, None, "", 20.0)])
    times = {d.check: d.verdict for d in compare(base, cur).deltas if d.what == "seconds"}
    assert times == {"fp8.hipblaslt": "changed", "hip.compile": "changed"}
    assert compare(base, cur).exit_code == 0
