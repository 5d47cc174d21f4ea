"""Workloads on the guest GPU: the shipped HIP program, hipBLASLt FP8 GEMM, torch._scaled_mm FP8.

docs/hardware.md §8: FP8 is FNUZ on gfx942 (hipBLASLt ``f8_fnuz_r``, torch float8_e4m3fnuz) and
OCP on gfx950 (``f8_r``, float8_e4m3fn); the format comes from the expectation, the gfx target
from rocminfo. Thresholds come from the expectation (vgpu/guest/thresholds.py).
Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import json
import os
import pkgutil
import sys
from typing import Any, Dict, List, Optional

from . import base
from .base import Context, against, error, result, skip
from .guest import TORCH_PYTHON_ENV
from .result import CheckResult

HIP_SOURCE = "hip/vgpu_checks.hip"
HIP_CHECKS = ("hip.compile", "hip.vector_add", "hip.bandwidth", "hip.fp8_mfma")
# hipBLASLt's norm_error compares against its CPU reference on the same FP8 inputs: only the
# bf16 output rounding (2**-9) and summation order differ (same bound as fp8ref.GEMM_ERROR_BOUND).
HIPBLASLT_NORM_ERROR_BOUND = 0.01
VERIFY_SHAPE = 1024  # the CPU reference of hipblaslt-bench -v is slow: verify on a smaller GEMM


def _json_lines(text: str) -> Dict[str, Dict[str, Any]]:
    """The HIP program's result lines by their "test" key; other lines are ignored."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and "test" in item:
                out[str(item["test"])] = item
    return out


def check_hip(ctx: Context) -> List[CheckResult]:
    """Compile the shipped HIP source for the detected gfx target with hipcc, run it, judge it."""
    gfx = ctx.state.get("gfx") or ctx.expect["arch"]
    source = os.path.join(ctx.workdir, "vgpu_checks.hip")
    binary = os.path.join(ctx.workdir, "vgpu_checks")
    with open(source, "wb") as fh:
        fh.write(pkgutil.get_data(__package__, HIP_SOURCE) or b"")
    build = ctx.guest.run(["hipcc", "--offload-arch=" + gfx, "-O3", "-o", binary, source],
                          base.TIMEOUTS["compile"], cwd=ctx.workdir)
    if not build.ok:
        why = build.why() + (": install ROCm's HIP SDK (hipcc)" if build.missing else "")
        return [error("hip.compile", why, gfx)] + [skip(n, "the HIP program did not build") for n in HIP_CHECKS[1:]]
    out = [result("hip.compile", True, gfx, gfx, None, "hipcc --offload-arch=%s in %.1f s" % (gfx, build.seconds))]
    run = ctx.guest.run([binary, "1024"], base.TIMEOUTS["workload"], cwd=ctx.workdir)
    lines = _json_lines(run.stdout)
    if not run.ok:
        failed = lines.get("error", {})
        why = run.why() + (" (%s: %s)" % (failed.get("call"), failed.get("error")) if failed else "")
        return out + [error(n, why) for n in HIP_CHECKS[1:]]
    return out + [_vector_add(lines.get("vector_add")), _bandwidth(ctx, lines.get("bandwidth")),
                  _fp8_mfma(ctx, lines.get("fp8_mfma"))]


def _vector_add(item: Any) -> CheckResult:
    if not item:
        return error("hip.vector_add", "the HIP program printed no vector_add result")
    bad = int(item.get("mismatches", -1))
    detail = "%d elements compared one by one" % int(item.get("n", 0))
    if bad:
        detail += "; first wrong element at index %s" % item.get("first_bad")
    return result("hip.vector_add", bad == 0, bad, 0, "mismatches", detail)


def _bandwidth(ctx: Context, item: Any) -> CheckResult:
    if not item or "gbps" not in item:
        return error("hip.bandwidth", "the HIP program printed no bandwidth result")
    detail = "device-to-device copy, %.1f GB moved in %.3f s" % (float(item.get("bytes", 0)) / 1e9,
                                                                 float(item.get("seconds", 0)))
    return against("hip.bandwidth", float(item["gbps"]), ctx.threshold("hbm_gbps"), detail)


def _fp8_mfma(ctx: Context, item: Any) -> CheckResult:
    if not item:
        return error("hip.fp8_mfma", "the HIP program printed no fp8_mfma result")
    if item.get("skipped"):
        return skip("hip.fp8_mfma", str(item["skipped"]))
    bad = int(item.get("mismatches", -1))
    detail = "%s FP8 MFMA 16x16x32 tile: expected %s, got %s" % (
        ctx.expect["fp8"]["format"].upper(), item.get("expected"), item.get("got"))
    return result("hip.fp8_mfma", bad == 0, bad, 0, "mismatches", detail)


def hipblaslt_argv(ctx: Context, size: int, verify: bool, dtype: Optional[str] = None) -> List[str]:
    """hipblaslt-bench as AMD runs it for FP8 (docs/hardware.md §8), types per arch; ``dtype`` another
    input type (bf16_r: the BF16 GEMM the FP8 one is compared with)."""
    t = dtype or ctx.expect["fp8"]["hipblaslt_type"]
    argv = ["hipblaslt-bench", "-m", str(size), "-n", str(size), "-k", str(size), "--transA", "N", "--transB", "N",
            "--a_type", t, "--b_type", t, "--c_type", "bf16_r", "--d_type", "bf16_r", "--compute_type", "f32_r",
            "--function", "matmul"]
    return argv + (["-v", "-i", "1", "-j", "0"] if verify else ["-i", "50", "-j", "10"])


def check_hipblaslt(ctx: Context) -> List[CheckResult]:
    """FP8 GEMM with hipblaslt-bench: achieved TFLOPS against the threshold, then its verification."""
    if not ctx.expect["fp8"].get("hipblaslt_type"):
        return [skip("fp8.hipblaslt", "%s has no FP8 in hardware" % ctx.expect["model"])]
    if ctx.guest.which("hipblaslt-bench") is None:
        why = "hipblaslt-bench not found on PATH or in /opt/rocm/bin (it ships with hipBLASLt's clients)"
        return [skip("fp8.hipblaslt", why), skip("fp8.hipblaslt.verify", why)]
    size = int(ctx.expect.get("gemm", {}).get("m", 4096))
    return [_hipblaslt_perf(ctx, size), _hipblaslt_verify(ctx)]


def check_hipblaslt_bf16(ctx: Context) -> List[CheckResult]:
    """The same GEMM in BF16 on the same partition: what FP8 is compared with in a migration (docs/validate.md).
    Judged against AMD's measured BF16 figure where the catalog has one; otherwise reported without a verdict."""
    if ctx.guest.which("hipblaslt-bench") is None:
        return [skip("bf16.hipblaslt", "hipblaslt-bench not found on PATH or in /opt/rocm/bin")]
    size = int(ctx.expect.get("gemm", {}).get("m", 4096))
    row, why, device = _bench_row(ctx, hipblaslt_argv(ctx, size, verify=False, dtype="bf16_r"))
    if row is None or row.gflops is None:
        return [error("bf16.hipblaslt", why or "hipblaslt-bench printed no hipblaslt-Gflops")]
    if row.values.get("a_type") not in (None, "bf16_r"):
        return [error("bf16.hipblaslt", "hipblaslt-bench ran %s, not bf16_r" % row.values.get("a_type"))]
    detail = "bf16_r GEMM %dx%dx%d, %s us per call" % (size, size, size, row.us)
    detail += " (%s)" % device if device else ""
    return [against("bf16.hipblaslt", row.gflops / 1000.0, ctx.threshold("bf16_tflops"), detail)]


def _bench_row(ctx: Context, argv: List[str]):
    """(row, "", device) for the first result row, or (None, why, device); device is what the
    banner says about where it ran (count, device, max SCLK/MCLK: a throttled clock explains a
    slow result), "" without a banner."""
    from .parsers.common import ParseError
    from .parsers.hipblaslt import parse_hipblaslt_bench

    run = ctx.guest.run(argv, base.TIMEOUTS["workload"], cwd=ctx.workdir)
    if not run.ok:
        return None, run.why(), ""
    try:
        bench = parse_hipblaslt_bench(run.stdout)
    except ParseError as exc:
        return None, "hipblaslt-bench output not understood: %s" % exc, ""
    device = bench.device_summary
    return (bench.rows[0], "", device) if bench.rows else (None, "hipblaslt-bench printed no result row", device)


def _hipblaslt_perf(ctx: Context, size: int) -> CheckResult:
    row, why, device = _bench_row(ctx, hipblaslt_argv(ctx, size, verify=False))
    if row is None or row.gflops is None:
        return error("fp8.hipblaslt", why or "hipblaslt-bench printed no hipblaslt-Gflops")
    detail = "%s GEMM %dx%dx%d, %s us per call" % (ctx.expect["fp8"]["hipblaslt_type"], size, size, size, row.us)
    detail += " (%s)" % device if device else ""
    return against("fp8.hipblaslt", row.gflops / 1000.0, ctx.threshold("fp8_tflops"), detail)


def _hipblaslt_verify(ctx: Context) -> CheckResult:
    row, why, _ = _bench_row(ctx, hipblaslt_argv(ctx, VERIFY_SHAPE, verify=True))
    if row is None:
        return error("fp8.hipblaslt.verify", why, HIPBLASLT_NORM_ERROR_BOUND)
    if row.norm_error is None:
        return skip("fp8.hipblaslt.verify", "hipblaslt-bench -v printed no norm_error column")
    ok = row.norm_error <= HIPBLASLT_NORM_ERROR_BOUND
    return result("fp8.hipblaslt.verify", ok, row.norm_error, HIPBLASLT_NORM_ERROR_BOUND, "norm_error",
                  "hipBLASLt CPU reference on a %d^3 GEMM" % VERIFY_SHAPE)


def check_torch(ctx: Context) -> List[CheckResult]:
    """torch._scaled_mm FP8 GEMM in the guest's python (fp8_torch.py), when a ROCm PyTorch is there."""
    dtype = ctx.expect["fp8"].get("torch_dtype")
    if not dtype:
        return [skip("fp8.torch", "%s has no FP8 in hardware" % ctx.expect["model"])]
    python = ctx.guest.env.get(TORCH_PYTHON_ENV) or sys.executable
    gemm = ctx.expect.get("gemm") or {}
    argv = [python, "-m", "vgpu.guest.agent.fp8_torch", "--dtype", dtype]
    for key in ("m", "n", "k"):
        argv += ["-" + key, str(int(gemm.get(key, 4096)))]
    # Prepend the agent archive: the guest's own PYTHONPATH may be where its torch lives.
    pythonpath = os.pathsep.join(p for p in (ctx.archive, ctx.guest.env.get("PYTHONPATH", "")) if p)
    run = ctx.guest.run(argv, base.TIMEOUTS["workload"], cwd=ctx.workdir, extra_env={"PYTHONPATH": pythonpath})
    try:
        data = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {}
    except ValueError:
        data = {}
    if not run.ok or not isinstance(data, dict) or data.get("status") not in ("ok", "skip", "error"):
        return [error("fp8.torch", run.why() or "fp8_torch printed no JSON result")]
    if data["status"] != "ok":
        make = skip if data["status"] == "skip" else error
        return [make("fp8.torch", str(data.get("reason"))), make("fp8.torch.error", str(data.get("reason")))]
    where = "torch %s (HIP %s) on %s" % (data.get("torch"), data.get("hip"), data.get("device"))
    perf = against("fp8.torch", float(data["tflops"]), ctx.threshold("fp8_tflops"), "%s %s" % (dtype, where))
    err = result("fp8.torch.error", bool(data.get("ok")), round(float(data["rel_error"]), 5), data.get("bound"),
                 "relative error", "vs float32 on the dequantized inputs; %.4f vs the unquantized inputs (bound %s)"
                 % (float(data.get("quant_error", 0)), data.get("quant_bound")))
    return [perf, err]


CHECKS = (check_hip, check_hipblaslt, check_hipblaslt_bf16, check_torch)
for _fn, _name in zip(CHECKS, ("hip.compile", "fp8.hipblaslt", "bf16.hipblaslt", "fp8.torch")):
    _fn.check_name = _name  # type: ignore[attr-defined]
