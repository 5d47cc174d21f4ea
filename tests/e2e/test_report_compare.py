"""`vgpu report --compare BASELINE CURRENT` on real reports of simulated guests."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from conftest import run_cli


def test_a_slower_guest_is_a_regression_and_the_rest_is_not(sim, tmp_path):
    host = sim()
    base, cur, out = tmp_path / "before", tmp_path / "after", tmp_path / "cmp"
    run_cli("validate", "--simulate", "--guests", "2", "--report-dir", str(base), sim_dir=host.state_dir, timeout=300)
    run_cli("validate", "--simulate", "--guests", "2", "--scenario", "healthy,slow", "--report-dir", str(cur),
            sim_dir=host.state_dir, timeout=300)
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
        r = run_cli("report", *args, sim_dir=host.state_dir, timeout=30)
        assert r.returncode == 5 and r.stderr.startswith("error:"), (args, r.stderr)
    r = run_cli("report", "--from", str(tmp_path), "--compare", str(tmp_path), str(tmp_path), sim_dir=host.state_dir)
    assert r.returncode == 2
