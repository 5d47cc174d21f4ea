"""`vgpu report --compare BASELINE CURRENT` on real reports of simulated guests."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import run_cli


def test_a_slower_guest_is_a_regression_and_the_rest_is_not(sim, tmp_path):
    host = sim()
    base, cur, out = tmp_path / "before", tmp_path / "after", tmp_path / "cmp"
    run_cli("validate", "--simulate", "--guests", "2", "--report-dir", str(base), sim_dir=host.state_dir, timeout=600)
    run_cli("validate", "--simulate", "--guests", "2", "--scenario", "healthy,slow", "--report-dir", str(cur),
            sim_dir=host.state_dir, timeout=600)
    r = run_cli("report", "--compare", str(base), str(cur), "--report-dir", str(out), sim_dir=host.state_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "regression" in r.stdout
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["schema"] == "vgpu.report-compare/v1" and doc["summary"]["paired"] == 2
    regressed = {(d["guest"], d["check"]) for d in doc["deltas"] if d["verdict"] == "regressed"}
    guests = sorted({d["guest"] for d in doc["deltas"]})
    assert regressed and {g for g, _ in regressed} == {guests[1]}  # only the slow one
    assert any(c.startswith("fp8") for _, c in regressed)
    junit = ET.parse(out / "comparison.junit.xml").getroot()
    assert int(junit.get("failures")) == len([d for d in doc["deltas"] if d["verdict"] == "regressed"])
    page = (out / "comparison.html").read_text()
    assert "<svg" in page and "<script" not in page and "src=" not in page  # offline
    assert not re.search(r'href="(?!#)', page)  # links only within the page (the most regressed guests)

    same = run_cli("report", "--compare", str(base), str(base), sim_dir=host.state_dir)
    assert same.returncode == 0 and "no regression" in same.stdout

    loose = run_cli("report", "--compare", str(base), str(cur), "--threshold", "fp8=99", "--threshold", "bf16=99",
                    "--threshold", "hip.bandwidth=99", sim_dir=host.state_dir)
    lines = [line for line in loose.stdout.splitlines() if "regressed" in line]
    assert lines and not [line for line in lines if "measured" in line]  # only the pass -> fail ones remain


def test_bad_compare_inputs_are_one_line(sim, tmp_path):
    host = sim()
    for args in (["--compare", "/dev/zero", "/dev/zero"], ["--compare", str(tmp_path / "nope"), str(tmp_path)],
                 ["--compare", str(tmp_path), str(tmp_path), "--threshold", "fp8=lots"]):
        r = run_cli("report", *args, sim_dir=host.state_dir, timeout=600)
        assert r.returncode == 5 and r.stderr.startswith("error:"), (args, r.stderr)
    r = run_cli("report", "--from", str(tmp_path), "--compare", str(tmp_path), str(tmp_path), sim_dir=host.state_dir)
    assert r.returncode == 2


def test_a_threshold_for_no_known_check_is_a_usage_error_and_writes_nothing(tmp_path):
    """--threshold with a prefix no check starts with would judge nothing: one line naming it and the checks,
    exit 2, no comparison written; the same command with a known prefix compares and writes (the control)."""
    from vgpu.guest.agent.result import AgentResult, CheckResult
    from vgpu.guest.report import write_all
    from vgpu.guest.report.compare import CHECK_NAMES
    from vgpu.guest.report.model import GuestReport, Outcome, ValidationReport

    for name, tflops in (("before", 1000.0), ("after", 990.0)):
        agent = AgentResult(hostname="vm-1", agent_version="1", started="2026-12-04T00:00:00Z", seconds=1.0,
                            checks=[CheckResult("fp8.hipblaslt", "pass", tflops, 900.0, "TFLOPS")])
        report = ValidationReport(generated="2026-12-04T00:00:00Z", vgpu_version="t",
                                  guests=[GuestReport(name="vm-1", address="vm-1", outcome=Outcome.OK, agent=agent)])
        (tmp_path / name).mkdir()
        write_all(report, tmp_path / name)
    pair = ("--compare", str(tmp_path / "before"), str(tmp_path / "after"))
    for bad in ("fp9=3", "hip.bandwith=2"):
        before = _tree(tmp_path)
        r = run_cli("report", *pair, "--threshold", "fp8=3", "--threshold", bad, "--report-dir",
                    str(tmp_path / "cmp"), sim_dir=tmp_path / "sim")
        assert r.returncode == 2 and r.stdout == "", (bad, r.stdout, r.stderr)
        key = bad.partition("=")[0]
        assert r.stderr == (f"error: --threshold {bad!r}: no check is named {key!r} or starts with it; the checks: "
                            + ", ".join(CHECK_NAMES) + "\n")
        assert _tree(tmp_path) == before  # no report directory, the reports and everything else as they were
    ok = run_cli("report", *pair, "--threshold", "fp8.hip=3", "--report-dir", str(tmp_path / "cmp"),
                 sim_dir=tmp_path / "sim")
    assert ok.returncode == 0 and (tmp_path / "cmp" / "comparison.json").exists(), ok.stdout + ok.stderr
    assert json.loads((tmp_path / "cmp" / "comparison.json").read_text())["thresholds_percent"]["fp8.hip"] == 3


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path below ``root`` with its content (None for a directory)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}
