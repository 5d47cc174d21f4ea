"""The HTML report: one self-contained page (inline CSS and SVG, no scripts, no external assets).

What a person wants first comes first: summary cards, then the fleet roll-up (rollup.py: per model/partition the
distribution of FP8 TFLOPS and HBM bandwidth across guests against the threshold, the slowest guests named), then
the guests table, worst first (not validated, failed, passed), cut into pages of PAGE_SIZE rows (the first open,
the rest collapsed <details>), then per guest its checks with a bar chart of each numeric measurement against its
threshold: every guest in a report of up to DETAIL_LIMIT guests, beyond that the guests that did not pass (the
JSON report holds every check of every guest). So a report of 1,000 guests stays a page a browser opens at once
(about 1 MB, docs/validate.md). Every value from a guest goes through ``html.escape``: a guest decides what its
tools print, so their text is untrusted.
"""

from __future__ import annotations

import html
import math
from typing import Any

from vgpu.guest.agent.result import STATUSES, CheckResult
from vgpu.guest.report import rollup
from vgpu.guest.report.model import GuestReport, ValidationReport

PAGE_SIZE = 100  # rows per page of the guests table
DETAIL_LIMIT = 50  # above this many guests, only those that did not pass get a check-by-check section
_SEVERITY = {"error": 0, "fail": 1, "pass": 2}
_COLORS = {"pass": "#1a7f37", "fail": "#cf222e", "error": "#9a6700", "skip": "#6e7781"}
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#1f2328;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}
.cards{display:flex;gap:1em;flex-wrap:wrap}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.6em 1.2em}
.card b{display:block;font-size:1.6em}
table{border-collapse:collapse;width:100%;margin:.6em 0}
th,td{border-bottom:1px solid #d0d7de;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#1a7f37}.fail{color:#cf222e}.error{color:#9a6700}.skip{color:#6e7781}
.badge{font-weight:600;text-transform:uppercase;font-size:.85em}
details{border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em;margin:.6em 0}
summary{cursor:pointer}
.detail{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:.9em}
""" + rollup.CSS


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def render(report: ValidationReport) -> bytes:
    s = report.summary()
    guests = report.guests
    ids = _ids(guests)
    order = sorted(range(len(guests)), key=lambda i: (_SEVERITY.get(guests[i].verdict, 0), i))
    if len(guests) <= DETAIL_LIMIT:
        detailed = order
    else:
        detailed = [i for i in order if guests[i].verdict != "pass"][:DETAIL_LIMIT]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>vgpu validation report {_e(report.generated)}</title><style>{_CSS}</style></head><body>",
        "<h1>vgpu validation report</h1>",
        f"<p>Generated {_e(report.generated)} by vgpu {_e(report.vgpu_version)}; exit code "
        f"{_e(s['exit_code'])}.</p>",
        _cards(s), _not_judged(s["not_judged"]), rollup.validation_rollup(guests, [f"row-{x}" for x in ids]),
        _guest_table(guests, order, ids, set(detailed)),
    ]
    if len(detailed) < len(guests):
        failing = sum(g.verdict != "pass" for g in guests)
        which = (f"the first {len(detailed)} of the {failing} guests that did not pass" if failing > len(detailed)
                 else f"the {len(detailed)} guests that did not pass")
        parts.append(f'<h2>Checks</h2><p class="omitted">Check by check: {which}. The other '
                     f"{len(guests) - len(detailed)} are in the table and charts above, and every check of every "
                     "guest is in validation-report.json.</p>")
    parts += [_guest_section(guests[i], f"guest-{ids[i]}") for i in detailed]
    parts.append("</body></html>\n")
    return "\n".join(parts).encode("utf-8")


def _cards(s: dict) -> str:
    items = [("guests", s["guests"], ""), ("passed", s["passed"], "pass"), ("failed", s["failed"], "fail"),
             ("not validated", s["errors"], "error")]
    items += [(f"checks {k}", v, k) for k, v in s["checks"].items()]
    cards = "".join(f'<div class="card {c}"><b>{_e(v)}</b>{_e(k)}</div>' for k, v, c in items)
    return f'<div class="cards">{cards}</div>'


NOT_JUDGED_LIMIT = 50  # rows of the "not judged" list; every one is in validation-report.json


def _not_judged(items: list[dict]) -> str:
    """The checks that gave no verdict, named with their reason: a PASS is only as good as what was judged."""
    if not items:
        return ""
    rows = "".join(f"<tr><td>{_e(i['guest'])}</td><td>{_e(i['check'])}</td><td>{_e(i['reason'])}</td></tr>"
                   for i in items[:NOT_JUDGED_LIMIT])
    more = (f"<p>and {len(items) - NOT_JUDGED_LIMIT} more in validation-report.json.</p>"
            if len(items) > NOT_JUDGED_LIMIT else "")
    return (f'<section id="not-judged"><h2>Not judged: {len(items)} check(s)</h2><table><tr><th>guest</th>'
            f"<th>check</th><th>why</th></tr>{rows}</table>{more}</section>")


def _ids(guests: list[GuestReport]) -> list[str]:
    """A unique, inert id per guest (letters, digits, - and _ of its name, then a number if taken)."""
    seen: set[str] = set()
    out = []
    for i, g in enumerate(guests):
        base = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else "_" for ch in g.name[:60]) or "_"
        ident = base if base not in seen else f"{base}-{i + 1}"
        seen.add(ident)
        out.append(ident)
    return out


def _metric(g: GuestReport, check: str) -> tuple[str, str]:
    """The cell of a charted measurement: its value and its status class ("" when not measured)."""
    for c in g.checks:
        if c.name == check:
            v = rollup.number(c.measured)
            return (f"{v:.4g}" if v is not None else ""), c.status
    return "", ""


def _guest_table(guests: list[GuestReport], order: list[int], ids: list[str], detailed: set[int]) -> str:
    heads = "".join(f"<th>{h}</th>" for h in ("guest", "address", "verdict", "outcome", "model / partition"))
    heads += "".join(f"<th>{_e(label)}</th>" for label in ("FP8 TFLOPS", "HBM GB/s"))
    header = f"<tr>{heads}<th>checks (pass/fail/skip/error)</th><th>seconds</th><th>detail</th></tr>"
    rows = []
    for i in order:
        g = guests[i]
        counts = "/".join(str(sum(c.status == st for c in g.checks)) for st in STATUSES)
        exp = g.expectation
        part = " ".join(x for x in (exp.model, exp.compute, exp.memory) if x) or "-"
        name = f'<a href="#guest-{ids[i]}">{_e(g.name)}</a>' if i in detailed else _e(g.name)
        cells = "".join(f'<td class="num {_e(st)}">{_e(v)}</td>'
                        for v, st in (_metric(g, "fp8.hipblaslt"), _metric(g, "hip.bandwidth")))
        rows.append(f'<tr id="row-{ids[i]}"><td>{name}</td><td>{_e(g.address)}</td>'
                    f'<td class="badge {_e(g.verdict)}">{_e(g.verdict)}</td><td>{_e(g.outcome.value)}</td>'
                    f"<td>{_e(part)}</td>{cells}<td>{counts}</td><td>{g.seconds:.1f}</td>"
                    f'<td class="detail">{_e(g.detail)}</td></tr>')

    def title(start: int, end: int) -> str:
        verdicts = [guests[i].verdict for i in order[start:end]]
        counts = ", ".join(f"{verdicts.count(v)} {w}" for v, w in
                           (("error", "not validated"), ("fail", "failed"), ("pass", "passed")) if v in verdicts)
        return f"guests {start + 1}-{end} of {len(order)}: {counts}"

    return "<h2>Guests</h2>" + rollup.paged_table(header, rows, page_size=PAGE_SIZE, what="guests", title=title)


def _guest_section(g: GuestReport, ident: str) -> str:
    head = (f'<details id="{ident}" {"open" if g.verdict != "pass" else ""}><summary>'
            f'<b>{_e(g.name)}</b> <span class="badge {_e(g.verdict)}">{_e(g.verdict)}</span> '
            f"{_e(g.address)}</summary>")
    if g.agent is None:
        return f'{head}<p class="detail">{_e(g.outcome.value)}: {_e(g.detail)}</p></details>'
    info = (f"<p>Agent {_e(g.agent.agent_version)} on {_e(g.agent.hostname)}, started {_e(g.agent.started)}, "
            f"ran {g.agent.seconds:.1f} s.</p>")
    rows = ["<table><tr><th>check</th><th>status</th><th>measured</th><th>expected</th><th>detail</th></tr>"]
    for c in g.checks:
        unit = f" {c.unit}" if c.unit else ""
        rows.append(f"<tr><td>{_e(c.name)}</td><td class=\"badge {_e(c.status)}\">{_e(c.status)}</td>"
                    f"<td>{_e(c.measured)}{_e(unit if c.measured is not None else '')}</td>"
                    f"<td>{_e(c.expected)}{_e(unit if c.expected is not None else '')}</td>"
                    f'<td class="detail">{_e(c.detail)}</td></tr>')
    rows.append("</table>")
    return head + info + chart(g.checks) + "".join(rows) + "</details>"


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) and v >= 0 else None


def chart(checks: list[CheckResult]) -> str:
    """An inline SVG: one row per check with a numeric measurement and threshold.

    Units differ between checks, so each row has its own scale: the bar is the measurement, the
    black tick the threshold, both relative to the larger of the two.
    """
    rows = [(c, _number(c.measured), _number(c.expected)) for c in checks]
    rows = [(c, m, x) for c, m, x in rows if m is not None and x is not None and max(m, x) > 0]
    if not rows:
        return ""
    label_w, bar_w, row_h = 230, 420, 26
    height = row_h * len(rows) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{label_w + bar_w + 200}" '
           f'height="{height}" aria-label="measured versus threshold">']
    for i, (c, m, x) in enumerate(rows):
        y = 5 + i * row_h
        top = max(m, x) * 1.05
        w, tick = bar_w * m / top, label_w + bar_w * x / top
        unit = f" {c.unit}" if c.unit else ""
        out.append(f'<text x="0" y="{y + 16}" font-size="12">{_e(c.name[:36])}</text>'
                   f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="16" '
                   f'fill="{_COLORS.get(c.status, "#6e7781")}"><title>{_e(f"{m:g}{unit}")}</title></rect>'
                   f'<line x1="{tick:.1f}" x2="{tick:.1f}" y1="{y}" y2="{y + 22}" stroke="#000" '
                   f'stroke-width="2"><title>{_e(f"threshold {x:g}{unit}")}</title></line>'
                   f'<text x="{label_w + bar_w + 8}" y="{y + 16}" font-size="12">'
                   f'{_e(f"{m:g} / {x:g}{unit}")}</text>')
    out.append("</svg>")
    return "".join(out)
