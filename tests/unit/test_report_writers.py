"""JUnit XML and HTML renderings of a validation report, and writing all three atomically."""

from __future__ import annotations

import re
import stat
import xml.etree.ElementTree as ET

import junitparser
from report_factory import every_outcome, guest, report

from vgpu.guest.agent.result import AgentResult, CheckResult
from vgpu.guest.report import HTML_NAME, JSON_NAME, JUNIT_NAME, html, junit, write_all
from vgpu.guest.report.model import GuestReport, Outcome, ValidationReport



def parse_junit(data: bytes, tmp_path) -> junitparser.JUnitXml:
    path = tmp_path / "j.xml"
    path.write_bytes(data)
    return junitparser.JUnitXml.fromfile(str(path))


def test_junit_has_a_suite_per_guest_and_a_case_per_check(tmp_path):
    rep = every_outcome()
    xml = parse_junit(junit.render(rep), tmp_path)
    suites = {s.name: s for s in xml}
    assert sorted(suites) == sorted(g.name for g in rep.guests)
    b = suites["b"]
    assert (b.tests, b.failures, b.errors, b.skipped) == (3, 1, 1, 0)
    results = {c.name: [type(r).__name__ for r in c.result] for c in b}
    assert results == {"check.0": [], "check.1": ["Failure"], "check.2": ["Error"]}
    assert [type(r).__name__ for c in suites["a"] for r in c.result] == ["Skipped"]


def test_junit_failure_carries_the_detail_and_measured_expected_properties(tmp_path):
    xml = parse_junit(junit.render(report(guest("g", Outcome.OK, "fail"))), tmp_path)
    case = next(iter(next(iter(xml))))
    failure = case.result[0]
    assert failure.message == "fail detail"
    assert "measured: 1300.0 TFLOPS" in failure.text and "expected: 1000.0 TFLOPS" in failure.text
    props = {p.name: p.value for p in case.child(junitparser.Properties)}
    assert props == {"measured": "1300.0", "expected": "1000.0", "unit": "TFLOPS"}


def test_junit_unreached_guest_is_one_error_case_named_after_the_step(tmp_path):
    xml = parse_junit(junit.render(report(guest("k", Outcome.HOST_KEY_REFUSED, detail="key mismatch"))), tmp_path)
    suite = next(iter(xml))
    props = {p.name: p.value for p in suite.properties()}
    assert props["outcome"] == "host-key-refused" and props["verdict"] == "error"
    (case,) = list(suite)
    assert case.name == "host-key"
    assert case.result[0].message == "key mismatch" and case.result[0].type == "host-key-refused"


def test_junit_totals_add_up_over_all_guests(tmp_path):
    root = ET.fromstring(junit.render(every_outcome()))
    assert root.tag == "testsuites"
    for attr in ("tests", "failures", "errors", "skipped"):
        assert int(root.get(attr)) == sum(int(s.get(attr)) for s in root.findall("testsuite"))
    assert root.get("errors") == "6"  # one error check + five unreached guests


def test_junit_stays_well_formed_when_a_guest_prints_control_characters(tmp_path):
    rep = report(guest("g", Outcome.AGENT_ERROR, detail="garbage \x00\x1b[31m\x07 end"))
    xml = parse_junit(junit.render(rep), tmp_path)
    case = next(iter(next(iter(xml))))
    assert case.result[0].message == "garbage ??[31m? end"


def _evil_report() -> ValidationReport:
    check = CheckResult(name="<script>alert(1)</script>", status="fail", measured='"><img src=x>',
                        expected=5, unit="<b>", detail="</td><script>x()</script>")
    agent = AgentResult(hostname="<h1>host</h1>", agent_version="1", started="now", seconds=1.0, checks=[check])
    return report(GuestReport(name="vm<1>", address="a&b:22", outcome=Outcome.OK, agent=agent),
                  guest("t", Outcome.TIMEOUT, detail="<iframe src=http://evil>"))


def test_html_escapes_everything_a_guest_controls():
    page = html.render(_evil_report()).decode()
    assert "<script" not in page and "<img" not in page and "<iframe" not in page and "<h1>host" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "vm&lt;1&gt;" in page and "a&amp;b:22" in page


def test_html_is_self_contained():
    page = html.render(every_outcome()).decode()
    assert not re.search(r"<(script|link|img|iframe)\b", page)
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    assert "@import" not in page and "url(" not in page


def test_html_charts_each_numeric_check_against_its_threshold():
    page = html.render(report(guest("g", Outcome.OK, "pass", "fail"))).decode()
    svg = re.search(r"<svg.*?</svg>", page, re.S).group(0)
    assert svg.count("<rect") == 2 and svg.count("<line") == 2
    assert "threshold 1000 TFLOPS" in svg
    bar = float(re.search(r'<rect x="\d+" y="[\d.]+" width="([\d.]+)"', svg).group(1))
    tick = float(re.search(r'<line x1="([\d.]+)"', svg).group(1))
    assert bar == round(420 * 1300 / (1300 * 1.05), 1)  # measurement is the longest: full scale
    assert tick == round(230 + 420 * 1000 / (1300 * 1.05), 1)


def test_html_has_no_chart_when_no_check_has_numbers():
    g = guest("g", Outcome.OK, "pass")
    g.agent.checks[0].measured, g.agent.checks[0].expected = "gfx942", "gfx942"
    assert "<svg" not in html.render(report(g)).decode()


def test_write_all_writes_three_files_world_readable_without_temp_litter(tmp_path):
    out = tmp_path / "reports"
    paths = write_all(every_outcome(), out)
    assert {p.name for p in paths.values()} == {JSON_NAME, JUNIT_NAME, HTML_NAME}
    assert sorted(p.name for p in out.iterdir()) == sorted([JSON_NAME, JUNIT_NAME, HTML_NAME])
    for p in paths.values():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644


def test_reports_carry_no_credentials_from_the_targets(tmp_path):
    paths = write_all(every_outcome(), tmp_path)
    for p in paths.values():
        text = p.read_text()
        assert "identity" not in text and "id_ed25519" not in text and "password" not in text.lower()


def test_checks_without_a_verdict_are_listed_as_not_judged_in_json_junit_and_html():
    """Issue 23: a PASS is only as good as what was judged; the reports name every check that was not."""
    rep = report(guest("vm-a", Outcome.OK, "pass", "skip"), guest("vm-<b>", Outcome.OK, "skip"))
    rep.guests[0].agent.checks[1].detail = "not judged (optional: profile lab): hipblaslt-bench not found"
    rep.guests[1].agent.checks[0].detail = "hipblaslt-bench not found"
    summary = rep.to_dict()["summary"]
    assert summary["not_judged"] == [
        {"guest": "vm-a", "check": "check.1", "reason": "not judged (optional: profile lab): hipblaslt-bench not found"},
        {"guest": "vm-<b>", "check": "check.0", "reason": "hipblaslt-bench not found"}]
    skipped = [el.get("message") for el in ET.fromstring(junit.render(rep)).iter("skipped")]
    assert skipped == ["not judged (optional: profile lab): hipblaslt-bench not found",
                       "not judged: hipblaslt-bench not found"]
    page = html.render(rep).decode()
    section = page[page.index('<section id="not-judged">'):page.index("</section>")]
    assert "Not judged: 2 check(s)" in section and "vm-&lt;b&gt;" in section and "<b>" not in section
    assert '<section id="not-judged">' not in html.render(report(guest("vm-c", Outcome.OK, "pass"))).decode()
