"""Entry point of the guest agent.

    python3 vgpu-agent.pyz --expect EXPECT.json [--workdir DIR] [--skip-workloads] [--root DIR]

Prints exactly one JSON document (``AgentResult.to_dict()``) on stdout and exits 0, whatever the
checks found; exit 2 only for a bad invocation (unknown option, unreadable or invalid
expectation), with one line on stderr. Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from . import __version__, gpu_checks, metrics, system_checks, workloads
from .base import Context, run_check, skip, unjudged
from .guest import Guest
from .result import EXPECT_SCHEMA, AgentResult, CheckResult

REQUIRED = ("model", "arch", "vendor_id", "device_ids", "fp8", "thresholds", "rocm")


class BadInvocation(Exception):
    pass


def load_expectation(path: str) -> Dict[str, Any]:
    """The expectation document; raises BadInvocation with one line saying what is wrong."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise BadInvocation("cannot read expectation %s: %s" % (path, exc.strerror or exc))
    except ValueError as exc:
        raise BadInvocation("expectation %s is not JSON: %s" % (path, exc))
    if not isinstance(data, dict) or data.get("schema") != EXPECT_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise BadInvocation("expectation %s has schema %r, expected %r" % (path, found, EXPECT_SCHEMA))
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise BadInvocation("expectation %s lacks %s" % (path, ", ".join(missing)))
    problem = _shape_problem(data)
    if problem:
        raise BadInvocation("expectation %s: %s" % (path, problem))
    return data


def _is_hex(value: Any) -> bool:
    try:
        int(value, 16)
    except (TypeError, ValueError):
        return False
    return True


def _shape_problem(data: Dict[str, Any]) -> str:
    """What is wrong with the types of an expectation's fields ("" when nothing)."""
    if not _is_hex(data["vendor_id"]):
        return "vendor_id %r is not a hex id" % (data["vendor_id"],)
    ids = data["device_ids"]
    if not isinstance(ids, list) or not ids or not all(_is_hex(i) for i in ids):
        return "device_ids must be a non-empty list of hex ids"
    if not isinstance(data["fp8"], dict) or not isinstance(data["thresholds"], dict):
        return "fp8 and thresholds must be objects"
    if not isinstance(data["arch"], str) or not isinstance(data["rocm"], str):
        return "arch and rocm must be strings"
    return ""


def archive_root() -> str:
    """The zipapp (or source folder) that holds the ``vgpu`` package: <root>/vgpu/guest/agent/main.py."""
    path = os.path.abspath(__file__)
    for _ in range(4):
        path = os.path.dirname(path)
    return path


def hostname(guest: Guest) -> str:
    # A simulated guest (agent root other than /) names itself in <root>/etc/hostname.
    if str(guest.root) != "/":
        name = guest.read("/etc/hostname")
        if name:
            return name
    return socket.gethostname()


def run_checks(ctx: Context) -> List[CheckResult]:
    results: List[CheckResult] = []
    for fn in system_checks.CHECKS + gpu_checks.CHECKS:
        results += run_check(fn, ctx)
    if ctx.workloads:
        for fn in workloads.CHECKS:
            results += run_check(fn, ctx)
    return complete(results, ctx)


def complete(results: List[CheckResult], ctx: Context) -> List[CheckResult]:
    """Every check of metrics.CHECKS gets a result: a guest passes only on evidence, so one that produced
    none is an error (unless optional), never silently absent. Not applicable: workloads turned off by the
    operator (``--skip-workloads``), FP8 checks on a model without FP8 in hardware."""
    seen = {r.name for r in results}
    no_fp8 = not (ctx.expect.get("fp8") or {}).get("hipblaslt_type")
    for name in metrics.CHECKS:
        if name in seen:
            continue
        if not ctx.workloads and name.startswith(metrics.WORKLOAD_PREFIXES):
            results.append(skip(name, "not judged: workloads turned off (--skip-workloads or the expectation's "
                                      "workloads: false)"))
        elif no_fp8 and name.startswith("fp8."):
            results.append(skip(name, "not applicable: %s has no FP8 in hardware" % ctx.expect["model"]))
        else:
            results.append(unjudged(ctx, name, "the agent produced no result for this check (an earlier step "
                                               "failed: see the checks before it)"))
    return results


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vgpu-agent", description="Validate this guest's AMD GPU; prints JSON.")
    parser.add_argument("--expect", required=True, help="expectation JSON (vgpu.agent-expect/v1)")
    parser.add_argument("--workdir", help="where to build and run workloads (default: a temporary folder)")
    parser.add_argument("--skip-workloads", action="store_true", help="only inspect; run no GPU workload")
    parser.add_argument("--root", help="read /sys, /proc, /opt/rocm under this folder (simulated guests)")
    parser.add_argument("--version", action="version", version="vgpu-agent " + __version__)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)  # argparse exits 2 on a bad command line
    try:
        expect = load_expectation(args.expect)
    except BadInvocation as exc:
        print("vgpu-agent: error: %s" % exc, file=sys.stderr)
        return 2
    guest = Guest(root=args.root)
    own_workdir = not args.workdir
    try:
        workdir = tempfile.mkdtemp(prefix="vgpu-agent-") if own_workdir else os.path.abspath(args.workdir)
        os.makedirs(workdir, mode=0o700, exist_ok=True)
    except OSError as exc:
        print("vgpu-agent: error: cannot create work folder %s: %s" % (args.workdir or "in $TMPDIR",
                                                                     exc.strerror or exc), file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    clock = time.monotonic()
    ctx = Context(guest, expect, workdir, archive_root(),
                  workloads=not args.skip_workloads and expect.get("workloads", True) is not False)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the one JSON document only
            checks = run_checks(ctx)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    out = AgentResult(hostname(guest), __version__, started, round(time.monotonic() - clock, 3), checks)
    sys.stdout.write(json.dumps(out.to_dict(), sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0
