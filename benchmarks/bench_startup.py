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

`--baseline DIR` also measures the vgpu package in DIR (for example `git archive COMMIT | tar -x -C DIR`),
interleaved run by run with this checkout so that both see the same load; its figures go under "baseline".
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
    # cwd "/": `python -m` puts the current directory first on sys.path, which would shadow PYTHONPATH
    proc = subprocess.run(argv, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace")[-500:]
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9, help="runs per command (default 9)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="measure only this command (repeatable), e.g. --only plan")
    ap.add_argument("--record", action="store_true",
                    help="append the result to benchmarks/results/startup.jsonl")
    ap.add_argument("--note", default="", help="a note stored with the result (e.g. 'before')")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also measure the vgpu in DIR (a source tree of another commit), interleaved")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("VGPU_SIM_DIR", None)
    base_env = dict(env, PYTHONPATH=str(args.baseline.resolve())) if args.baseline else None
    if args.baseline and not (args.baseline / "vgpu" / "__init__.py").is_file():
        raise SystemExit(f"--baseline {args.baseline}: no vgpu package there")
    vgpu = [sys.executable, "-m", "vgpu"]
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-startup-") as tmp:
        sim_dir = str(Path(tmp) / "sim")
        subprocess.run([*vgpu, "sim", "reset", "--machine", "8xmi300x", "--sim-dir", sim_dir], env=env,
                       stdout=subprocess.DEVNULL, check=True)
        subprocess.run([*vgpu, "provision", "--profile", PROFILE, "--yes", "--simulate",
                        "--sim-dir", sim_dir], env=env, stdout=subprocess.DEVNULL, check=True)
        cmds = {name: [*vgpu, *argv] for name, argv in commands(sim_dir).items()
                if not args.only or name in args.only}
        cmds = {"python -c pass": [sys.executable, "-c", "pass"], **cmds}
        trees = {"commands": env, **({"baseline": base_env} if base_env else {})}
        for tree_env in trees.values():  # warm the .pyc cache and the page cache
            for argv in cmds.values():
                run_once(argv, tree_env)
        load_before = os.getloadavg()[0]
        walls = {t: {n: [] for n in cmds} for t in trees}
        cpus = {t: {n: [] for n in cmds} for t in trees}
        for _ in range(args.repeat):
            for name, argv in cmds.items():
                for tree, tree_env in trees.items():
                    wall, cpu = run_once(argv, tree_env)
                    walls[tree][name].append(wall)
                    cpus[tree][name].append(cpu)
        load_after = os.getloadavg()[0]
    result = {
        "bench": "startup", "when": time.strftime("%Y-%m-%d %H:%M"), "note": args.note, "repeat": args.repeat,
        "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "load1_before": round(load_before, 2), "load1_after": round(load_after, 2),
        **({"baseline_dir": str(args.baseline)} if args.baseline else {}),
    }
    for tree in trees:
        result[tree] = {n: {"wall_best_s": round(min(walls[tree][n]), 3),
                            "wall_median_s": round(statistics.median(walls[tree][n]), 3),
                            "cpu_best_s": round(min(cpus[tree][n]), 3),
                            "cpu_median_s": round(statistics.median(cpus[tree][n]), 3)} for n in cmds}
    report(result, args.record, "startup")
    width = max(len(n) for n in cmds)
    head = f"{'command':<{width}}  wall best  median   cpu best  median"
    print(head + ("   | baseline: wall best  median   cpu best  median" if base_env else ""), file=sys.stderr)
    for n, r in result["commands"].items():
        line = (f"{n:<{width}}  {r['wall_best_s']:8.3f}  {r['wall_median_s']:6.3f}   {r['cpu_best_s']:8.3f}  "
                f"{r['cpu_median_s']:6.3f}")
        if base_env:
            b = result["baseline"][n]
            line += (f"   |           {b['wall_best_s']:8.3f}  {b['wall_median_s']:6.3f}   "
                     f"{b['cpu_best_s']:8.3f}  {b['cpu_median_s']:6.3f}")
        print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
