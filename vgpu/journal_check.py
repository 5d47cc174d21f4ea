"""The shape of a vgpu.journal/v1 journal, checked once when it is read (vgpu.executor.Journal.load).

The journal comes back from disk as outside input: a damaged or hand-edited one must be refused with one
sentence naming what is wrong (exit 5, docs/troubleshooting.md), never reach the rollback as a raw KeyError or
TypeError. Every field the executor reads is checked here, so the code that uses them can trust them.
"""

from __future__ import annotations

from vgpu.errors import VgpuError
from vgpu.model.plan import STEP_TYPES, step_from_dict


def journal_problem(data: dict) -> str | None:
    """What is wrong with a journal that has the right schema, or None when it can be used."""
    if not isinstance(data.get("profile", ""), str):
        return "its profile is not a string"
    if "steps" in data and (type(data["steps"]) is not int or data["steps"] < 0):
        return "its step count is not a number of steps"
    if "rolling_back" in data and not isinstance(data["rolling_back"], bool):
        return "rolling_back is not true or false"
    baseline = data.get("baseline", {})
    if not isinstance(baseline, dict) or not all(isinstance(k, str) and (v is None or isinstance(v, str))
                                                 for k, v in baseline.items()):
        return "its baseline is not a mapping of file paths to their content"
    entries = data.get("entries", [])
    if not isinstance(entries, list):
        return "its entries are not a list"
    for n, entry in enumerate(entries, 1):
        problem = _entry_problem(entry)
        if problem is not None:
            return f"entry {n} {problem}"
    return None


def _entry_problem(entry) -> str | None:
    if not isinstance(entry, dict) or set(entry) != {"step", "info", "done"}:
        return "is not a {step, info, done} object"
    if not isinstance(entry["info"], dict) or not isinstance(entry["done"], bool):
        return "has an info that is not an object or a done that is not true or false"
    step = entry["step"]
    if not isinstance(step, dict) or not isinstance(step.get("kind"), str):
        return "has a step without a kind"
    if step["kind"] not in STEP_TYPES:
        return f"names an unknown step kind {step['kind']!r} (known: {', '.join(sorted(STEP_TYPES))})"
    try:
        step_from_dict(step)
    except (VgpuError, KeyError, TypeError, ValueError, AttributeError):
        return f"has a {step['kind']} step whose fields do not make one"
    return None
