#!/usr/bin/env python3
"""CLI start-up: whole-process wall and CPU time of each read command on a simulated host.

Builds a simulated 8xmi300x in a temporary directory, provisions mi300x-4vf on it (so that
`plan` and `status` are in sync and do their full comparison), then runs each read command as a
separate `python -m vgpu ...` process N times, round-robin (so load drift hits every command
alike), after one warm-up run each (an installed vgpu runs from byte-compiled modules: the .pyc
cache is allowed and warmed). Each run must exit 0. Prints one JSON line: per command the best and
median wall time and the best and median CPU time (user + system of the child), the bare
interpreter's figures for comparison, and the 1-minute load average before and after.
`--record` appends it to benchmarks/results/startup.jsonl.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import report  # noqa: E402

PROFILE = "mi300x-4vf"


def commands(sim_dir: str) -> dict[str, list[str]]:
    sim = ["--simulate", "--sim-dir", sim_dir]
    return {
        "help": ["--help"],
        "discover": ["discover", *sim],
        "discover --json": ["discover", "--json", *sim],
        "plan": ["plan", "--profile", PROFILE, *sim],
        "status": ["status", *sim],
        "status --json": ["status", "--json", *sim],
        "export": ["export", *sim],
        "profiles list": ["profiles", "list"],
        "profiles show": ["profiles", "show", PROFILE],
        "validate --help": ["validate", "--help"],
        "metrics": ["metrics", *sim],
    }


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one process; raises when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9, help="runs per command (default 9)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="measure only this command (repeatable), e.g. --only plan")
    ap.add_argument("--record", action="store_true", help="append the result to benchmarks/results/startup.jsonl")
    ap.add_argument("--note", default="", help="a note stored with the result (e.g. 'before')")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("VGPU_SIM_DIR", None)
    vgpu = [sys.executable, "-m", "vgpu"]
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-startup-") as tmp:
        sim_dir = str(Path(tmp) / "sim")
        subprocess.run([*vgpu, "sim", "reset", "--machine", "8xmi300x", "--sim-dir", sim_dir], env=env,
                       stdout=subprocess.DEVNULL, check=True)
        subprocess.run([*vgpu, "provision", "--profile", PROFILE, "--yes", "--simulate", "--sim-dir", sim_dir],
                       env=env, stdout=subprocess.DEVNULL, check=True)
        cmds = {name: [*vgpu, *argv] for name, argv in commands(sim_dir).items()
                if not args.only or name in args.only}
        cmds = {"python -c pass": [sys.executable, "-c", "pass"], **cmds}
        for argv in cmds.values():  # warm the .pyc cache and the page cache
            run_once(argv, env)
        load_before = os.getloadavg()[0]
        walls: dict[str, list[float]] = {n: [] for n in cmds}
        cpus: dict[str, list[float]] = {n: [] for n in cmds}
        for _ in range(args.repeat):
            for name, argv in cmds.items():
                wall, cpu = run_once(argv, env)
                walls[name].append(wall)
                cpus[name].append(cpu)
        load_after = os.getloadavg()[0]
    result = {
        "bench": "startup", "when": time.strftime("%Y-%m-%d %H:%M"), "note": args.note, "repeat": args.repeat,
        "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "load1_before": round(load_before, 2), "load1_after": round(load_after, 2),
        "commands": {n: {"wall_best_s": round(min(walls[n]), 3), "wall_median_s": round(statistics.median(walls[n]), 3),
                         "cpu_best_s": round(min(cpus[n]), 3), "cpu_median_s": round(statistics.median(cpus[n]), 3)}
                     for n in cmds},
    }
    report(result, args.record, "startup")
    width = max(len(n) for n in cmds)
    print(f"{'command':<{width}}  wall best  median   cpu best  median", file=sys.stderr)
    for n, r in result["commands"].items():
        print(f"{n:<{width}}  {r['wall_best_s']:8.3f}  {r['wall_median_s']:6.3f}   {r['cpu_best_s']:8.3f}  "
              f"{r['cpu_median_s']:6.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
