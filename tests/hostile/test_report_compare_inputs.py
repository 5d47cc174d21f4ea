"""`vgpu report --compare` with hostile reports (issue 20, issue 23): one error line, exit 5, nothing written.

Every number read from outside must be finite, a guest or a check named twice is refused, and a change past
what a float holds (finite inputs) is judged without crashing. The real entry point, in its own process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Watch, assert_refused, vgpu


def check(name: str = "fp8.hipblaslt", measured=1290.0, **kw) -> dict:
    return {"name": name, "status": "pass", "measured": measured, "expected": 1215.0, "unit": "TFLOPS",
            "detail": "", "seconds": 1.0, **kw}


def guest(name: str = "vm1", checks: list | None = None) -> dict:
    return {"name": name, "address": f"{name}:22", "outcome": "ok", "verdict": "pass", "detail": "",
            "seconds": 1.0, "expectation": {"model": "MI300X", "compute": "SPX", "memory": "NPS1", "is_vf": True,
                                            "profile": None},
            "agent": {"hostname": name, "agent_version": "1", "started": "2026-01-01T00:00:00Z", "seconds": 1},
            "checks": [check()] if checks is None else checks}


def write(path: Path, guests: list, raw: str | None = None) -> Path:
    doc = json.dumps({"schema": "vgpu.validation-report/v1", "generated": "2026-01-01T00:00:00Z",
                      "vgpu_version": "0", "guests": guests})
    path.write_text(doc if raw is None else doc.replace('"@RAW@"', raw))
    return path


def compare(tmp_path: Path, base: Path, cur: Path):
    watch = Watch(tmp_path)
    proc = vgpu("report", "--compare", str(base), str(cur), "--report-dir", str(tmp_path / "out"))
    return proc, watch


@pytest.mark.parametrize("raw, where", [
    ("1e400", "guests[0].checks[0].measured: inf is not a finite number"),
    ("-1e400", "guests[0].checks[0].measured: -inf is not a finite number"),
    ("NaN", "it holds NaN, which JSON does not have"),  # refused by the JSON reader already
    ("Infinity", "it holds Infinity, which JSON does not have"),
])
def test_a_number_that_is_not_finite_is_refused_with_one_line(tmp_path, raw, where):
    base = write(tmp_path / "base.json", [guest()])
    cur = write(tmp_path / "cur.json", [guest(checks=[check(measured="@RAW@")])], raw=raw)
    proc, watch = compare(tmp_path, base, cur)
    assert_refused(proc, 5, str(cur), where)
    watch.unchanged()


@pytest.mark.parametrize("field", ["expected", "seconds"])
def test_other_numbers_of_a_check_must_be_finite_too(tmp_path, field):
    base = write(tmp_path / "base.json", [guest()])
    cur = write(tmp_path / "cur.json", [guest(checks=[check(**{field: "@RAW@"})])], raw="1e999")
    proc, watch = compare(tmp_path, base, cur)
    assert_refused(proc, 5, f"checks[0].{field}: inf is not a finite number")
    watch.unchanged()


def test_a_guest_twice_in_one_report_is_refused(tmp_path):
    base = write(tmp_path / "base.json", [guest()])
    cur = write(tmp_path / "cur.json", [guest(checks=[check(measured=1.0)]), guest()])
    proc, watch = compare(tmp_path, base, cur)
    assert_refused(proc, 5, "lists guest 'vm1' twice: refusing to guess which to compare")
    watch.unchanged()


def test_a_check_twice_in_one_guest_is_refused(tmp_path):
    base = write(tmp_path / "base.json", [guest(checks=[check(), check(status="fail", measured=2.0)])])
    cur = write(tmp_path / "cur.json", [guest()])
    proc, watch = compare(tmp_path, base, cur)
    assert_refused(proc, 5, "guest 'vm1' has check 'fp8.hipblaslt' twice")
    watch.unchanged()


@pytest.mark.parametrize("old, new, verdict", [(1e-308, 1e308, "improved"), (5e-324, 1.0, "improved"),
                                               (1e308, -1e308, "regressed")])
def test_a_relative_change_past_what_a_float_holds_is_a_verdict_not_a_crash(tmp_path, old, new, verdict):
    base = write(tmp_path / "base.json", [guest(checks=[check(measured=old)])])
    cur = write(tmp_path / "cur.json", [guest(checks=[check(measured=new)])])
    proc = vgpu("report", "--compare", str(base), str(cur), "--report-dir", str(tmp_path / "out"))
    assert proc.returncode == (1 if verdict == "regressed" else 0), proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads((tmp_path / "out" / "comparison.json").read_text())
    [d] = [d for d in doc["deltas"] if d["what"] == "measured"]
    assert d["verdict"] == verdict and d["relative_percent"] is None


def test_a_correctness_metric_that_gets_worse_is_a_regression(tmp_path):
    """norm_error four times larger used to be reported as "+300% improved" (issue 23)."""
    verify = {"name": "fp8.hipblaslt.verify", "unit": "norm_error", "expected": 0.01}
    base = write(tmp_path / "base.json", [guest(checks=[check(measured=0.002, **verify)])])
    cur = write(tmp_path / "cur.json", [guest(checks=[check(measured=0.008, **verify)])])
    proc = vgpu("report", "--compare", str(base), str(cur), "--report-dir", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "out" / "comparison.json").read_text())
    [d] = [d for d in doc["deltas"] if d["what"] == "measured"]
    assert (d["verdict"], d["relative_percent"]) == ("regressed", 300.0)
