"""Pass/fail thresholds for the guest workloads, derived from the catalog.

A threshold is AMD's reference figure for the whole GPU, scaled by the partition's share of it,
times a tolerance:

- FP8 / BF16 GEMM TFLOPS: AMD's *measured max-achievable* figure (ROCm blog "Measuring
  Max-Achievable FLOPs part 2", docs/hardware.md §1 and §8), never the peak, scaled by the
  partition's share of compute units (SPX 1, DPX 1/2, QPX 1/4, CPX 1/8). Default tolerance 0.7:
  a 4096^3 GEMM in a VM reaches less than AMD's tuned maximum; 0.7 still catches a partition
  that runs at half speed (throttling, wrong partition, emulated FP8).
- HBM bandwidth GB/s: the catalog only holds the *peak* HBM figure (there is no AMD measured
  figure), so the default tolerance is lower, 0.5: a simple copy kernel stays well below the
  peak on a healthy GPU, and 0.5 still flags a broken or starved partition. Scaled by the smaller
  of the CU share and the memory share (a few XCDs cannot pull the bandwidth of every HBM stack;
  which limit is tighter is UNVERIFIED, so the more lenient one is used).

A profile override (an absolute value) wins over the derived figure. A model without an AMD
figure gets ``value=None`` and a reason: the check then reports the measurement without judging
it, never against a made-up number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vgpu.catalog import ComputePartition, GpuModel, MemoryPartition
from vgpu.errors import InputError

METRICS = {
    # metric: (unit, catalog attribute, multiplier to the unit, what the figure is)
    "fp8_tflops": ("TFLOPS", "measured_fp8_tflops", 1.0, "AMD measured max-achievable FP8 GEMM"),
    "bf16_tflops": ("TFLOPS", "measured_bf16_tflops", 1.0, "AMD measured max-achievable BF16 GEMM"),
    "hbm_gbps": ("GB/s", "hbm_tbps", 1000.0, "peak HBM bandwidth (no AMD measured figure)"),
}
DEFAULT_TOLERANCE = {"fp8_tflops": 0.7, "bf16_tflops": 0.7, "hbm_gbps": 0.5}


@dataclass(frozen=True)
class Threshold:
    """The lowest acceptable measurement for one metric, or ``value=None`` with a ``reason``."""

    metric: str
    unit: str
    value: float | None
    reference: float | None = None  # the whole-GPU figure, in ``unit``
    share: float = 1.0
    tolerance: float | None = None
    source: str = ""
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def partition_shares(compute: ComputePartition | None, memory: MemoryPartition | None) -> tuple[float, float]:
    """(CU share, memory share) of one partition; None means the whole GPU."""
    cu = 1.0 / compute.count if compute is not None else 1.0
    mem = 1.0 / memory.count if memory is not None else 1.0
    return cu, mem


def thresholds_for(model: GpuModel, compute: ComputePartition | None = None,
                   memory: MemoryPartition | None = None, overrides: dict | None = None) -> dict[str, Threshold]:
    """One Threshold per metric in METRICS.

    ``overrides`` maps a metric to an absolute value (a profile's own threshold), and may hold
    ``tolerance``: a number for every metric or a {metric: number} mapping.
    Raises InputError for an unknown key or a value that is not a positive number.
    """
    values, tolerance = _split_overrides(overrides or {})
    cu_share, mem_share = partition_shares(compute, memory)
    out = {}
    for metric, (unit, attr, scale, what) in METRICS.items():
        share = cu_share if unit == "TFLOPS" else min(cu_share, mem_share)
        if metric in values:
            out[metric] = Threshold(metric, unit, values[metric], share=share, source="profile override")
            continue
        figure = getattr(model, attr)
        if figure is None:
            out[metric] = Threshold(metric, unit, None, share=share,
                                    reason=f"no AMD reference figure for {model.name} ({what})")
            continue
        tol = tolerance[metric]
        reference = figure * scale
        out[metric] = Threshold(
            metric, unit, round(reference * share * tol, 1), reference=reference, share=share, tolerance=tol,
            source=f"{what} {reference:g} {unit} x partition share {share:g} x tolerance {tol:g}")
    return out


def _positive(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InputError(f"threshold override {key}={value!r} must be a positive number",
                         hint="give an absolute value in the metric's unit, e.g. fp8_tflops: 800")
    return float(value)


def _split_overrides(overrides: dict) -> tuple[dict[str, float], dict[str, float]]:
    """Validated (absolute values, tolerances) from a profile's override mapping."""
    values: dict[str, float] = {}
    tolerance = dict(DEFAULT_TOLERANCE)
    for key, value in overrides.items():
        if key == "tolerance":
            tolerance.update(_tolerances(value))
        elif key in METRICS:
            if value is not None:
                values[key] = _positive(key, value)
        else:
            raise InputError(f"unknown threshold {key!r}; known: {', '.join([*METRICS, 'tolerance'])}")
    return values, tolerance


def _tolerances(value: object) -> dict[str, float]:
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(METRICS))
        if unknown:
            raise InputError(f"unknown metric in tolerance: {', '.join(map(str, unknown))}")
        items = value.items()
    else:
        items = ((m, value) for m in METRICS)
    out = {}
    for metric, tol in items:
        tol = _positive(f"tolerance.{metric}", tol)
        if tol > 1.5:
            raise InputError(f"tolerance {tol:g} for {metric} is a fraction of AMD's figure and must be <= 1.5")
        out[metric] = tol
    return out
