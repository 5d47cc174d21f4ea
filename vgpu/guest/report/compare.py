"""Before/after: two validation reports compared guest by guest and check by check (pure).

The comparison a migration needs (ROCm 6.4 -> 7.0, BF16 -> FP8): the same guest's measurements side by
side, with absolute and relative deltas, and a verdict per value against a regression threshold per metric
(defaults below, documented in docs/validate.md, overridable with ``--threshold PREFIX=PERCENT``). Guests pair
by name; the unpaired are listed, never guessed. A check that passed and now fails is a regression whatever
the numbers say. Text values (driver and ROCm versions) are shown as changed, never judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from vgpu.errors import InputError, UsageError
from vgpu.guest.agent.metrics import CHECKS, SECONDS, metric

COMPARE_SCHEMA = "vgpu.report-compare/v1"
# A measurement of a check whose name starts with the prefix regresses when it moves against its direction by
# more than this percentage. The direction is the check's own (vgpu/guest/agent/metrics.py: throughput higher,
# errors and mismatches lower); a check of no known direction is shown as changed, never judged by a guess.
# The longest prefix wins.
DEFAULT_THRESHOLDS: dict[str, float] = {"fp8": 5.0, "bf16": 5.0, "hip.bandwidth": 5.0, "hip.vector_add": 0.0,
                                        "hip.fp8_mfma": 0.0, "rocminfo": 0.0}
# Every check the guest agent reports: a --threshold prefix must start at least one of them, or it would
# silently judge nothing.
CHECK_NAMES = tuple(sorted(CHECKS))
# A check's own run time is shown (for runs of at least MIN_SECONDS), never judged: the wall time of a compile, a
# tool or a workload in a guest depends on the guest's CPUs, its load and the tool's start-up, not on the GPU (the
# sustained GEMMs even run a fixed time by design). What the GPU does is judged on the measured throughput,
# bandwidth and errors above. (Judging times made a roll-out gate fail a healthy guest whose tools ran slower
# because its host was busy.)
MIN_SECONDS = 0.5


@dataclass(frozen=True)
class Delta:
    guest: str
    check: str
    what: str  # "measured" or "seconds" or "status"
    baseline: object
    current: object
    unit: str | None = None
    absolute: float | None = None
    relative: float | None = None  # percent of the baseline
    verdict: str = "same"  # same | improved | regressed | changed | new | gone
    threshold: float | None = None

    def to_dict(self) -> dict:
        return {"guest": self.guest, "check": self.check, "what": self.what, "baseline": self.baseline,
                "current": self.current, "unit": self.unit, "absolute": self.absolute, "relative_percent": self.relative,
                "verdict": self.verdict, "threshold_percent": self.threshold}


@dataclass
class Comparison:
    baseline: str  # where each report came from
    current: str
    deltas: list[Delta] = field(default_factory=list)
    only_baseline: list[str] = field(default_factory=list)  # guests not in the current report
    only_current: list[str] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.verdict == "regressed"]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def to_dict(self) -> dict:
        return {"schema": COMPARE_SCHEMA, "baseline": self.baseline, "current": self.current,
                "thresholds_percent": self.thresholds, "time_threshold_percent": None,  # times are never judged
                "summary": {"paired": len({d.guest for d in self.deltas}), "regressions": len(self.regressions),
                            "improvements": sum(d.verdict == "improved" for d in self.deltas),
                            "only_baseline": len(self.only_baseline), "only_current": len(self.only_current)},
                "only_baseline": self.only_baseline, "only_current": self.only_current,
                "deltas": [d.to_dict() for d in self.deltas]}


def parse_thresholds(items: tuple[str, ...]) -> dict[str, float]:
    """``PREFIX=PERCENT`` overrides on top of the defaults. Raises InputError for a malformed one, UsageError
    (exit 2) for a prefix no check name starts with."""
    out = dict(DEFAULT_THRESHOLDS)
    for item in items:
        prefix, sep, value = item.partition("=")
        try:
            pct = float(value)
        except ValueError:
            pct = -1.0
        if not sep or not prefix or not math.isfinite(pct) or pct < 0 or pct > 1000:
            raise InputError(f"--threshold {item[:60]!r}: expected CHECK-PREFIX=PERCENT, e.g. fp8=3",
                             hint="defaults: " + ", ".join(f"{k}={v:g}" for k, v in DEFAULT_THRESHOLDS.items()))
        if not any(name.startswith(prefix) for name in CHECK_NAMES):
            raise UsageError(f"--threshold {item[:60]!r}: no check is named {prefix[:60]!r} or starts with it; "
                             f"the checks: {', '.join(CHECK_NAMES)}")
        out[prefix] = pct
    return out


def compare(baseline, current, *, thresholds: Mapping[str, float] | None = None, baseline_name: str = "baseline",
            current_name: str = "current") -> Comparison:
    """Compare two ValidationReports. Raises InputError for a report that names a guest, or a check of one
    guest, twice: which of the two to compare would be a guess, and a tampered report could hide a failure."""
    for rep, name in ((baseline, baseline_name), (current, current_name)):
        _refuse_duplicates(rep, name)
    limits = dict(DEFAULT_THRESHOLDS if thresholds is None else thresholds)
    before = {g.name: g for g in baseline.guests}
    after = {g.name: g for g in current.guests}
    result = Comparison(baseline_name, current_name, thresholds=limits,
                        only_baseline=sorted(set(before) - set(after)), only_current=sorted(set(after) - set(before)))
    for name in sorted(set(before) & set(after)):
        old = {c.name: c for c in before[name].checks}
        new = {c.name: c for c in after[name].checks}
        for check in sorted(set(old) | set(new)):
            result.deltas += _check_deltas(name, check, old.get(check), new.get(check), limits)
    return result


def _refuse_duplicates(report, source: str) -> None:
    seen: set[str] = set()
    for g in report.guests:
        if g.name in seen:
            raise InputError(f"{source} lists guest {g.name[:60]!r} twice: refusing to guess which to compare",
                             hint="merge reports with vgpu report --from (the newest result of a guest wins)")
        seen.add(g.name)
        names = [c.name for c in g.checks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InputError(f"{source}: guest {g.name[:60]!r} has check {twice[0][:60]!r} twice: refusing to "
                             "guess which to compare")


def direction(check: str, what: str = "measured") -> str:
    """higher | lower | none for one compared value: the check's own (metrics.py); run time is lower."""
    if what == "seconds":
        return SECONDS.better
    known = metric(check)
    return known.better if known else "none"


def _check_deltas(guest: str, check: str, old, new, limits: Mapping[str, float]) -> list[Delta]:
    if old is None or new is None:
        return [Delta(guest, check, "status", old.status if old else None, new.status if new else None,
                      verdict="new" if old is None else "gone")]
    out = []
    if old.status != new.status:
        bad = new.status in ("fail", "error") and old.status not in ("fail", "error")
        good = old.status in ("fail", "error") and new.status == "pass"
        out.append(Delta(guest, check, "status", old.status, new.status,
                         verdict="regressed" if bad else "improved" if good else "changed"))
    if _number(old.measured) and _number(new.measured):
        better = direction(check)
        limit = _limit(check, limits) if better != "none" else None
        out.append(_numeric(guest, check, "measured", float(old.measured), float(new.measured), new.unit or old.unit,
                            limit, better == "lower"))
    elif old.measured != new.measured and (old.measured is not None or new.measured is not None):
        out.append(Delta(guest, check, "measured", old.measured, new.measured, new.unit or old.unit, verdict="changed"))
    if old.seconds >= MIN_SECONDS or new.seconds >= MIN_SECONDS:
        out.append(_numeric(guest, check, "seconds", old.seconds, new.seconds, "s", None, True))
    return out


def _numeric(guest, check, what, old: float, new: float, unit, limit: float | None, lower_better: bool) -> Delta:
    absolute = _finite_or_none(new - old)  # 1e308 - -1e308 overflows: finite inputs, no finite difference
    relative = None
    if old != 0 and absolute is not None:
        relative = _finite_or_none(absolute / abs(old) * 100.0)  # 1 / 5e-324 overflows too
    verdict = "same" if new == old else "changed"
    if new != old and limit is not None:
        # from 0, or past what a float holds (1 / 5e-324): beyond any finite percentage, the sign decides
        rel = relative if relative is not None else math.copysign(math.inf, new - old)
        worse = rel > limit if lower_better else rel < -limit
        better = rel < -limit if lower_better else rel > limit
        verdict = "regressed" if worse else "improved" if better else "same"
    return Delta(guest, check, what, old, new, unit, None if absolute is None else round(absolute, 6),
                 None if relative is None else round(relative, 3), verdict, limit)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _limit(check: str, limits: Mapping[str, float]) -> float | None:
    prefixes = [p for p in limits if check == p or check.startswith(p + ".") or check.startswith(p)]
    return limits[max(prefixes, key=len)] if prefixes else None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- rendering: JSON, JUnit XML, a self-contained HTML page ------------------------------------------------------

COMPARE_JSON, COMPARE_JUNIT, COMPARE_HTML = "comparison.json", "comparison.junit.xml", "comparison.html"


def render_json(comp: Comparison) -> bytes:
    import json
    return (json.dumps(comp.to_dict(), indent=2, allow_nan=False, default=str) + "\n").encode()


def render_junit(comp: Comparison) -> bytes:
    """A testsuite per paired guest, a testcase per judged value; a regression is a <failure>."""
    import xml.etree.ElementTree as ET

    from vgpu.guest.report.junit import _clean_tree
    root = ET.Element("testsuites", name="vgpu report --compare")
    by_guest: dict[str, list[Delta]] = {}
    for d in comp.deltas:
        by_guest.setdefault(d.guest, []).append(d)
    failures = 0
    for guest, deltas in by_guest.items():
        suite = ET.SubElement(root, "testsuite", name=guest, tests=str(len(deltas)),
                              failures=str(sum(d.verdict == "regressed" for d in deltas)))
        for d in deltas:
            case = ET.SubElement(suite, "testcase", classname=guest, name=f"{d.check} {d.what}")
            if d.verdict == "regressed":
                failures += 1
                ET.SubElement(case, "failure", message=_sentence(d), type="regression")
    root.attrib.update(tests=str(len(comp.deltas)), failures=str(failures))
    _clean_tree(root)  # the validation report's rule for characters XML cannot hold
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


BARS_LIMIT = 50  # paired guests up to which each check also gets a bar per guest, named
VALUES_PAGE = 200  # rows per page of the table of every value
_VERDICT_ORDER = {"regressed": 0, "gone": 1, "new": 2, "changed": 3, "improved": 4, "same": 5}


def lower_is_better(d: Delta) -> bool:
    return direction(d.check, d.what) == "lower"


def render_html(comp: Comparison) -> bytes:
    """The roll-up first (per check the change of every paired guest on one chart, the regression threshold as a
    line, the most regressed named: rollup.py), then per check a bar per guest (up to BARS_LIMIT paired guests),
    then every value, regressions first, in pages (inline SVG and CSS, no scripts, no network)."""
    import html as h

    from vgpu.guest.report import rollup
    e = h.escape
    guests = sorted({d.guest for d in comp.deltas})
    ids = {g: f"g{i}" for i, g in enumerate(guests)}  # inert ids: a guest's name never becomes one
    ordered = sorted(comp.deltas, key=lambda d: (_VERDICT_ORDER.get(d.verdict, 3), d.guest, d.check, d.what))
    rows, first = [], set()
    for d in ordered:
        rel = "" if d.relative is None else f"{d.relative:+.1f}%"
        anchor = ""
        if d.guest not in first and d.verdict == "regressed":
            first.add(d.guest)
            anchor = f' id="{ids[d.guest]}"'
        rows.append(f'<tr{anchor} class="{e(d.verdict)}"><td>{e(d.guest)}</td><td>{e(d.check)}</td><td>{e(d.what)}</td>'
                    f"<td>{e(str(d.baseline))}</td><td>{e(str(d.current))}</td><td>{e(d.unit or '')}</td>"
                    f"<td>{e(rel)}</td><td>{e(d.verdict)}</td></tr>")
    measured = [d for d in comp.deltas if d.what == "measured" and d.relative is not None]
    order = [c for c, _ in rollup.METRICS] + ["fp8.torch"]
    summary = rollup.comparison_rollup(measured, lower_is_better=lower_is_better,
                                       anchors={g: ids[g] for g in first}, order=order)
    charts = []
    if len(guests) <= BARS_LIMIT:
        for check in sorted({d.check for d in measured}):
            charts.append(_bars(check, [d for d in measured if d.check == check]))
    elif measured:
        charts.append(f"<p>{len(guests)} paired guests: the charts above show each of them; bars per guest are "
                      f"drawn up to {BARS_LIMIT}.</p>")
    unpaired = "".join(f"<li>only in the baseline: {e(g)}</li>" for g in comp.only_baseline) + \
        "".join(f"<li>only in the current report: {e(g)}</li>" for g in comp.only_current)
    header = ("<tr><th>guest</th><th>check</th><th>what</th><th>baseline</th><th>current</th><th>unit</th>"
              "<th>change</th><th>verdict</th></tr>")

    def title(start: int, end: int) -> str:
        verdicts = [d.verdict for d in ordered[start:end]]
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in _VERDICT_ORDER if v in verdicts)
        return f"values {start + 1}-{end} of {len(ordered)}: {counts}"

    table = rollup.paged_table(header, rows, page_size=VALUES_PAGE, what="values", title=title)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vgpu comparison</title><style>
body{{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:1200px;color:#1f2328}}
table{{border-collapse:collapse;width:100%}}th,td{{border-bottom:1px solid #d0d7de;padding:.3em .5em;text-align:left}}
th{{background:#f6f8fa}}.regressed td{{background:#ffebe9}}.improved td{{background:#dafbe1}}
.pass{{color:#1a7f37}}.fail,.regressed{{color:#cf222e}}.error{{color:#9a6700}}
details{{border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em;margin:.6em 0}}summary{{cursor:pointer}}
{rollup.CSS}</style></head><body><h1>Before / after</h1>
<p>baseline: {e(comp.baseline)}<br>current: {e(comp.current)}</p>
<p><b>{len(comp.regressions)}</b> regression(s), {sum(d.verdict == 'improved' for d in comp.deltas)} improvement(s),
{len(guests)} guest(s) paired.</p><ul>{unpaired}</ul>
{summary}
{''.join(charts)}
<h2>Every value</h2>{table}</body></html>
"""
    return page.encode()


def _bars(check: str, deltas: list[Delta]) -> str:
    import html as h
    span = max([abs(d.relative) for d in deltas] + [(deltas[0].threshold or 0) * 1.5, 1.0])
    width, row, mid = 600, 22, 300
    parts = [f'<h2>{h.escape(check)}: change per guest</h2><svg role="img" width="{width + 260}" '
             f'height="{row * len(deltas) + 10}" xmlns="http://www.w3.org/2000/svg">']
    for i, d in enumerate(sorted(deltas, key=lambda d: d.relative)):
        x = mid * (d.relative / span)
        color = {"regressed": "#cf222e", "improved": "#1a7f37"}.get(d.verdict, "#6e7781")
        left = 200 + mid + min(0, x)
        parts.append(f'<text x="0" y="{i * row + 16}" font-size="12">{h.escape(d.guest[:28])}</text>'
                     f'<rect x="{left:.1f}" y="{i * row + 4}" width="{abs(x):.1f}" height="14" fill="{color}">'
                     f"<title>{h.escape(d.guest)}: {d.relative:+.1f}%</title></rect>"
                     f'<text x="{200 + 2 * mid + 8}" y="{i * row + 16}" font-size="12">{d.relative:+.1f}%</text>')
    parts.append(f'<line x1="{200 + mid}" y1="0" x2="{200 + mid}" y2="{row * len(deltas) + 10}" stroke="#1f2328"/>'
                 "</svg>")
    return "".join(parts)


def _sentence(d: Delta) -> str:
    if d.what == "status":
        return f"{d.check}: {d.baseline} -> {d.current}"
    rel = "" if d.relative is None else f" ({d.relative:+.1f}%, threshold {d.threshold:g}%)"
    return f"{d.check} {d.what}: {d.baseline} -> {d.current} {d.unit or ''}{rel}".replace("  ", " ")
