#!/usr/bin/env python3
"""Snapshot unpacking: vgpu's checked two-pass unpack vs tarfile's extractall(filter="data").

Archive: `vgpu host snapshot` of the simulated 8xmi300x with gim reloaded at vf_num=8 (8 PFs + 64 VFs).
Measures (best of N, seconds):
  tarfile   tarfile.open(...).extractall(dir, filter="data")   (the baseline; unsafe before 3.11.13)
  vgpu      vgpu.host.archive.unpack(raw, ...)                  (scan headers, resolve links, then write)
  ratio     vgpu / tarfile
Prints a JSON line; `--record` appends it to benchmarks/results/snapshot.jsonl.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import report  # noqa: E402
from vgpu.host.archive import unpack  # noqa: E402
from vgpu.host.paths import HostPaths  # noqa: E402
from vgpu.host.snapshot import capture  # noqa: E402
from vgpu.sim import SimHost  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            fn(Path(tmp))
            times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vgpu-bench-snap-"))
    try:
        host = SimHost.create(work / "sim", machine="8xmi300x")
        host.kernel.unload_module("gim")
        host.kernel.load_module("gim", {"vf_num": "8"})
        raw, _ = capture(HostPaths.under(host.root, label="bench"))
        path = work / "snap.tar.gz"
        path.write_bytes(raw)
        with tarfile.open(path) as tar:
            members = len(tar.getmembers())

        def baseline(dest: Path) -> None:
            with tarfile.open(path) as tar:
                tar.extractall(dest, filter="data")

        def checked(dest: Path) -> None:
            (dest / "tree").mkdir()
            unpack(raw, path, dest / "tree")

        t_tar, t_vgpu = best(baseline, args.repeat), best(checked, args.repeat)
        report({"bench": "snapshot", "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                "machine": f"{platform.machine()} {platform.system()}", "members": members, "bytes": len(raw),
                "tarfile_s": round(t_tar, 4), "vgpu_s": round(t_vgpu, 4), "ratio": round(t_vgpu / t_tar, 2)},
               args.record, "snapshot")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
