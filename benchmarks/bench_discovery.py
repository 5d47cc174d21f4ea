#!/usr/bin/env python3
"""Discovery speed: vgpu's discovery vs a raw os.scandir walk reading the same attributes.

Host: the simulated 8xmi300x with gim reloaded at vf_num=8 (8 PFs + 64 VFs + NICs, NVMe, bridges).
Measures (best of N, seconds):
  raw       os.scandir over <sys>/bus/pci/devices reading every attribute/link discovery reads
  sysfs     vgpu.host.discovery.discover(..., source="sysfs")  (inventory + readiness)
  udev      the same through libudev (pyudev) under umockdev's preload, in a subprocess
  cli       `python -m vgpu discover --json --sysfs-root ...` cold start, whole process
Prints a JSON line per figure; `--record` appends the results to benchmarks/results/discovery.jsonl.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from vgpu.host.discovery import discover  # noqa: E402
from vgpu.host.pcifunc import ATTRIBUTES, LINKS  # noqa: E402
from _results import report  # noqa: E402
from vgpu.host.paths import HostPaths  # noqa: E402
from vgpu.sim import SimHost  # noqa: E402


def raw_walk(sys_dir: Path) -> int:
    """The baseline: read every attribute and link of every function, no parsing, no model."""
    n = 0
    devices = sys_dir / "bus" / "pci" / "devices"
    with os.scandir(devices) as it:
        for entry in it:
            base = entry.path
            for attr in ATTRIBUTES:
                try:
                    with open(os.path.join(base, attr), "rb") as fh:
                        n += len(fh.read())
                except OSError:
                    pass
            for link in LINKS:
                try:
                    n += len(os.readlink(os.path.join(base, link)))
                except OSError:
                    pass
            for name in os.listdir(base):
                if name.startswith("virtfn"):
                    n += len(os.readlink(os.path.join(base, name)))
    return n


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def udev_time(root: Path, repeat: int) -> float | None:
    code = (f"import sys,time,dataclasses;sys.path.insert(0,{str(ROOT)!r});"
            "from vgpu.host.discovery import discover;from vgpu.host.paths import HostPaths;"
            f"p=dataclasses.replace(HostPaths.under({str(root)!r}),sys=HostPaths.system().sys);"
            f"ts=[];[ (t:=time.perf_counter(), discover(p,source='udev'), ts.append(time.perf_counter()-t)) for _ in range({repeat})];"
            "print(min(ts))")
    env = dict(os.environ, LD_PRELOAD="libumockdev-preload.so.0", UMOCKDEV_DIR=str(root))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def cli_time(sys_dir: Path, repeat: int) -> float:
    def once():
        subprocess.run([sys.executable, "-m", "vgpu", "discover", "--json", "--sysfs-root", str(sys_dir)],
                       check=True, capture_output=True, cwd=ROOT)
    return best(once, repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        host = SimHost.create(Path(tmp) / "sim", machine="8xmi300x")
        host.kernel.unload_module("gim")
        host.kernel.load_module("gim", {"vf_num": "8"})
        paths = HostPaths.under(host.root)
        inv = discover(paths, source="sysfs")
        assert sum(len(g.vfs) for g in inv.gpus) == 64
        functions = len(os.listdir(paths.pci_devices()))
        raw = best(lambda: raw_walk(paths.sys), args.repeat)
        vg = best(lambda: discover(paths, source="sysfs"), args.repeat)
        udev = udev_time(host.root, args.repeat)
        cli = cli_time(paths.sys, max(3, args.repeat // 4))
    result = {"bench": "discovery", "host": "8xmi300x vf_num=8", "functions": functions,
              "raw_scandir_s": round(raw, 5), "vgpu_sysfs_s": round(vg, 5), "ratio_sysfs": round(vg / raw, 2),
              "vgpu_udev_s": None if udev is None else round(udev, 5),
              "ratio_udev": None if udev is None else round(udev / raw, 2),
              "cli_cold_start_s": round(cli, 3), "python": platform.python_version(),
              "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d")}
    report(result, args.record, "discovery")


if __name__ == "__main__":
    main()
