"""The fleet roll-up: what a person looks at first in a report of many guests, drawn rather than listed.

Per model and partition, the distribution across guests of FP8 GEMM TFLOPS, HBM bandwidth and BF16 GEMM TFLOPS
against the threshold, as inline SVG (no scripts, no fonts or images from anywhere): a histogram of how many guests
fall where and, under it, one mark per guest (its status as colour, its name and value as a tooltip), the threshold
a dashed line across both. The slowest guests are named beside each chart, linked to their row in the guests
table. For a comparison (``vgpu report --compare``) the same chart per check shows each paired guest's relative
change, with the regression threshold as the line and the most regressed guests named.

Pure: every function returns markup. Everything a guest controls (names, units, messages) goes through ``esc``:
a report is input from outside, like any other file.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# The measurements charted per model/partition: check name, what a person calls it.
METRICS: tuple[tuple[str, str], ...] = (("fp8.hipblaslt", "FP8 GEMM (hipBLASLt)"),
                                        ("hip.bandwidth", "HBM bandwidth"),
                                        ("bf16.hipblaslt", "BF16 GEMM (hipBLASLt)"))
SLOWEST = 5  # guests named beside each chart
NAME_CHARS = 80  # longer guest names are cut in lists and tooltips (the table has them whole)

# Chart geometry (SVG user units = CSS pixels at 100 %).
WIDTH = 720
LEFT, RIGHT = 28.0, WIDTH - 28.0
HIST_TOP, HIST_H = 24.0, 56.0
STRIP_TOP, STRIP_H = HIST_TOP + HIST_H + 8.0, 64.0
AXIS_Y = STRIP_TOP + STRIP_H + 6.0
HEIGHT = AXIS_Y + 30.0
BINS = 48
MARK_R = 3.0  # a mark's radius in a chart of many guests; fewer guests get bigger marks (mark_radius)
_GOLDEN = 0.6180339887498949

CSS = """
.rollup h3{margin:1.4em 0 .3em}
.charts{display:flex;flex-wrap:wrap;gap:1.2em}
figure.metric{flex:1 1 100%;box-sizing:border-box;margin:0;border:1px solid #d0d7de;border-radius:6px;padding:.5em .8em}
figure.metric .body{display:flex;flex-wrap:wrap;gap:.2em 1.2em;align-items:flex-start}
figure.metric .named{min-width:16em;font-size:.93em}
figure.metric figcaption{margin-bottom:.2em}
figure.metric .stats{color:#57606a}
svg.dist{display:block;max-width:100%;height:auto}
svg.dist .bar{fill:#8c959f}svg.dist .bar.below{fill:#ff8182}
svg.dist .mark{fill-opacity:.7}
svg.dist .mark.pass,svg.dist .mark.improved{fill:#1a7f37}
svg.dist .mark.fail,svg.dist .mark.regressed{fill:#cf222e;fill-opacity:.9}
svg.dist .mark.error{fill:#9a6700}
svg.dist .mark.skip,svg.dist .mark.same,svg.dist .mark.changed{fill:#6e7781}
svg.dist .mark.slowest{stroke:#1f2328;stroke-width:1.5}
svg.dist .threshold{stroke:#1f2328;stroke-width:1.5;stroke-dasharray:5 3}
svg.dist .zero{stroke:#57606a;stroke-width:1}
svg.dist .axis{stroke:#57606a;stroke-width:1}
svg.dist text{font:11px system-ui,sans-serif;fill:#1f2328}
ol.slowest{margin:.2em 0 0 1.2em;padding:0}
.pages>details{border:1px solid #d0d7de;border-radius:6px;padding:.3em .8em;margin:.4em 0}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def short(name: str) -> str:
    """A guest name for a list or a tooltip: at most NAME_CHARS characters."""
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "\u2026"


def number(v: Any) -> float | None:
    """A finite number (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


@dataclass(frozen=True)
class Mark:
    """One guest on a chart."""

    guest: str
    value: float
    status: str  # a check status (pass, fail, error, skip) or a comparison verdict (regressed, improved, ...)
    anchor: str | None = None  # the id of the guest's row in the page, for links


@dataclass(frozen=True)
class Axis:
    """Values lo..hi drawn at x = left..right."""

    lo: float
    hi: float
    left: float = LEFT
    right: float = RIGHT
    step: float = 1.0

    def x(self, value: float) -> float:
        return self.left + (value - self.lo) / (self.hi - self.lo) * (self.right - self.left)

    def ticks(self) -> list[float]:
        n = int(round((self.hi - self.lo) / self.step))
        return [round(self.lo + i * self.step, 10) for i in range(n + 1)]


def nice_step(span: float, target: int = 6) -> float:
    """A step of 1, 2 or 5 times a power of ten that cuts ``span`` into about ``target`` parts."""
    raw = span / target
    power = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        if raw <= m * power:
            return m * power
    return 10.0 * power  # pragma: no cover  (raw <= 10 * power by construction)


def nice_axis(values: Iterable[float], *, floor_zero: bool = True, left: float = LEFT,
              right: float = RIGHT) -> Axis:
    """An axis covering every value with a little room at both ends, on round ticks.

    ``floor_zero``: never below 0 (throughput); off for changes in percent, which can be negative.
    """
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        vals = [0.0, 1.0]
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.05 if hi > lo else max(abs(hi) * 0.05, 1.0)
    lo, hi = lo - pad, hi + pad
    if floor_zero:
        lo = max(lo, 0.0)
    step = nice_step(hi - lo)
    lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    return Axis(lo=lo, hi=hi, left=left, right=right, step=step)


def jitter(k: int) -> float:
    """The k-th mark's height in its band, 0..1: a low-discrepancy sequence, so marks of equal values spread
    evenly instead of hiding each other, and the same report always draws the same picture."""
    return (k * _GOLDEN) % 1.0


def mark_radius(n: int) -> float:
    return 5.0 if n <= 50 else 4.0 if n <= 200 else MARK_R


def histogram(values: Sequence[float], axis: Axis, bins: int = BINS) -> list[int]:
    counts = [0] * bins
    for v in values:
        i = int((v - axis.lo) / (axis.hi - axis.lo) * bins)
        counts[min(max(i, 0), bins - 1)] += 1
    return counts


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.3e}"


def distribution_svg(marks: Sequence[Mark], *, thresholds: Sequence[float] = (), unit: str = "",
                     label: str, higher_is_better: bool = True, floor_zero: bool = True,
                     zero_line: bool = False, slowest: Iterable[Mark] = (), metric: str = "") -> str:
    """A histogram over a strip of one mark per guest, the thresholds as dashed lines, on one value axis."""
    thresholds = sorted({t for t in thresholds if math.isfinite(t)})
    values = [m.value for m in marks]
    axis = nice_axis(values + list(thresholds) + ([0.0] if zero_line else []), floor_zero=floor_zero)
    unit_s = f" {unit}" if unit else ""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dist" role="img" data-metric="{esc(metric)}" '
           f'width="{WIDTH}" height="{HEIGHT:.0f}" viewBox="0 0 {WIDTH} {HEIGHT:.0f}" '
           f'aria-label="{esc(label)}: {len(marks)} guests">']
    # histogram: how many guests fall where; bins wholly on the wrong side of the (single) threshold are red
    counts = histogram(values, axis)
    top = max(counts) if counts and max(counts) else 1
    bin_w = (axis.right - axis.left) / BINS
    limit = thresholds[0] if len(thresholds) == 1 else None
    for i, n in enumerate(counts):
        if not n:
            continue
        lo_v = axis.lo + (axis.hi - axis.lo) * i / BINS
        hi_v = axis.lo + (axis.hi - axis.lo) * (i + 1) / BINS
        below = limit is not None and (hi_v <= limit if higher_is_better else lo_v >= limit)
        h = max(HIST_H * n / top, 1.5)
        out.append(f'<rect class="bar{" below" if below else ""}" x="{axis.left + i * bin_w:.1f}" '
                   f'y="{HIST_TOP + HIST_H - h:.1f}" width="{max(bin_w - 1, 1):.1f}" height="{h:.1f}">'
                   f"<title>{n} guest{'s' if n != 1 else ''}: {_fmt(lo_v)} to {_fmt(hi_v)}{esc(unit_s)}</title>"
                   "</rect>")
    # strip: one mark per guest, spread over the band's height; problems drawn last (on top)
    ranked = sorted(marks, key=lambda m: m.value)
    named = {id(m) for m in slowest}
    r = mark_radius(len(marks))
    placed = [(m, axis.x(m.value), STRIP_TOP + r + jitter(k) * (STRIP_H - 2 * r)) for k, m in enumerate(ranked)]
    order = {"pass": 0, "improved": 0, "same": 1, "changed": 1, "skip": 1, "error": 2, "fail": 3, "regressed": 3}
    placed.sort(key=lambda p: (order.get(p[0].status, 1), id(p[0]) in named))
    for m, x, y in placed:
        cls = f"mark {esc(m.status)}" + (" slowest" if id(m) in named else "")
        out.append(f'<circle class="{cls}" cx="{x:.1f}" cy="{y:.1f}" r="{r:g}">'
                   f"<title>{esc(short(m.guest))}: {_fmt(m.value)}{esc(unit_s)}</title></circle>")
    # axis with round ticks
    out.append(f'<line class="axis" x1="{axis.left:.1f}" x2="{axis.right:.1f}" y1="{AXIS_Y:.1f}" '
               f'y2="{AXIS_Y:.1f}"/>')
    for t in axis.ticks():
        x = axis.x(t)
        out.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{AXIS_Y:.1f}" y2="{AXIS_Y + 4:.1f}"/>'
                   f'<text x="{x:.1f}" y="{AXIS_Y + 16:.1f}" text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<text x="{axis.right:.1f}" y="{AXIS_Y + 28:.1f}" text-anchor="end">{esc(unit)}</text>')
    if zero_line:
        x = axis.x(0.0)
        out.append(f'<line class="zero" x1="{x:.1f}" x2="{x:.1f}" y1="{HIST_TOP:.1f}" y2="{AXIS_Y:.1f}"/>')
    for t in thresholds:
        x = axis.x(t)
        anchor = "end" if x > WIDTH - 120 else "start" if x < 120 else "middle"
        out.append(f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="{HIST_TOP - 6:.1f}" '
                   f'y2="{AXIS_Y:.1f}"><title>threshold {_fmt(t)}{esc(unit_s)}</title></line>'
                   f'<text class="threshold-label" x="{x:.1f}" y="{HIST_TOP - 10:.1f}" '
                   f'text-anchor="{anchor}">threshold {_fmt(t)}{esc(unit_s)}</text>')
    out.append("</svg>")
    return "".join(out)


def _link(m: Mark) -> str:
    name = esc(short(m.guest))
    return f'<a href="#{esc(m.anchor)}">{name}</a>' if m.anchor else name


# -- the validation report ------------------------------------------------------------------------------------


@dataclass
class Series:
    """One metric of one model/partition: a mark per guest that measured it, and the thresholds they met."""

    check: str
    label: str
    unit: str = ""
    marks: list[Mark] = field(default_factory=list)
    thresholds: set[float] = field(default_factory=set)
    guest_thresholds: dict[int, float] = field(default_factory=dict)  # id(mark) -> that guest's threshold

    def slowest(self) -> list[Mark]:
        """The SLOWEST lowest values; in a small group at most half of it (naming all of a group says nothing)."""
        return sorted(self.marks, key=lambda m: m.value)[:named_count(len(self.marks))]


def named_count(n: int) -> int:
    return min(SLOWEST, max(1, n // 2))


def group_label(model: str | None, compute: str | None, memory: str | None) -> str:
    part = "/".join(x for x in (compute, memory) if x)
    return " ".join(x for x in (model or "unknown model", part) if x)


def collect(guests: Sequence[Any], anchors: Sequence[str]) -> dict[str, dict[str, Series]]:
    """{model/partition label: {check: Series}} over the guests that measured a charted metric, largest first."""
    groups: dict[str, dict[str, Series]] = {}
    sizes: dict[str, int] = {}
    for g, anchor in zip(guests, anchors):
        exp = g.expectation
        key = group_label(exp.model, exp.compute, exp.memory)
        sizes[key] = sizes.get(key, 0) + 1
        by_name = {c.name: c for c in g.checks}
        for check, label in METRICS:
            c = by_name.get(check)
            value = number(c.measured) if c is not None else None
            if value is None:
                continue
            series = groups.setdefault(key, {}).setdefault(check, Series(check, label, c.unit or ""))
            mark = Mark(g.name, value, c.status, anchor)
            series.marks.append(mark)
            limit = number(c.expected)
            if limit is not None:
                series.thresholds.add(limit)
                series.guest_thresholds[id(mark)] = limit
    return {k: {c: groups[k][c] for c, _ in METRICS if c in groups[k]}
            for k in sorted(groups, key=lambda k: (-sizes[k], k))}


def _figure(series: Series) -> str:
    values = [m.value for m in series.marks]
    unit_s = f" {series.unit}" if series.unit else ""
    below = sum(1 for m in series.marks
                if id(m) in series.guest_thresholds and m.value < series.guest_thresholds[id(m)])
    stats = (f"{len(values)} guest{'s' if len(values) != 1 else ''} · min {_fmt(min(values))} · median "
             f"{_fmt(statistics.median(values))} · max {_fmt(max(values))}{esc(unit_s)}")
    if series.thresholds:
        stats += f" · <b>{below}</b> below threshold"
    slow = series.slowest()
    items = []
    for m in slow:
        limit = series.guest_thresholds.get(id(m))
        share = f" ({m.value / limit * 100:.0f} % of threshold)" if limit else ""
        items.append(f'<li class="{esc(m.status)}">{_link(m)} {_fmt(m.value)}{esc(unit_s)}{share}</li>')
    svg = distribution_svg(series.marks, thresholds=sorted(series.thresholds), unit=series.unit,
                           label=series.label, slowest=slow, metric=series.check)
    return (f'<figure class="metric" data-metric="{esc(series.check)}"><figcaption><b>{esc(series.label)}</b> '
            f'<code>{esc(series.check)}</code><br><span class="stats">{stats}</span></figcaption>'
            f'<div class="body">{svg}<div class="named">Slowest:<ol class="slowest">{"".join(items)}</ol></div>'
            "</div></figure>")


def validation_rollup(guests: Sequence[Any], anchors: Sequence[str]) -> str:
    """The roll-up section of the validation report: per model/partition the charts and the slowest guests."""
    groups = collect(guests, anchors)
    out = ['<section class="rollup" id="rollup"><h2>Fleet roll-up</h2>']
    if not groups:
        out.append("<p>No guest measured FP8 throughput or HBM bandwidth (workloads skipped, or no guest "
                   "validated): nothing to chart.</p></section>")
        return "".join(out)
    members: dict[str, list[Any]] = {}
    for g in guests:
        exp = g.expectation
        members.setdefault(group_label(exp.model, exp.compute, exp.memory), []).append(g)
    for key, metrics in groups.items():
        gs = members[key]
        verdicts = [g.verdict for g in gs]
        out.append(f'<h3 data-group="{esc(key)}">{esc(key)}: {len(gs)} guest{"s" if len(gs) != 1 else ""} '
                   f'(<span class="pass">{verdicts.count("pass")} passed</span>, '
                   f'<span class="fail">{verdicts.count("fail")} failed</span>, '
                   f'<span class="error">{verdicts.count("error")} not validated</span>)</h3>')
        out.append('<div class="charts">' + "".join(_figure(s) for s in metrics.values()) + "</div>")
    out.append("</section>")
    return "".join(out)


# -- pages: a long table cut into pages, the first open, the rest collapsed ----------------------------------


def paged_table(header: str, rows: Sequence[str], *, page_size: int, what: str,
                title: Callable[[int, int], str] | None = None, open_pages: int = 1) -> str:
    """``rows`` in tables of ``page_size``; with more than one page, each is a <details> (the first
    ``open_pages`` open). Following a link to a row in a closed page opens it (the browser's own behaviour)."""
    if len(rows) <= page_size:
        return f"<table>{header}{''.join(rows)}</table>"
    pages = []
    for n, start in enumerate(range(0, len(rows), page_size)):
        end = min(start + page_size, len(rows))
        name = title(start, end) if title else f"{what} {start + 1}-{end} of {len(rows)}"
        pages.append(f'<details class="page" id="{esc(what)}-page-{n + 1}"{" open" if n < open_pages else ""}>'
                     f"<summary>{esc(name)}</summary><table>{header}{''.join(rows[start:end])}</table></details>")
    return f'<div class="pages">{"".join(pages)}</div>'


# -- the comparison ------------------------------------------------------------------------------------------


def comparison_rollup(deltas: Sequence[Any], *, lower_is_better: Callable[[Any], bool],
                      anchors: dict[str, str] | None = None, order: Sequence[str] = ()) -> str:
    """Per check, the relative change (percent) of every paired guest: a mark each, 0 as a line, the
    regression threshold dashed, the most regressed guests named. ``deltas`` are compare.Delta."""
    by_check: dict[str, list[Any]] = {}
    for d in deltas:
        if d.what == "measured" and d.relative is not None and math.isfinite(d.relative):
            by_check.setdefault(d.check, []).append(d)
    if not by_check:
        return ""
    rank = {c: i for i, c in enumerate(order)}
    checks = sorted(by_check, key=lambda c: (rank.get(c, len(rank)), by_check[c][0].threshold is None, c))
    out = ['<section class="rollup" id="rollup"><h2>Change per guest</h2><div class="charts">']
    for check in checks:
        ds = by_check[check]
        lower = lower_is_better(ds[0])
        marks = [Mark(d.guest, float(d.relative), d.verdict, (anchors or {}).get(d.guest)) for d in ds]
        limit = ds[0].threshold
        line = [] if limit is None else [limit if lower else -limit]
        worst = sorted(marks, key=lambda m: -m.value if lower else m.value)[:named_count(len(marks))]
        worst = [m for m in worst if (m.value > 0 if lower else m.value < 0)]
        regressed = sum(d.verdict == "regressed" for d in ds)
        svg = distribution_svg(marks, thresholds=line, unit="%", label=f"{check}: change per guest",
                               higher_is_better=not lower, floor_zero=False, zero_line=True, slowest=worst,
                               metric=check)
        items = "".join(f'<li class="{esc(m.status)}">{_link(m)} {m.value:+.1f} %</li>' for m in worst)
        judged = "" if limit is None else f" · regression beyond {'+' if lower else '-'}{limit:g} %"
        unit = ds[0].unit
        out.append(f'<figure class="metric" data-metric="{esc(check)}"><figcaption><b>{esc(check)}</b>'
                   f'{f" ({esc(unit)}, lower is better)" if lower else f" ({esc(unit)})" if unit else ""}<br>'
                   f'<span class="stats">{len(ds)} guests · median {statistics.median(m.value for m in marks):+.1f} %'
                   f' · <b>{regressed}</b> regressed{judged}</span></figcaption><div class="body">{svg}'
                   + (f'<div class="named">Most regressed:<ol class="slowest">{items}</ol></div>' if items else "")
                   + "</div></figure>")
    out.append("</div></section>")
    return "".join(out)
