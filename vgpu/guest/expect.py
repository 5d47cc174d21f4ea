"""What the guest agent should find: the JSON expectation (schema ``vgpu.agent-expect/v1``).

Built on the host from the catalog and the profile, copied to the guest next to the agent.
The agent (Python 3.8, stdlib only) never imports the catalog: everything it compares against is
in this document.
"""

from __future__ import annotations

from vgpu.catalog import DEFAULT, Catalog, ComputePartition, GpuModel, MemoryPartition
from vgpu.errors import InputError
from vgpu.guest.agent import gemm, metrics
from vgpu.guest.agent.result import EXPECT_SCHEMA
from vgpu.guest.thresholds import thresholds_for
# rocminfo and amd-smi report a little less VRAM than the catalog's nominal size (firmware and
# driver reservations: 191.7 GiB on a real MI300X VF guest, fixture rocminfo/guest-mi300x-vf-droplet).
VRAM_TOLERANCE = (0.95, 1.02)


def build_expectation(model: str, *, compute: str | None, memory: str | None, is_vf: bool,
                      overrides: dict | None = None, rocm: str = "7.0", driver: str = "30.10",
                      workloads: bool = True, optional: dict | None = None, quick: bool = False,
                      catalog: Catalog = DEFAULT) -> dict:
    """The JSON-able expectation for one guest. Raises InputError for anything the catalog refutes.

    ``optional`` maps check names the operator allows to go unjudged to why (the profile's
    ``validation.optional``, ``vgpu validate --optional``); ``quick`` runs each GEMM about 2 s instead of 10.
    """
    gpu = catalog.by_name(model)
    if gpu is None:
        raise InputError(f"unknown GPU model {model!r}; known: {', '.join(catalog.names())}")
    cpart = _parse(ComputePartition, compute, "compute partition", gpu.compute_partitions, gpu)
    mpart = _parse(MemoryPartition, memory, "memory partition", gpu.memory_partitions, gpu)
    ids = gpu.vf_ids if is_vf else gpu.pf_ids
    if not ids:
        raise InputError(f"{gpu.name} has no SR-IOV virtual function id", hint="validate it as a PF (is_vf=False)")
    if not _version_ok(rocm) or not _version_ok(driver):
        raise InputError(f"bad version (rocm={rocm!r}, driver={driver!r}): use dotted numbers such as 7.0")
    thresholds = thresholds_for(gpu, cpart, mpart, overrides)
    return {
        "schema": EXPECT_SCHEMA,
        "model": gpu.name,
        "arch": gpu.arch,
        "vendor_id": f"0x{gpu.vendor:04x}",
        "device_ids": [f"0x{i:04x}" for i in ids],
        "is_vf": is_vf,
        "compute_partition": cpart.value if cpart else None,
        "memory_partition": mpart.value if mpart else None,
        "compute_units": gpu.cus_per_partition(cpart) if cpart else gpu.compute_units,
        "vram_gib": _vram_gib(gpu, cpart, mpart),
        "vram_tolerance": list(VRAM_TOLERANCE),
        "fp8": {"format": gpu.fp8.value, "hipblaslt_type": gpu.fp8.hipblaslt_type,
                "torch_dtype": gpu.fp8.torch_dtype},
        "gemm": {m.split("_")[0]: t.method for m, t in thresholds.items() if t.method},
        "seconds": gemm.QUICK_SECONDS if quick else gemm.DEFAULT_SECONDS,
        "thresholds": {k: t.to_dict() for k, t in thresholds.items()},
        "optional": check_optional(optional or {}),
        "rocm": rocm,
        "driver": driver,
        "workloads": workloads,
    }


def check_optional(optional: dict) -> dict:
    """{check: why} with every name a check the agent reports. Raises InputError naming an unknown one."""
    unknown = sorted(str(n) for n in optional if n not in metrics.CHECKS)
    if unknown:
        raise InputError(f"unknown check {unknown[0][:60]!r} made optional; the checks: {', '.join(metrics.CHECKS)}")
    return {str(k): str(v) for k, v in optional.items()}


def _parse(enum, value: str | None, what: str, allowed: tuple, gpu: GpuModel):
    if value is None:
        return None
    try:
        member = enum(value.upper())
    except (ValueError, AttributeError):
        raise InputError(f"unknown {what} {value!r}; known: {', '.join(e.value for e in enum)}") from None
    if allowed and member not in allowed:
        raise InputError(f"{gpu.name} has no {what} {member.value}; it offers "
                         f"{', '.join(p.value for p in allowed)}")
    return member


def _version_ok(v: str) -> bool:
    parts = v.split(".") if isinstance(v, str) else []
    return bool(parts) and all(p.isdigit() for p in parts)


def _vram_gib(gpu: GpuModel, cpart: ComputePartition | None, mpart: MemoryPartition | None) -> float | None:
    """VRAM one partition should report, or None where nobody confirmed it.

    docs/hardware.md §2: NPS1 is one pool, NPS4 four; "a CPX partition under NPS4 sees 24 GB"
    (192 / 8), i.e. a memory partition is split among the compute partitions sharing it. What each
    compute partition reports when several share one NPS1 pool is UNVERIFIED: no expectation then.
    """
    if gpu.hbm_gb is None:
        return None
    ccount = cpart.count if cpart else 1
    mcount = mpart.count if mpart else 1
    if ccount > 1 and mcount == 1:
        return None
    return round(gpu.hbm_gb / max(ccount, mcount), 2)
