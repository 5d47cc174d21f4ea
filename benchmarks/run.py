#!/usr/bin/env python3
"""`make bench`: run the host-side benchmarks (discovery, plan, snapshot, start-up) and record their results.

The validate fan-out benchmark needs a running sshd and ansible and takes minutes; run it on its own
(see benchmarks/README.md). Pass --all to include it here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="also run validate_fanout.py (sshd + ansible)")
    ap.add_argument("--no-record", action="store_true", help="print the results without recording them")
    args = ap.parse_args()
    record = [] if args.no_record else ["--record"]
    runs = [["bench_discovery.py"], ["bench_plan.py"], ["bench_snapshot.py"], ["bench_startup.py"]]
    if args.all:
        runs.append(["validate_fanout.py", "--guests", "32", "--concurrency", "8", "--repeat", "3"])
    failed = 0
    for script, *extra in runs:
        print(f"== {script}", flush=True)
        failed |= subprocess.call([sys.executable, str(HERE / script), *extra, *record]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
