"""What every check shares: the context, timing, and judging a measurement against a threshold.

Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from .guest import Guest
from .result import CheckResult

# Per-tool timeouts in seconds: a hung tool costs at most this, never the whole run.
TIMEOUTS = {"query": 60.0, "compile": 300.0, "workload": 300.0}


@dataclass
class Context:
    guest: Guest
    expect: Dict[str, Any]
    workdir: str
    archive: str  # the zipapp (or source folder) holding the ``vgpu`` package, for helper processes
    workloads: bool = True
    state: Dict[str, Any] = field(default_factory=dict)  # facts earlier checks found (bdfs, gfx target)

    def threshold(self, metric: str) -> Dict[str, Any]:
        return (self.expect.get("thresholds") or {}).get(metric) or {
            "metric": metric, "value": None, "unit": None, "reason": "no threshold in the expectation"}

    def optional(self, name: str) -> Optional[str]:
        """Why check ``name`` may go unjudged (the profile's validation.optional or --optional), or None."""
        reason = (self.expect.get("optional") or {}).get(name)
        return str(reason) if reason else None


def result(name: str, ok: bool, measured: Any = None, expected: Any = None, unit: Optional[str] = None,
           detail: str = "") -> CheckResult:
    return CheckResult(name, "pass" if ok else "fail", measured, expected, unit, detail)


def error(name: str, detail: str, expected: Any = None) -> CheckResult:
    return CheckResult(name, "error", None, expected, None, detail)


def skip(name: str, detail: str, measured: Any = None, expected: Any = None, unit: Optional[str] = None) -> CheckResult:
    return CheckResult(name, "skip", measured, expected, unit, detail)


def unjudged(ctx: "Context", name: str, why: str, measured: Any = None, unit: Optional[str] = None,
             expected: Any = None) -> CheckResult:
    """A required check that produced no verdict: an ``error`` that fails the guest, with ``why`` (which says
    what to install or set). Only a check the operator made optional becomes a ``skip``, "not judged"."""
    optional = ctx.optional(name)
    if optional:
        return CheckResult(name, "skip", measured, expected, unit, "not judged (optional: %s): %s" % (optional, why))
    return CheckResult(name, "error", measured, expected, unit, why)


def against(ctx: "Context", name: str, measured: float, metric: str, detail: str = "") -> CheckResult:
    """pass when ``measured`` reaches the threshold of ``metric``; without a threshold an error (unjudged)."""
    threshold = ctx.threshold(metric)
    unit = threshold.get("unit")
    value = threshold.get("value")
    measured = round(float(measured), 1)
    if value is None:
        why = threshold.get("reason") or "no threshold"
        return unjudged(ctx, name, "%s: measured %s %s but there is nothing to judge it against; set validation."
                        "thresholds.%s in the profile or make the check optional" % (why, measured, unit or "", metric),
                        measured, unit)
    basis = threshold.get("source") or ""
    text = "; ".join(p for p in (detail, "threshold: %s" % basis if basis else "") if p)
    return result(name, measured >= float(value), measured, value, unit, text)


CheckFn = Callable[[Context], List[CheckResult]]


def run_check(fn: CheckFn, ctx: Context) -> List[CheckResult]:
    """Run one check function; its time goes to the results, a crash becomes an error result."""
    start = time.monotonic()
    try:
        results = fn(ctx)
    except Exception as exc:  # one broken check must never cost the others
        last = traceback.extract_tb(exc.__traceback__)[-1]
        name = getattr(fn, "check_name", fn.__name__)
        results = [error(name, "agent bug: %s: %s (%s:%d)" % (type(exc).__name__, exc,
                                                             last.filename.rsplit("/", 1)[-1], last.lineno))]
    seconds = round(time.monotonic() - start, 3)
    for r in results:
        if not r.seconds:
            r.seconds = seconds
    return results
