"""Sustained GEMMs with hipblaslt-bench, the way AMD's RVS ``gst`` gates a GPU (thresholds.py's data file).

Each dtype runs the GEMM of its threshold row (RVS shape, TN layout, RVS initialisation) for about
``seconds`` (default 10 s, ``--quick`` 2 s) in ``windows`` consecutive runs of the same command: each run
warms up (``-j``), cycles through 512 MB of rotating buffers (``--rotating 512``, so the caches never hold
the inputs, as in AMD's max-achievable-FLOPs method) and times with the GPU timer. The result is the
*lowest* window (what the VF sustains), with the median and first window and the clocks hipblaslt-bench
reports with HIPBLASLT_BENCH_FREQ=1 (lowest average SCLK, median MCLK): a VF that starts at full speed and
throttles after a few seconds fails with a sentence that says so.

FP8 type names depend on the guest's ROCm (RELEASES-2026 §5, ROCm/hipBLASLt PR #1654): up to ROCm 6.3
hipBLASLt has no ``f8_fnuz_r`` and ``f8_r`` is FNUZ on gfx942; later releases name FNUZ ``f8_fnuz_r`` and OCP
``f8_r`` (gfx950). Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional, Tuple

from . import base
from .base import Context, against, result, unjudged
from .result import CheckResult

DEFAULT_SECONDS, QUICK_SECONDS = 10.0, 2.0
WINDOW_SECONDS = 2.0  # one hipblaslt-bench run; several make the time series
ROTATING_MB = 512
FREQ_ENV = {"HIPBLASLT_BENCH_FREQ": "1"}
# hipBLASLt's norm_error compares against its CPU reference on the same FP8 inputs: only the bf16 output
# rounding (2**-9) and summation order differ (same bound as fp8ref.GEMM_ERROR_BOUND).
NORM_ERROR_BOUND = 0.01
VERIFY_SHAPE = 1024  # the CPU reference of hipblaslt-bench -v is slow: verify on a smaller GEMM
FNUZ_RENAME = (6, 4)  # first ROCm whose hipBLASLt names FNUZ f8_fnuz_r
INSTALL = "install hipBLASLt's clients (hipblaslt-bench: package hipblaslt-clients / hipblaslt-tests)"


def rocm_release(ctx: Context) -> Tuple[int, ...]:
    """The guest's ROCm release from /opt/rocm/.info/version ("6.3.1-48" -> (6, 3, 1)); () when unreadable."""
    text = (ctx.guest.read("/opt/rocm/.info/version") or "").split("-")[0]
    parts = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def input_type(ctx: Context, dtype: str) -> str:
    """hipBLASLt's name of the input type for ``dtype`` on this guest's ROCm."""
    if dtype != "fp8":
        return {"bf16": "bf16_r", "fp16": "f16_r"}[dtype]
    fp8 = ctx.expect["fp8"]
    release = rocm_release(ctx)
    if fp8.get("format") == "fnuz" and release and release < FNUZ_RENAME:
        return "f8_r"  # hipBLASLt <= 6.3: f8_r is FNUZ on gfx942
    return fp8["hipblaslt_type"]


def method(ctx: Context, dtype: str) -> Dict[str, Any]:
    """The GEMM of the threshold row (expectation ``gemm.<dtype>``), with a plain default."""
    default = {"m": 4864, "n": 4096, "k": 8192, "transA": "T", "transB": "N", "init": "rand_int"}
    return dict(default, **((ctx.expect.get("gemm") or {}).get(dtype) or {}))


def plan(ctx: Context, dtype: str) -> Tuple[int, int]:
    """(windows, iterations per window) for about ``ctx.expect['seconds']`` at the threshold's rate."""
    seconds = float(ctx.expect.get("seconds") or DEFAULT_SECONDS)
    windows = max(1, int(round(seconds / WINDOW_SECONDS)))
    mm = method(ctx, dtype)
    flops = 2.0 * mm["m"] * mm["n"] * mm["k"]
    rate = ctx.threshold(dtype + "_tflops").get("value") or 100.0  # TFLOPS; without one a guess for the length
    iters = int(math.ceil(seconds / windows * float(rate) * 1e12 / flops))
    return windows, max(10, iters)


def bench_argv(ctx: Context, dtype: str, verify: bool = False) -> List[str]:
    mm = method(ctx, dtype)
    t = input_type(ctx, dtype)
    out = "f16_r" if dtype == "fp16" else "bf16_r"
    size = [VERIFY_SHAPE] * 3 if verify else [mm["m"], mm["n"], mm["k"]]
    argv = ["hipblaslt-bench", "-m", str(size[0]), "-n", str(size[1]), "-k", str(size[2]),
            "--transA", mm["transA"], "--transB", mm["transB"], "--a_type", t, "--b_type", t, "--c_type", out,
            "--d_type", out, "--compute_type", "f32_r", "--function", "matmul", "--initialization", mm["init"]]
    if verify:
        return argv + ["-v", "-i", "1", "-j", "0"]
    _, iters = plan(ctx, dtype)
    return argv + ["--rotating", str(ROTATING_MB), "--use_gpu_timer", "-j", str(max(10, iters // 10)),
                   "-i", str(iters)]


def _bench_row(ctx: Context, argv: List[str]):
    """(row, "", run) for the first result row, or (None, why, run)."""
    from .parsers.common import ParseError
    from .parsers.hipblaslt import parse_hipblaslt_bench

    run = ctx.guest.run(argv, base.TIMEOUTS["workload"], cwd=ctx.workdir, extra_env=FREQ_ENV)
    if not run.ok:
        return None, run.why(), None
    try:
        bench = parse_hipblaslt_bench(run.stdout)
    except ParseError as exc:
        return None, "hipblaslt-bench output not understood: %s" % exc, None
    return (bench.rows[0], "", bench) if bench.rows else (None, "hipblaslt-bench printed no result row", bench)


def sustained(ctx: Context, dtype: str) -> CheckResult:
    """``<dtype>.hipblaslt``: the lowest window's TFLOPS against the threshold, with the time series."""
    name = dtype + ".hipblaslt"
    argv = bench_argv(ctx, dtype)
    windows, _ = plan(ctx, dtype)
    series, clocks, mclk, device = [], [], [], ""
    for _ in range(windows):
        row, why, bench = _bench_row(ctx, argv)
        if row is None or row.gflops is None:
            return unjudged(ctx, name, why or "hipblaslt-bench printed no hipblaslt-Gflops")
        if row.values.get("a_type") not in (None, argv[argv.index("--a_type") + 1]):
            return unjudged(ctx, name, "hipblaslt-bench ran %s, not %s" % (row.values.get("a_type"),
                                                                           argv[argv.index("--a_type") + 1]))
        series.append(row.gflops / 1000.0)
        clocks += [c for c in (row.number("lowest-avg-freq"),) if c is not None]
        mclk += [c for c in (row.number("median-MCLK"),) if c is not None]
        device = device or bench.device_summary
    check = against(ctx, name, min(series), dtype + "_tflops", describe_series(argv, series, clocks, mclk, device))
    if check.status == "fail":
        check.detail = throttle_sentence(series, float(check.expected)) + "; " + check.detail
    return check


def describe_series(argv: List[str], series: List[float], clocks: List[float], mclk: List[float],
                    device: str) -> str:
    i = argv.index
    shape = "%sx%sx%s %s%s %s %s" % (argv[i("-m") + 1], argv[i("-n") + 1], argv[i("-k") + 1], argv[i("--transA") + 1],
                                      argv[i("--transB") + 1], argv[i("--a_type") + 1], argv[i("--initialization") + 1])
    text = "GEMM %s, %d window(s) of %s calls: lowest %.1f, median %.1f, first %.1f TFLOPS" % (
        shape, len(series), argv[i("-i") + 1], min(series), statistics.median(series), series[0])
    if clocks:
        text += "; SCLK lowest %g MHz, median %g MHz" % (min(clocks), statistics.median(clocks))
    if mclk:
        text += "; MCLK median %g MHz" % statistics.median(mclk)
    if len(series) == 1:
        text += "; one window only (quick mode): not a sustained result"
    return text + (" (%s)" % device if device else "")


def throttle_sentence(series: List[float], threshold: float) -> str:
    """Why a series failed: a VF that throttled after a good start, or one that was slow throughout."""
    low = min(series)
    where = series.index(low) + 1
    if series[0] >= threshold > low:
        return ("throughput fell from %.1f TFLOPS in the first window to %.1f in window %d of %d: the VF throttles "
                "after a few seconds (power or thermal cap; compare the SCLK figures)" % (series[0], low, where,
                                                                                          len(series)))
    return "below %.1f TFLOPS in every window (median %.1f): slow from the start" % (threshold,
                                                                                  statistics.median(series))


def verify(ctx: Context) -> CheckResult:
    """``fp8.hipblaslt.verify``: hipBLASLt's own CPU reference on a 1024^3 FP8 GEMM of the same types."""
    name = "fp8.hipblaslt.verify"
    row, why, _ = _bench_row(ctx, bench_argv(ctx, "fp8", verify=True))
    if row is None:
        return unjudged(ctx, name, why, expected=NORM_ERROR_BOUND)
    if row.norm_error is None:
        return unjudged(ctx, name, "hipblaslt-bench -v printed no norm_error column", expected=NORM_ERROR_BOUND)
    ok = row.norm_error <= NORM_ERROR_BOUND
    return result(name, ok, row.norm_error, NORM_ERROR_BOUND, "norm_error",
                  "hipBLASLt CPU reference on a %d^3 GEMM" % VERIFY_SHAPE)


def missing(ctx: Context, names: List[str]) -> Optional[List[CheckResult]]:
    """Errors (or optional skips) for ``names`` when hipblaslt-bench is not installed; None when it is."""
    if ctx.guest.which("hipblaslt-bench") is not None:
        return None
    why = "hipblaslt-bench not found on PATH or in /opt/rocm/bin: " + INSTALL
    return [unjudged(ctx, n, why) for n in names]
