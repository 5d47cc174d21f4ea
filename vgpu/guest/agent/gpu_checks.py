"""What ROCm sees: rocminfo GPU agents and amd-smi static information (docs/hardware.md §7).

The expected compute units and VRAM are those of the profile's partition (docs/hardware.md §2),
computed on the host into the expectation. Standard library only, Python >= 3.8.
"""

from __future__ import annotations

from typing import Any, List, Optional

from . import base
from .base import Context, error, result, skip, unjudged
from .parsers.common import ParseError
from .result import CheckResult

GIB_PER_MB = 1.0 / 1024.0


def _joined(values: List[Any]) -> Any:
    """One value when all agree, else all of them comma-separated."""
    unique = sorted({str(v) for v in values})
    return values[0] if len(unique) == 1 else ", ".join(unique)


def vram_band(ctx: Context) -> Optional[tuple]:
    """(lowest, highest) GiB the partition may report, or None where its VRAM is not known."""
    low, high = ctx.expect.get("vram_tolerance") or (0.95, 1.02)
    want = ctx.expect.get("vram_gib")
    return None if want is None else (want * low, want * high)


def _vram_ok(ctx: Context, gib: Optional[float]) -> bool:
    band = vram_band(ctx)
    return gib is not None and band is not None and band[0] <= gib <= band[1]


def check_rocminfo(ctx: Context) -> List[CheckResult]:
    """GPU agents with the model's gfx target and the partition's CUs and VRAM."""
    from .parsers.rocminfo import parse_rocminfo

    arch = ctx.expect["arch"]
    run = ctx.guest.run(["rocminfo"], base.TIMEOUTS["query"])
    if not run.ok:
        why = run.why() + ("" if not run.missing else ": install ROCm %s (rocminfo package)" % ctx.expect["rocm"])
        return [error("rocminfo.gfx_target", why, arch),
                error("rocminfo.compute_units", "rocminfo did not run"), error("rocminfo.vram", "rocminfo did not run")]
    try:
        gpus = parse_rocminfo(run.stdout).gpus
    except ParseError as exc:
        why = "rocminfo output not understood: %s" % exc
        return [error("rocminfo.gfx_target", why, arch), error("rocminfo.compute_units", why),
                error("rocminfo.vram", why)]
    if not gpus:
        return [result("rocminfo.gfx_target", False, "no GPU agent", arch, None,
                       "rocminfo lists no GPU agent: is amdgpu bound and the user in groups render and video?")]
    targets = [g.gfx_target for g in gpus]
    ctx.state["gfx"] = targets[0] if targets[0] else arch
    out = [result("rocminfo.gfx_target", all(t == arch for t in targets), _joined(targets), arch, None,
                  "%d GPU agent(s): %s" % (len(gpus), _joined([g.marketing_name for g in gpus])))]
    out.append(_cu_result("rocminfo.compute_units", ctx, [g.compute_units for g in gpus]))
    gibs = [None if g.vram_kb is None else round(g.vram_kb / 1024.0 ** 2, 2) for g in gpus]
    out.append(_vram_result("rocminfo.vram", ctx, gibs, "coarse-grained GLOBAL pool"))
    return out


def _cu_result(name: str, ctx: Context, cus: List[Optional[int]]) -> CheckResult:
    want = ctx.expect.get("compute_units")
    if want is None:
        return unjudged(ctx, name, "no CU count known for %s: set validation.compute_units in the profile or make "
                        "%s optional" % (ctx.expect["model"], name), _joined(cus), "CU")
    part = ctx.expect.get("compute_partition") or "whole GPU"
    ok = all(c == want for c in cus)
    detail = "%s partition of %s" % (part, ctx.expect["model"])
    if not ok:
        detail += ": the guest sees a different partition than the profile asks for (check the host's vf_num "
        detail += "and accelerator_partition_mode)"
    return result(name, ok, _joined(cus), want, "CU", detail)


def _vram_result(name: str, ctx: Context, gibs: List[Optional[float]], what: str) -> CheckResult:
    want = ctx.expect.get("vram_gib")
    if want is None:
        return unjudged(ctx, name, "VRAM of a %s/%s partition is UNVERIFIED: nothing to judge %s GiB against; make "
                        "%s optional in the profile's validation block" % (
                            ctx.expect.get("compute_partition"), ctx.expect.get("memory_partition"), _joined(gibs),
                            name), _joined(gibs), "GiB")
    ok = all(_vram_ok(ctx, g) for g in gibs)
    low, high = ctx.expect.get("vram_tolerance") or (0.95, 1.02)
    detail = "%s; accepted %.1f-%.1f GiB for a %s/%s partition" % (
        what, want * low, want * high, ctx.expect.get("compute_partition") or "SPX",
        ctx.expect.get("memory_partition") or "NPS1")
    return result(name, ok, _joined(gibs), want, "GiB", detail)


def check_amdsmi(ctx: Context) -> List[CheckResult]:
    """``amd-smi static`` agrees with the expectation: device id, gfx target, CUs, partition."""
    from .parsers.amdsmi import parse_amdsmi

    run = ctx.guest.run(["amd-smi", "static", "--json"], base.TIMEOUTS["query"])
    if not run.ok:
        why = run.why() + ("" if not run.missing else ": install amd-smi-lib")
        return [error("amdsmi.static", why), error("amdsmi.partition", why)]
    try:
        gpus = parse_amdsmi(run.stdout)
    except ParseError as exc:
        why = "amd-smi static --json output not understood: %s" % exc
        return [error("amdsmi.static", why), error("amdsmi.partition", why)]
    return [_static_result(ctx, gpus), _partition_result(ctx, gpus)]


def _static_result(ctx: Context, gpus: list) -> CheckResult:
    ids = set(ctx.expect["device_ids"])
    problems = []
    for g in gpus:
        if g.device_id_hex not in ids:
            problems.append("GPU %d device id %s" % (g.index, g.device_id_hex))
        if g.gfx_target and g.gfx_target != ctx.expect["arch"]:
            problems.append("GPU %d target %s" % (g.index, g.gfx_target))
        want_cu = ctx.expect.get("compute_units")
        if want_cu is not None and g.compute_units is not None and g.compute_units != want_cu:
            problems.append("GPU %d has %d CUs" % (g.index, g.compute_units))
    first = gpus[0]
    measured = "%s %s %s CU" % (first.device_id_hex, first.gfx_target or "?", first.compute_units)
    expected = "%s %s %s CU" % ("/".join(sorted(ids)), ctx.expect["arch"], ctx.expect.get("compute_units"))
    detail = "; ".join(problems) if problems else "%d GPU(s): %s" % (len(gpus), first.market_name or "")
    return result("amdsmi.static", not problems, measured, expected, None, detail)


def _partition_result(ctx: Context, gpus: list) -> CheckResult:
    want_c, want_m = ctx.expect.get("compute_partition"), ctx.expect.get("memory_partition")
    if not want_c:
        return skip("amdsmi.partition", "not applicable: the profile names no partition")
    want = "%s/%s" % (want_c, want_m) if want_m else want_c
    seen = [(g.compute_partition, g.memory_partition) for g in gpus]
    if all(c is None for c, _ in seen):
        seen = _table_partitions(ctx)
    if not seen:
        return unjudged(ctx, "amdsmi.partition", "amd-smi reports no partition mode on this guest", expected=want)
    # A mode amd-smi leaves out (N/A on some VFs) is not held against the guest.
    ok = all(c == want_c and (m is None or want_m is None or m == want_m) for c, m in seen)
    measured = _joined(["%s/%s" % (c, m) if m else str(c) for c, m in seen])
    return result("amdsmi.partition", ok, measured, want, None,
                  "" if ok else "the guest's partition mode differs from the profile's")


def _table_partitions(ctx: Context) -> list:
    """(compute, memory) per GPU from the default ``amd-smi`` table ("SPX/NPS1"), where static has none."""
    try:
        from .parsers.amdsmi_misc import parse_amdsmi_default
    except ImportError:
        return []
    run = ctx.guest.run(["amd-smi"], base.TIMEOUTS["query"])
    if not run.ok:
        return []
    try:
        table = parse_amdsmi_default(run.stdout)
    except ParseError:
        return []
    return [(g.compute_partition, g.memory_partition) for g in table.gpus]


CHECKS = (check_rocminfo, check_amdsmi)
check_rocminfo.check_name = "rocminfo.gfx_target"  # type: ignore[attr-defined]
check_amdsmi.check_name = "amdsmi.static"  # type: ignore[attr-defined]
