"""Pass/fail thresholds for the guest workloads: AMD's published targets, read from a data file.

GEMM throughput (FP8, BF16, FP16 TFLOPS): one row per GPU model x compute/memory partition x dtype in
vgpu/guest/data/gemm-thresholds.yaml, each naming its source (the ROCm Validation Suite ``gst_single.conf``
file, action and ``target_stress`` field) and the method AMD measured it with (shape, transposes,
initialisation, duration); the agent runs that same GEMM. RVS targets are pass gates already, so the
default tolerance is 1.0. A partition AMD gives no figure for gets the whole-GPU figure x its share of
compute units x the file's ``derive.factor``, and its source says so.

HBM bandwidth GB/s: there is no AMD target, only the catalog's *peak*; the threshold is peak x the smaller
of the CU and memory share x 0.5 (a copy kernel never reaches the peak; 0.5 still flags a starved
partition). Documented in docs/agent.md.

A profile override (an absolute value) wins. A metric without any figure gets ``value=None`` and a reason:
the agent then reports the check as an error (nothing to judge against), never a made-up number.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from importlib import resources

from vgpu.catalog import ComputePartition, GpuModel, MemoryPartition
from vgpu.errors import InputError

TABLE = "gemm-thresholds.yaml"
TABLE_SCHEMA = "vgpu.gemm-thresholds/v1"
GEMM_DTYPES = ("fp8", "bf16", "fp16")
# metric: (unit, dtype of the GEMM table or None)
METRICS = {"fp8_tflops": ("TFLOPS", "fp8"), "bf16_tflops": ("TFLOPS", "bf16"), "fp16_tflops": ("TFLOPS", "fp16"),
           "hbm_gbps": ("GB/s", None)}
DEFAULT_TOLERANCE = {"fp8_tflops": 1.0, "bf16_tflops": 1.0, "fp16_tflops": 1.0, "hbm_gbps": 0.5}
_METHOD_KEYS = {"m": int, "n": int, "k": int, "transA": str, "transB": str, "init": str, "seconds": (int, float)}


@dataclass(frozen=True)
class Threshold:
    """The lowest acceptable measurement for one metric, or ``value=None`` with a ``reason``."""

    metric: str
    unit: str
    value: float | None
    reference: float | None = None  # AMD's figure the value comes from, in ``unit``
    share: float = 1.0
    tolerance: float | None = None
    source: str = ""
    reason: str = ""
    method: dict = field(default_factory=dict)  # how AMD measured it (GEMM shape, layout, init, seconds)
    derived: str = ""  # how a partition figure was derived from the whole-GPU one ("" for AMD's own)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Row:
    model: str
    compute: str
    memory: str
    dtype: str
    tflops: float
    method: dict
    source: str


@functools.lru_cache(maxsize=1)
def load_table() -> tuple[tuple[Row, ...], float, str]:
    """(rows, derive factor, why) from the shipped data file; a malformed file is an InputError naming it."""
    return _load()[0]


def unpublished() -> dict[str, str]:
    """Model -> why AMD gives no GEMM target for it (the table's ``unpublished`` section)."""
    return _load()[1]


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple[tuple[Row, ...], float, str], dict[str, str]]:
    import yaml

    text = resources.files("vgpu.guest").joinpath("data", TABLE).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    table = parse_table(data, TABLE)
    missing = data.get("unpublished") or {}
    if not isinstance(missing, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                for k, v in missing.items()):
        raise InputError(f"threshold table {TABLE}: unpublished must map a model to why it has no target")
    return table, dict(missing)


def parse_table(data: object, where: str) -> tuple[tuple[Row, ...], float, str]:
    def bad(what: str) -> InputError:
        return InputError(f"threshold table {where}: {what}")

    if not isinstance(data, dict) or data.get("schema") != TABLE_SCHEMA:
        raise bad(f"schema is not {TABLE_SCHEMA}")
    methods = data.get("methods") or {}
    for name, method in methods.items():
        if not isinstance(method, dict) or any(not isinstance(method.get(k), t) for k, t in _METHOD_KEYS.items()):
            raise bad(f"method {name!r} needs {', '.join(_METHOD_KEYS)}")
    rows = []
    for i, r in enumerate(data.get("rows") or []):
        if not isinstance(r, dict) or r.get("dtype") not in GEMM_DTYPES or r.get("method") not in methods:
            raise bad(f"row {i}: needs a dtype ({', '.join(GEMM_DTYPES)}) and a known method")
        value = r.get("tflops")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise bad(f"row {i}: tflops must be a positive number")
        if not str(r.get("source") or "").strip():
            raise bad(f"row {i}: names no source")
        rows.append(Row(str(r["model"]), str(r["compute"]), str(r["memory"]), r["dtype"], float(value),
                        dict(methods[r["method"]]), str(r["source"])))
    keys = [(r.model, r.compute, r.memory, r.dtype) for r in rows]
    if len(set(keys)) != len(keys):
        raise bad("a model/partition/dtype appears twice")
    derive = data.get("derive") or {}
    factor = derive.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise bad("derive.factor must be a number in (0, 1]")
    return tuple(rows), float(factor), str(derive.get("why") or "")


def partition_shares(compute: ComputePartition | None, memory: MemoryPartition | None) -> tuple[float, float]:
    """(CU share, memory share) of one partition; None means the whole GPU."""
    cu = 1.0 / compute.count if compute is not None else 1.0
    mem = 1.0 / memory.count if memory is not None else 1.0
    return cu, mem


def gemm_figure(model: str, compute: ComputePartition | None, memory: MemoryPartition | None,
                dtype: str) -> tuple[Row | None, float, str]:
    """(the row, its figure for this partition, how it was derived) or (None, 0, why there is none)."""
    rows, factor, why = load_table()
    c = compute.value if compute else "SPX"
    m = memory.value if memory else "NPS1"
    by_key = {(r.model, r.compute, r.memory, r.dtype): r for r in rows}
    exact = by_key.get((model, c, m, dtype))
    if exact is not None:
        return exact, exact.tflops, ""
    whole = by_key.get((model, "SPX", "NPS1", dtype))
    if whole is None:
        why = unpublished().get(model)
        return None, 0.0, (f"{why}: set validation.{dtype}_tflops_min in the profile from a calibration "
                           "run (docs/agent.md)") if why else f"no AMD {dtype.upper()} GEMM target for {model} in {TABLE}"
    cu_share = 1.0 / compute.count if compute else 1.0
    if cu_share >= 1.0:
        return whole, whole.tflops, f"AMD's SPX/NPS1 figure, used for SPX/{m}"
    value = whole.tflops * cu_share * factor
    return whole, value, (f"derived: AMD's whole-GPU {whole.tflops:g} TFLOPS x CU share 1/{compute.count} x "
                          f"{factor:g} ({why}); AMD publishes no {c}/{m} target")


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
    for metric, (unit, dtype) in METRICS.items():
        share = cu_share if dtype else min(cu_share, mem_share)
        method = {}
        if dtype:
            row, figure, derived = gemm_figure(model.name, compute, memory, dtype)
            method = dict(row.method) if row else {}
            source = row.source if row else ""
            reason = "" if row else derived
        else:
            figure = model.hbm_tbps * 1000.0 * share if model.hbm_tbps else 0.0
            derived = f"peak HBM {model.hbm_tbps:g} TB/s x share {share:g} (no AMD measured figure)" \
                if model.hbm_tbps else ""
            source, reason = "vgpu catalog peak HBM bandwidth", "" if model.hbm_tbps else \
                f"no HBM bandwidth figure for {model.name}"
        if metric in values:
            out[metric] = Threshold(metric, unit, values[metric], share=share, source="profile override",
                                    method=method)
        elif not figure:
            out[metric] = Threshold(metric, unit, None, share=share, reason=reason, method=method)
        else:
            tol = tolerance[metric]
            out[metric] = Threshold(metric, unit, round(figure * tol, 1), reference=round(figure, 3), share=share,
                                    tolerance=tol, source=source, method=method, derived=derived)
    return out


def _positive(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
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


def describe(thresholds: dict[str, Threshold]) -> list[str]:
    """One line per threshold, for ``vgpu profiles show`` and the plan: value, source, method, derivation."""
    lines = []
    for t in thresholds.values():
        if t.value is None:
            lines.append(f"{t.metric}: none ({t.reason}): the check fails unless made optional")
            continue
        how = ""
        if t.method:
            mm = t.method
            how = (f"; GEMM {mm['m']}x{mm['n']}x{mm['k']} {mm['transA']}{mm['transB']}, {mm['init']}, "
                   f"AMD ran {mm['seconds']:g} s")
        tol = "" if t.tolerance in (None, 1.0) else f" (x tolerance {t.tolerance:g})"
        lines.append(f"{t.metric}: >= {t.value:g} {t.unit}{tol}; {t.source}"
                     f"{'; ' + t.derived if t.derived else ''}{how}")
    return lines


def for_profile(profile) -> dict[str, Threshold]:  # noqa: ANN001 - a vgpu.model.profile.Profile
    """The thresholds a guest of ``profile`` is judged against (its model, partitions and overrides)."""
    gpu = profile.gpu
    return thresholds_for(gpu.catalog_model, gpu.compute_partition, gpu.memory_partition,
                          profile.validation.threshold_overrides() or None)
