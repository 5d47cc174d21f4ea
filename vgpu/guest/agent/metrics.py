"""Every check the agent reports, defined once: its unit and which way is better.

This is where a check is defined for everything that reads its result later: ``vgpu report --compare``
and the roll-out gate judge a change by ``better`` (vgpu/guest/report/compare.py), ``--threshold`` and
``--optional`` accept only these names, and a unit test runs every simulated scenario and refuses a
check name that is not here (an unknown direction is an error, never a guess).

better:
- ``higher``: throughput, counts that must not shrink (TFLOPS, GB/s, compute units, VRAM);
- ``lower``: errors and mismatches (norm_error, relative error, mismatches), times;
- ``none``: a text or identity value (versions, ids, partition modes): a change is shown, never judged.

Standard library only, Python >= 3.8 (this file runs inside guests).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

DIRECTIONS = ("higher", "lower", "none")


class Metric(NamedTuple):
    unit: Optional[str]
    better: str
    what: str


CHECKS: Dict[str, Metric] = {
    "pci.function": Metric(None, "none", "an expected VF/PF PCI id is present"),
    "driver.amdgpu": Metric(None, "none", "amdgpu loaded and bound to every expected function"),
    "driver.dkms": Metric(None, "none", "amdgpu-dkms built for the running kernel"),
    "rocm.version": Metric(None, "none", "ROCm release in /opt/rocm/.info/version"),
    "rocminfo.gfx_target": Metric(None, "none", "every GPU agent has the model's gfx target"),
    "rocminfo.compute_units": Metric("CU", "higher", "compute units of the partition"),
    "rocminfo.vram": Metric("GiB", "higher", "VRAM of the partition (coarse-grained GLOBAL pool)"),
    "amdsmi.static": Metric(None, "none", "amd-smi device id, gfx target and CUs"),
    "amdsmi.partition": Metric(None, "none", "compute/memory partition mode"),
    "hip.compile": Metric(None, "none", "the shipped HIP program builds for the gfx target"),
    "hip.device": Metric(None, "none", "the CUs and VRAM HIP itself sees (hipGetDeviceProperties)"),
    "hip.vector_add": Metric("mismatches", "lower", "vector add checked element by element"),
    "hip.bandwidth": Metric("GB/s", "higher", "device-to-device copy bandwidth"),
    "hip.fp8_mfma": Metric("mismatches", "lower", "one FP8 MFMA tile against its exact result"),
    "fp8.hipblaslt": Metric("TFLOPS", "higher", "sustained FP8 GEMM throughput (lowest window)"),
    "fp8.hipblaslt.verify": Metric("norm_error", "lower", "hipBLASLt FP8 GEMM against its CPU reference"),
    "bf16.hipblaslt": Metric("TFLOPS", "higher", "sustained BF16 GEMM throughput (lowest window)"),
    "fp8.torch": Metric("TFLOPS", "higher", "torch._scaled_mm FP8 GEMM throughput"),
    "fp8.torch.error": Metric("relative error", "lower", "torch FP8 GEMM against float32"),
}
WORKLOAD_PREFIXES = ("hip.", "fp8.", "bf16.")  # the checks that run GPU work (--skip-workloads skips them)
# The run time of any check (compile, workloads): lower is better; shown by a comparison, never judged
# (vgpu/guest/report/compare.py says why).
SECONDS = Metric("s", "lower", "the check's own run time")


def metric(name: str) -> Optional[Metric]:
    """The definition of check ``name``, or None for a name no agent of this version reports."""
    return CHECKS.get(name)
