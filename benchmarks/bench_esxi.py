#!/usr/bin/env python3
"""vgpu against a simulated ESXi 8 host (govmomi's vSphere API simulator over HTTPS, 8 x MI300X, 8 VMs).

Prints one JSON line: connect_s (TLS + login + finding the host), plan_inproc_s (best of N, in sync after
provision), plan_cli_s (a whole `python -m vgpu plan --esxi ...` process), provision_s (8 GPUs + 8 VMs:
two rounds, each journaled and verified by read-back) and release_s; and for discover, plan, provision and
release the HTTP round trips (SOAP requests) and the bytes of the answers, counted at pyVmomi's HTTP
connection (the simulator answers in microseconds: on a real host, above all through vCenter, these are
what costs). `--record` appends it to benchmarks/results/esxi.jsonl.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import report  # noqa: E402
from vgpu.esxi.connect import connect, endpoint  # noqa: E402
from vgpu.esxi.service import EsxiTarget  # noqa: E402
from vgpu.profiles import load_profile  # noqa: E402
from vgpu.sim.vcsim import EsxiSpec, Vcsim, VmSpec  # noqa: E402

PROFILE = "mi300x-esxi-passthrough"


class Traffic:
    """SOAP requests and answer bytes, counted at http.client (pyVmomi's transport), for one phase at a time."""

    def __init__(self):
        import http.client
        self.requests = self.bytes = 0
        counter = self
        request, read, readinto = (http.client.HTTPConnection.request, http.client.HTTPResponse.read,
                                   http.client.HTTPResponse.readinto)

        def counted_request(conn, *a, **kw):
            counter.requests += 1
            return request(conn, *a, **kw)

        def counted_read(resp, *a, **kw):
            data = read(resp, *a, **kw)
            counter.bytes += len(data)
            return data

        def counted_readinto(resp, b):
            n = readinto(resp, b)
            counter.bytes += n or 0
            return n
        http.client.HTTPConnection.request = counted_request
        http.client.HTTPResponse.read = counted_read
        http.client.HTTPResponse.readinto = counted_readinto

    def measure(self, fn) -> tuple[object, int, int]:
        before = (self.requests, self.bytes)
        value = fn()
        return value, self.requests - before[0], self.bytes - before[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--record", action="store_true", help="append the result to benchmarks/results/esxi.jsonl")
    args = ap.parse_args()
    profile = load_profile(PROFILE)
    traffic = Traffic()
    trips = {}
    with tempfile.TemporaryDirectory() as tmp:
        spec = EsxiSpec(vms=[VmSpec(f"gpu-vm-{i:02d}") for i in range(8)])
        with Vcsim(spec, Path(tmp) / "esxi") as sim:
            os.environ.update(VGPU_ESXI_USER=spec.user, VGPU_ESXI_PASSWORD=spec.password,
                              VGPU_STATE_DIR=str(Path(tmp) / "state"))
            ep = endpoint(sim.url, ca_file=sim.ca_file)
            t0 = time.perf_counter()
            target = EsxiTarget(connect(ep))
            connect_s = time.perf_counter() - t0
            _, *trips["discover"] = traffic.measure(target.discover)
            _, *trips["plan"] = traffic.measure(lambda: target.plan(profile))
            t0 = time.perf_counter()
            _, *trips["provision"] = traffic.measure(lambda: target.provision(profile))
            provision_s = time.perf_counter() - t0
            runs = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                assert target.plan(profile).plan.in_sync
                runs.append(time.perf_counter() - t0)
            cli = []
            for _ in range(max(1, args.repeat // 2)):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "vgpu", "plan", "--profile", PROFILE, "--esxi", sim.url,
                                "--esxi-ca", str(sim.ca_file)], check=True, capture_output=True, cwd=ROOT)
                cli.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, *trips["release"] = traffic.measure(target.release)
            release_s = time.perf_counter() - t0
            target.close()
    report({"bench": "esxi", "gpus": 8, "vms": 8, "connect_s": round(connect_s, 3),
            "plan_inproc_s": round(min(runs), 3), "plan_cli_s": round(min(cli), 3),
            "provision_s": round(provision_s, 3), "release_s": round(release_s, 3),
            **{f"{phase}_round_trips": n for phase, (n, _) in trips.items()},
            **{f"{phase}_kib": round(b / 1024) for phase, (_, b) in trips.items()}}, args.record, "esxi")


if __name__ == "__main__":
    main()
