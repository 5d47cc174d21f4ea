"""Shared by the benchmarks: print a result as one JSON line and, when asked, append it to results/."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def report(result: dict, record: bool, name: str) -> None:
    print(json.dumps(result))
    if record:
        RESULTS.mkdir(exist_ok=True)
        with open(RESULTS / f"{name}.jsonl", "a") as fh:
            fh.write(json.dumps(result) + "\n")
