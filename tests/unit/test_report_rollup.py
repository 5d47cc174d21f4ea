"""The HTML fleet roll-up (vgpu/guest/report/rollup.py): chart geometry, pages, escaping, and the size of a
report of 1,000 guests. The same pages in a real browser: tests/e2e/test_report_browser.py."""

from __future__ import annotations

import html as htmllib
import random
import re
import xml.etree.ElementTree as ET

import pytest

from vgpu.guest.agent.result import AgentResult, CheckResult
from vgpu.guest.report import compare as cmp
from vgpu.guest.report import html, rollup
from vgpu.guest.report.model import Expectation, GuestReport, Outcome, ValidationReport

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = ['</title><script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "<svg onload=alert(1)>",
           "a&b<c>'d'", "\u202eevil"]


def _guest(name: str, fp8: float | None, bw: float | None, *, part=("SPX", "NPS1"), fp8_limit=891.1,
           bw_limit=2650.0, outcome=Outcome.OK) -> GuestReport:
    checks = [CheckResult("rocm.version", "pass", "7.0.2", "7.0.x")]
    if fp8 is not None:
        checks.append(CheckResult("fp8.hipblaslt", "pass" if fp8 >= fp8_limit else "fail", fp8, fp8_limit, "TFLOPS"))
    if bw is not None:
        checks.append(CheckResult("hip.bandwidth", "pass" if bw >= bw_limit else "fail", bw, bw_limit, "GB/s"))
    agent = AgentResult("h", "0.1", "2026-01-01T00:00:00Z", 2.0, checks) if outcome is Outcome.OK else None
    return GuestReport(name, f"{name}:22", outcome, "" if agent else "no answer", 2.0,
                       Expectation("MI300X", part[0], part[1], True), agent)


def _fleet(n: int, seed: int = 7, slow_every: int = 20) -> ValidationReport:
    rnd = random.Random(seed)
    guests = []
    for i in range(n):
        factor = 0.55 if i % slow_every == 3 else 1.0
        guests.append(_guest(f"vm-{i:04d}", round(rnd.gauss(1050, 20) * factor, 1),
                             round(rnd.gauss(4200, 60) * factor, 1)))
    return ValidationReport("2026-12-04T00:00:00Z", "0.1.0", guests)


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, re.S)]


# -- geometry ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[557.3, 1050.0, 1113.0, 891.1], [1050.0], [0.0], [0.001, 0.002],
                                    [2061.0, 4472.0, 2650.0], [-48.8, 3.0, -5.0]])
def test_the_axis_covers_every_value_on_round_ticks(values):
    axis = rollup.nice_axis(values, floor_zero=min(values) >= 0)
    assert axis.lo <= min(values) and axis.hi >= max(values) and axis.hi > axis.lo
    ticks = axis.ticks()
    assert ticks[0] == pytest.approx(axis.lo) and ticks[-1] == pytest.approx(axis.hi) and 3 <= len(ticks) <= 13
    mantissa = axis.step / 10 ** __import__("math").floor(__import__("math").log10(axis.step))
    assert round(mantissa, 6) in (1.0, 2.0, 5.0)
    if min(values) >= 0:
        assert axis.lo >= 0


def test_values_map_linearly_onto_the_plot_width():
    axis = rollup.Axis(lo=400.0, hi=1200.0, left=28.0, right=692.0, step=200.0)
    assert axis.x(400.0) == 28.0 and axis.x(1200.0) == 692.0
    assert axis.x(800.0) == pytest.approx(360.0)
    assert axis.x(891.1) == pytest.approx(28.0 + (891.1 - 400.0) / 800.0 * 664.0)


def test_each_guest_is_one_mark_at_its_value_and_the_threshold_a_line_at_its_own():
    marks = [rollup.Mark(f"g{i}", v, "pass" if v >= 891.1 else "fail") for i, v in
             enumerate([557.3, 1020.0, 1050.0, 1050.0, 1050.0, 1113.0])]
    svg = ET.fromstring(rollup.distribution_svg(marks, thresholds=[891.1], unit="TFLOPS", label="FP8"))
    axis = rollup.nice_axis([m.value for m in marks] + [891.1])
    circles = svg.findall(f"{SVG}circle")
    assert len(circles) == len(marks)
    by_name = {c.find(f"{SVG}title").text.split(":")[0]: c for c in circles}
    for m in marks:
        c = by_name[m.guest]
        assert float(c.get("cx")) == pytest.approx(axis.x(m.value), abs=0.051)
        assert rollup.STRIP_TOP <= float(c.get("cy")) <= rollup.STRIP_TOP + rollup.STRIP_H
        assert m.status in c.get("class").split()
    # equal values are spread over the band's height, not drawn on top of each other
    assert len({by_name[g].get("cy") for g in ("g2", "g3", "g4")}) == 3
    (line,) = [x for x in svg.findall(f"{SVG}line") if x.get("class") == "threshold"]
    assert float(line.get("x1")) == float(line.get("x2")) == pytest.approx(axis.x(891.1), abs=0.051)
    assert float(line.get("y1")) < rollup.HIST_TOP and float(line.get("y2")) >= rollup.STRIP_TOP + rollup.STRIP_H
    assert "threshold 891.1 TFLOPS" in ET.tostring(svg, encoding="unicode")
    bars = [r for r in svg.findall(f"{SVG}rect") if "bar" in r.get("class")]
    counts = [int(r.find(f"{SVG}title").text.split()[0]) for r in bars]
    assert sum(counts) == len(marks) and max(counts) == 3
    tallest = max(bars, key=lambda r: float(r.get("height")))
    assert float(tallest.get("height")) == pytest.approx(rollup.HIST_H)
    # the bin of the slow guest lies wholly below the threshold: drawn as such
    assert [r for r in bars if "below" in r.get("class")] and \
        all(float(r.get("x")) < axis.x(891.1) for r in bars if "below" in r.get("class"))


def test_the_histogram_counts_every_value_once():
    axis = rollup.Axis(0.0, 10.0, step=2.0)
    counts = rollup.histogram([0.0, 0.1, 5.0, 9.99, 10.0], axis, bins=10)
    assert sum(counts) == 5 and counts[0] == 2 and counts[5] == 1 and counts[9] == 2


def test_jitter_is_deterministic_and_inside_the_band():
    seq = [rollup.jitter(k) for k in range(1000)]
    assert seq == [rollup.jitter(k) for k in range(1000)] and all(0 <= v < 1 for v in seq)
    assert len({round(v, 3) for v in seq[:100]}) == 100  # no two of the first 100 marks on the same spot


def test_hostile_guest_names_stay_text_in_the_svg():
    marks = [rollup.Mark(name, 100.0 + i, "fail", anchor=f"row-{i}") for i, name in enumerate(HOSTILE)]
    text = rollup.distribution_svg(marks, thresholds=[200.0], unit="<b>TFLOPS</b>", label="<i>x</i>")
    svg = ET.fromstring(text)  # still well-formed: nothing a guest wrote opened or closed an element
    assert {el.tag for el in svg.iter()} == {f"{SVG}{t}" for t in ("svg", "rect", "title", "circle", "line", "text")}
    titles = {c.find(f"{SVG}title").text for c in svg.findall(f"{SVG}circle")}
    assert titles == {f"{name}: {100 + i} <b>TFLOPS</b>" for i, name in enumerate(HOSTILE)}
    assert "<script" not in text and "<img" not in text and "<b>" not in text and "onload=alert" not in \
        text.replace("&lt;svg onload=alert", "")


# -- the validation report ------------------------------------------------------------------------------------


def test_the_rollup_charts_each_partition_and_names_its_slowest_guests():
    guests = [_guest("a1", 1050.0, 4200.0), _guest("a2", 520.0, 1480.3), _guest("a3", 1010.0, 4300.0),
              _guest("b1", 131.0, 1050.0, part=("CPX", "NPS4"), fp8_limit=111.4, bw_limit=662.5),
              _guest("b2", 140.0, None, part=("CPX", "NPS4"), fp8_limit=111.4),
              _guest("down", None, None, outcome=Outcome.TIMEOUT)]
    page = html.render(ValidationReport("now", "0.1", guests)).decode()
    rollup_part = page[page.index('id="rollup"'):page.index("<h2>Guests</h2>")]
    assert rollup_part.index("MI300X SPX/NPS1: 4 guests") < rollup_part.index("MI300X CPX/NPS4: 2 guests")
    assert "2 passed" in rollup_part and "1 failed" in rollup_part and "1 not validated" in rollup_part
    svgs = _svgs(rollup_part)
    assert [s.get("data-metric") for s in svgs] == ["fp8.hipblaslt", "hip.bandwidth", "fp8.hipblaslt", "hip.bandwidth"]
    assert [len(s.findall(f"{SVG}circle")) for s in svgs] == [3, 3, 2, 1]
    first = rollup_part[: rollup_part.index("</figure>")]
    named = re.findall(r'<li class="(\w+)"><a href="#row-(\w+)">(\w+)</a> ([\d.]+) TFLOPS', first)
    assert named == [("fail", "a2", "a2", "520")]  # of three guests, the slowest one
    fifth = rollup_part[rollup_part.index("MI300X CPX/NPS4"):]
    assert re.findall(r'<a href="#row-(\w+)">', fifth[: fifth.index("</figure>")]) == ["b1"]
    assert "58 % of threshold" in first and "<b>1</b> below threshold" in first
    assert 'id="row-a2"' in page  # what the links point at


def test_a_report_without_measurements_says_so_instead_of_an_empty_chart():
    page = html.render(ValidationReport("now", "0.1", [_guest("x", None, None, outcome=Outcome.UNREACHABLE)])).decode()
    assert "nothing to chart" in page and "<svg" not in page


def test_hostile_names_in_the_whole_page_are_escaped():
    guests = [_guest(name, 500.0 + i, 4000.0) for i, name in enumerate(HOSTILE)]
    page = html.render(ValidationReport("now", "0.1", guests)).decode()
    assert "<script" not in page and "<img" not in page and "<svg onload" not in page
    assert htmllib.escape(HOSTILE[0]) in page
    for ident in re.findall(r'\bid="([^"]*)"', page) + re.findall(r'href="#([^"]*)"', page):
        assert re.fullmatch(r"[A-Za-z0-9_-]+", ident), ident  # ids and links never carry a guest's characters
    ids = re.findall(r'\bid="(row-[^"]*)"', page)
    assert len(ids) == len(set(ids)) == len(HOSTILE)


def test_names_that_clean_to_the_same_id_get_different_ids():
    guests = [_guest(n, 1000.0, 4000.0) for n in ("vm<1>", "vm_1_", "vm>1<")]
    page = html.render(ValidationReport("now", "0.1", guests)).decode()
    assert re.findall(r'id="(row-[^"]*)"', page) == ["row-vm_1_", "row-vm_1_-2", "row-vm_1_-3"]


def test_a_report_of_1000_guests_is_summarised_and_paged():
    rep = _fleet(1000)
    page = html.render(rep).decode()
    assert len(page.encode()) < 1_200_000, len(page)  # measured 0.6 MB; the JSON of the same report is ~3 MB
    svgs = _svgs(page[: page.index("<h2>Guests</h2>")])
    assert [len(s.findall(f"{SVG}circle")) for s in svgs] == [1000, 1000]
    # the roll-up comes before the table, the table before any per-guest section
    assert page.index('id="rollup"') < page.index("<h2>Guests</h2>") < page.index('<details id="guest-')
    pages = re.findall(r'<details class="page" id="guests-page-(\d+)"( open)?><summary>([^<]*)</summary>', page)
    assert [int(p) for p, _, _ in pages] == list(range(1, 11))
    assert [bool(o) for _, o, _ in pages] == [True] + [False] * 9
    assert pages[0][2] == "guests 1-100 of 1000: 50 failed, 50 passed"  # the failed ones first
    rows = re.findall(r'<tr id="row-(vm-\d+)">', page)
    assert sorted(rows) == [f"vm-{i:04d}" for i in range(1000)]
    sections = re.findall(r'<details id="guest-(vm-\d+)"', page)
    assert len(sections) == 50 and all(int(s[3:]) % 20 == 3 for s in sections)
    assert "Check by check: the 50 guests that did not pass. The other 950" in page


def test_at_most_five_guests_are_named_and_at_most_half_of_a_small_group():
    assert [rollup.named_count(n) for n in (1, 2, 3, 4, 6, 10, 11, 1000)] == [1, 1, 1, 2, 3, 5, 5, 5]
    rep = _fleet(200)
    page = html.render(rep).decode()
    first = page[page.index('id="rollup"'):]
    first = first[: first.index("</figure>")]
    names = re.findall(r'<a href="#row-(vm-\d+)">', first)
    values = {g.name: g.checks[1].measured for g in rep.guests}
    assert names == sorted(values, key=values.get)[:5]


def test_paged_table_is_one_table_when_it_fits():
    assert rollup.paged_table("<tr><th>h</th></tr>", ["<tr><td>1</td></tr>"], page_size=2, what="x") == \
        "<table><tr><th>h</th></tr><tr><td>1</td></tr></table>"
    paged = rollup.paged_table("", [f"<tr><td>{i}</td></tr>" for i in range(5)], page_size=2, what="x")
    assert paged.count("<details") == 3 and paged.count(" open>") == 1 and "x 5-5 of 5" in paged


# -- the comparison ---------------------------------------------------------------------------------------------


def test_the_comparison_charts_each_paired_guests_change_against_the_regression_threshold():
    before = ValidationReport("t0", "0.1", [_guest(f"g{i}", 1000.0, 4000.0) for i in range(6)])
    after = ValidationReport("t1", "0.1", [_guest("g0", 500.0, 4000.0), _guest("g1", 940.0, 4100.0),
                                           *[_guest(f"g{i}", 1000.0 + i, 4000.0) for i in range(2, 6)],
                                           _guest(HOSTILE[0], 1.0, 1.0)])
    comp = cmp.compare(before, after)
    page = cmp.render_html(comp).decode()
    assert "<script" not in page and htmllib.escape(HOSTILE[0]) in page
    roll = page[page.index('id="rollup"'):page.index("</section>")]
    svgs = {s.get("data-metric"): s for s in _svgs(roll)}
    assert list(svgs) == ["fp8.hipblaslt", "hip.bandwidth"]
    fp8 = svgs["fp8.hipblaslt"]
    circles = fp8.findall(f"{SVG}circle")
    assert len(circles) == 6
    axis = rollup.nice_axis([-50.0, -6.0, 0.2, 0.3, 0.4, 0.5, -5.0, 0.0], floor_zero=False)
    (line,) = [x for x in fp8.findall(f"{SVG}line") if x.get("class") == "threshold"]
    assert float(line.get("x1")) == pytest.approx(axis.x(-5.0), abs=0.051)
    (zero,) = [x for x in fp8.findall(f"{SVG}line") if x.get("class") == "zero"]
    assert float(zero.get("x1")) == pytest.approx(axis.x(0.0), abs=0.051)
    regressed = [c for c in circles if "regressed" in c.get("class")]
    assert sorted(c.find(f"{SVG}title").text for c in regressed) == ["g0: -50 %", "g1: -6 %"]
    worst = roll[roll.index("Most regressed"):roll.index("</figure>")]
    assert re.findall(r'<a href="#(g\d)">(g\d)</a> ([-+\d.]+) %', worst) == [("g0", "g0", "-50.0"),
                                                                            ("g1", "g1", "-6.0")]


def test_a_comparison_of_1000_guests_is_paged_and_not_a_bar_per_guest():
    before, after = _fleet(1000, seed=1), _fleet(1000, seed=2, slow_every=7)
    page = cmp.render_html(cmp.compare(before, after)).decode()
    assert len(page.encode()) < 1_500_000, len(page)
    svgs = _svgs(page)
    assert [len(s.findall(f"{SVG}circle")) for s in svgs] == [1000, 1000]  # the roll-up only
    pages = re.findall(r'<details class="page" id="values-page-\d+"( open)?><summary>values 1-200 of (\d+): '
                       r'(\d+) regressed', page)
    assert pages and pages[0][0] == " open"
