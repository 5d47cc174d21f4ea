#!/usr/bin/env python3
"""`vgpu plan` on an in-sync simulated 8xmi300x, and provision time split into tool vs simulated kernel.

Prints one JSON line: plan_inproc_s (best of N), plan_cli_s (whole `python -m vgpu plan` process),
provision_s, kernel_s (time inside the simulated kernel's operations), tool_s = provision_s - kernel_s.
`--record` appends it to benchmarks/results/plan.jsonl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import report  # noqa: E402
from vgpu.profiles import load_profile  # noqa: E402
from vgpu.provision import plan_profile, provision  # noqa: E402
from vgpu.sim import SimHost  # noqa: E402


def timed_kernel(kernel):
    spent = [0.0]
    for name in ("load_module", "unload_module", "write_attr", "settle"):
        orig = getattr(kernel, name)

        def wrap(*a, _orig=orig, **k):
            t = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t
        setattr(kernel, name, wrap)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="append the result to benchmarks/results/plan.jsonl")
    args = ap.parse_args()
    profile = load_profile("mi300x-4vf")
    with tempfile.TemporaryDirectory() as tmp:
        host = SimHost.create(Path(tmp) / "sim", machine="8xmi300x")
        target = host.target()
        spent = timed_kernel(host.kernel)
        t0 = time.perf_counter()
        provision(target, profile)
        prov = time.perf_counter() - t0
        runs = []
        for _ in range(10):
            t = time.perf_counter()
            assert plan_profile(target, profile).plan.in_sync
            runs.append(time.perf_counter() - t)
        env = dict(os.environ, VGPU_SIM_DIR=str(host.state_dir), PYTHONPATH=str(ROOT))
        # an installed vgpu runs from byte-compiled modules: allow (and warm) the .pyc cache
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "vgpu", "plan", "--profile", "mi300x-4vf", "--simulate"],
                       env=env, capture_output=True, check=True)
        cli = []
        for _ in range(7):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "vgpu", "plan", "--profile", "mi300x-4vf", "--simulate"],
                           env=env, capture_output=True, check=True)
            cli.append(time.perf_counter() - t)
    result = {"bench": "plan", "plan_inproc_s": round(min(runs), 4), "plan_cli_s": round(min(cli), 3),
              "plan_cli_median_s": round(statistics.median(cli), 3), "load1": round(os.getloadavg()[0], 2),
              "provision_s": round(prov, 3), "kernel_s": round(spent[0], 3),
              "tool_s": round(prov - spent[0], 3), "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d")}
    report(result, args.record, "plan")


if __name__ == "__main__":
    main()
