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
from typing import Any, Dict, List

from . import base, gemm
from .base import Context, against, error, result, skip, unjudged
from .guest import TORCH_PYTHON_ENV
from .result import CheckResult

HIP_SOURCE = "hip/vgpu_checks.hip"
# What 1.25 * 2^-10 decodes to after the hardware's FP8 conversion (vgpu_checks.hip VGPU_FORMAT_PROBE): FNUZ
# e4m3 (bias 8, subnormals m * 2^-10) rounds it to 2^-10, OCP e4m3fn (bias 7, m * 2^-9) to 2^-9; checked
# against ml_dtypes in tests/unit/test_fp8_reference.py.
FORMAT_PROBE = {"fnuz": 2.0 ** -10, "ocp": 2.0 ** -9}
TORCH_INSTALL = ("install a ROCm PyTorch (pip install torch --index-url https://download.pytorch.org/whl/rocm<X.Y>) "
                 "or point VGPU_AGENT_TORCH_PYTHON at the python that has it")
HIP_CHECKS = ("hip.compile", "hip.device", "hip.vector_add", "hip.bandwidth", "hip.fp8_mfma")


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
        return [error("hip.compile", why, gfx)] + [error(n, "the HIP program did not build") for n in HIP_CHECKS[1:]]
    out = [result("hip.compile", True, gfx, gfx, None, "hipcc --offload-arch=%s in %.1f s" % (gfx, build.seconds))]
    run = ctx.guest.run([binary, "1024"], base.TIMEOUTS["workload"], cwd=ctx.workdir)
    lines = _json_lines(run.stdout)
    if not run.ok:
        failed = lines.get("error", {})
        why = run.why() + (" (%s: %s)" % (failed.get("call"), failed.get("error")) if failed else "")
        return out + [error(n, why) for n in HIP_CHECKS[1:]]
    return out + [_device(ctx, lines.get("device")), _vector_add(lines.get("vector_add")),
                  _bandwidth(ctx, lines.get("bandwidth")),
                  _fp8_mfma(ctx, lines.get("fp8_mfma"))]


def _device(ctx: Context, item: Any) -> CheckResult:
    """What HIP itself sees (hipGetDeviceProperties): the partition's CUs and VRAM, like rocminfo's."""
    from .gpu_checks import vram_band

    if not item or not isinstance(item.get("cus"), int) or not isinstance(item.get("vram_bytes"), int):
        return error("hip.device", "the HIP program printed no device line with cus and vram_bytes")
    gib = round(item["vram_bytes"] / 1024.0 ** 3, 2)
    want_cu, band = ctx.expect.get("compute_units"), vram_band(ctx)
    measured = "%d CU, %.2f GiB" % (item["cus"], gib)
    if want_cu is None or band is None:
        return unjudged(ctx, "hip.device", "no CU count or VRAM known for this partition: %s seen by HIP" % measured,
                        measured)
    problems = [] if item["cus"] == want_cu else ["HIP sees %d CUs, the partition has %d" % (item["cus"], want_cu)]
    if not band[0] <= gib <= band[1]:
        problems.append("HIP sees %.2f GiB, accepted %.1f-%.1f GiB" % (gib, band[0], band[1]))
    detail = "; ".join(problems) or "hipGetDeviceProperties of %s (%s)" % (item.get("name"), item.get("arch"))
    return result("hip.device", not problems, measured, "%d CU, %g GiB" % (want_cu, ctx.expect["vram_gib"]), None,
                  detail)


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
    return against(ctx, "hip.bandwidth", float(item["gbps"]), "hbm_gbps", detail)


def _fp8_mfma(ctx: Context, item: Any) -> CheckResult:
    if not item:
        return error("hip.fp8_mfma", "the HIP program printed no fp8_mfma result")
    if item.get("skipped"):
        if ctx.expect["fp8"].get("hipblaslt_type"):  # the model has FP8: a program without it proves nothing
            return unjudged(ctx, "hip.fp8_mfma", "the HIP program ran no FP8 tile (%s) although %s has FP8" % (
                item["skipped"], ctx.expect["model"]))
        return skip("hip.fp8_mfma", "not applicable: %s" % item["skipped"])
    bad = int(item.get("mismatches", -1))
    fmt = ctx.expect["fp8"]["format"]
    detail = "%s FP8 MFMA 16x16x32 tile: expected %s, got %s" % (fmt.upper(), item.get("expected"), item.get("got"))
    probe = item.get("format_probe")
    if not isinstance(probe, (int, float)) or isinstance(probe, bool):
        return unjudged(ctx, "hip.fp8_mfma", "the HIP program printed no format_probe: cannot tell FNUZ from OCP")
    seen = [name for name, value in FORMAT_PROBE.items() if float(probe) == value]
    detail += "; 1.25*2^-10 decoded as %g: %s" % (probe, "%s encoding" % seen[0].upper() if seen else "neither")
    if seen != [fmt]:
        detail += ", but %s uses %s (docs/hardware.md §8)" % (ctx.expect["model"], fmt.upper())
        return result("hip.fp8_mfma", False, bad if bad else 1, 0, "mismatches", detail)
    return result("hip.fp8_mfma", bad == 0, bad, 0, "mismatches", detail)


def check_hipblaslt(ctx: Context) -> List[CheckResult]:
    """FP8 GEMM with hipblaslt-bench, sustained (gemm.py), then hipBLASLt's own verification."""
    if not ctx.expect["fp8"].get("hipblaslt_type"):
        return [skip("fp8.hipblaslt", "not applicable: %s has no FP8 in hardware" % ctx.expect["model"])]
    return gemm.missing(ctx, ["fp8.hipblaslt", "fp8.hipblaslt.verify"]) or [gemm.sustained(ctx, "fp8"),
                                                                            gemm.verify(ctx)]


def check_hipblaslt_bf16(ctx: Context) -> List[CheckResult]:
    """The same method in BF16 on the same partition: judged against AMD's BF16 target, and what FP8 is
    compared with in a migration (docs/validate.md)."""
    return gemm.missing(ctx, ["bf16.hipblaslt"]) or [gemm.sustained(ctx, "bf16")]


def check_torch(ctx: Context) -> List[CheckResult]:
    """torch._scaled_mm FP8 GEMM in the guest's python (fp8_torch.py), when a ROCm PyTorch is there."""
    dtype = ctx.expect["fp8"].get("torch_dtype")
    if not dtype:
        return [skip("fp8.torch", "not applicable: %s has no FP8 in hardware" % ctx.expect["model"])]
    python = ctx.guest.env.get(TORCH_PYTHON_ENV) or sys.executable
    shape = gemm.method(ctx, "fp8")
    argv = [python, "-m", "vgpu.guest.agent.fp8_torch", "--dtype", dtype]
    for key in ("m", "n", "k"):
        argv += ["-" + key, str(int(shape[key]))]
    # Prepend the agent archive: the guest's own PYTHONPATH may be where its torch lives.
    pythonpath = os.pathsep.join(p for p in (ctx.archive, ctx.guest.env.get("PYTHONPATH", "")) if p)
    run = ctx.guest.run(argv, base.TIMEOUTS["workload"], cwd=ctx.workdir, extra_env={"PYTHONPATH": pythonpath})
    try:
        data = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {}
    except ValueError:
        data = {}
    if not run.ok or not isinstance(data, dict) or data.get("status") not in ("ok", "skip", "error"):
        why = run.why() or "fp8_torch printed no JSON result"
        return [unjudged(ctx, "fp8.torch", why), unjudged(ctx, "fp8.torch.error", why)]
    if data["status"] != "ok":
        why = str(data.get("reason"))
        if data["status"] == "skip":  # no torch, or a torch without ROCm/FP8: a missing tool
            why += ": " + TORCH_INSTALL
        return [unjudged(ctx, "fp8.torch", why), unjudged(ctx, "fp8.torch.error", why)]
    where = "torch %s (HIP %s) on %s" % (data.get("torch"), data.get("hip"), data.get("device"))
    perf = against(ctx, "fp8.torch", float(data["tflops"]), "fp8_tflops", "%s %s" % (dtype, where))
    err = result("fp8.torch.error", bool(data.get("ok")), round(float(data["rel_error"]), 5), data.get("bound"),
                 "relative error", "vs float32 on the dequantized inputs; %.4f vs the unquantized inputs (bound %s)"
                 % (float(data.get("quant_error", 0)), data.get("quant_bound")))
    return [perf, err]


CHECKS = (check_hip, check_hipblaslt, check_hipblaslt_bf16, check_torch)
for _fn, _name in zip(CHECKS, ("hip.compile", "fp8.hipblaslt", "bf16.hipblaslt", "fp8.torch")):
    _fn.check_name = _name  # type: ignore[attr-defined]
