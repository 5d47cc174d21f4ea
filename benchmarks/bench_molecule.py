#!/usr/bin/env python3
"""Molecule converge of the `fleet` scenario (GIM host, guest, passthrough host on systemd-nspawn; local repo).

Measures one run (seconds, wall clock; the hosts are real containers, so repeats mostly measure apt and SSH):
  create     boot the hosts and serve the repository (the cached root exists: build-root.sh ran before)
  converge   the first converge: packages, DKMS, the reboot gate, a real reboot of each host, verification
  again      the second converge, which changes nothing (what an idempotent re-run of a play costs)
  ratio      again / converge
Needs root, systemd-nspawn and overlayfs (as make test-molecule). Prints a JSON line; `--record` appends it to
benchmarks/results/molecule.jsonl.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import report  # noqa: E402

VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    subprocess.run([str(ROOT / "tools" / "molecule" / "build-root.sh")], check=True, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-molecule-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
        env.update(VGPU_MOLECULE_DIR=tmp, PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}", NO_COLOR="1",
                   ANSIBLE_HOME=str(Path(tmp) / "ansible-home"))

        def molecule(step: str) -> float:
            t0 = time.perf_counter()
            proc = subprocess.run([str(VENV_BIN / "molecule"), step, "-s", "fleet"], cwd=ROOT, env=env,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"molecule {step} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
            return time.perf_counter() - t0

        try:
            create = molecule("create")
            molecule("prepare")
            first = molecule("converge")
            again = molecule("converge")
        finally:
            molecule("destroy")
    report({"bench": "molecule_fleet_converge", "create_s": round(create, 1), "converge_s": round(first, 1),
            "again_s": round(again, 1), "ratio": round(again / first, 2), "hosts": 3,
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, args.record, "molecule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
