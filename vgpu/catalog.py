"""What vgpu knows about AMD Instinct GPUs: ids, architecture, partitions, FP8, support.

Every figure comes from docs/hardware.md (which names the primary sources:
amd/MxGPU-Virtualization ``libgv/core/amdgv_marketing_name.c``, ``mi300_nbio.c``, GIM release
notes, ROCm ``docs/conceptual/gpu-arch/mi300.md``, the ROCm blog "Measuring Max-Achievable
FLOPs part 2"). A value nobody confirmed is ``None``: callers report "unknown" instead of
guessing. Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

AMD_VENDOR_ID = 0x1002

# MI300-family functions report class 0x12xxxx (processing accelerator); older Instinct parts
# and possibly MI350 report 0x03xxxx (display). docs/hardware.md §1.
ACCELERATOR_CLASSES = (0x12, 0x03)


class Support(str, Enum):
    """AMD's support level for a mode, from its release notes and validated matrices."""

    SUPPORTED = "supported"  # in AMD's support matrix
    PREVIEW = "preview"  # AMD calls it preview; may need special firmware
    UNVALIDATED = "unvalidated"  # the driver accepts it, no AMD support table lists it
    UNSUPPORTED = "unsupported"  # the driver or AMD rejects it

    @property
    def allowed(self) -> bool:
        return self is not Support.UNSUPPORTED


class ComputePartition(str, Enum):
    SPX = "SPX"
    DPX = "DPX"
    TPX = "TPX"  # MI300A only
    QPX = "QPX"
    CPX = "CPX"

    @property
    def count(self) -> int:
        return {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}[self.value]


class MemoryPartition(str, Enum):
    NPS1 = "NPS1"
    NPS2 = "NPS2"
    NPS4 = "NPS4"

    @property
    def count(self) -> int:
        return int(self.value[3:])

    @property
    def gim_number(self) -> int:
        """The number /etc/gim_config uses for memory_partition_mode (NPS1=1, NPS2=2, NPS4=4)."""
        return self.count


class Fp8Format(str, Enum):
    FNUZ = "fnuz"  # gfx942: float8_e4m3fnuz, hipBLASLt f8_fnuz_r
    OCP = "ocp"  # gfx950: float8_e4m3fn, hipBLASLt f8_r
    NONE = "none"  # no FP8 in hardware (emulated, slow)

    @property
    def hipblaslt_type(self) -> str | None:
        return {"fnuz": "f8_fnuz_r", "ocp": "f8_r", "none": None}[self.value]

    @property
    def torch_dtype(self) -> str | None:
        return {"fnuz": "float8_e4m3fnuz", "ocp": "float8_e4m3fn", "none": None}[self.value]


class Mode(str, Enum):
    SRIOV = "sriov"
    PASSTHROUGH = "passthrough"


class Hypervisor(str, Enum):
    KVM = "kvm"
    ESXI = "esxi"


@dataclass(frozen=True)
class PartitionCombo:
    """One (vf_num, compute, memory) combination GIM accepts, with AMD's support level."""

    vf_num: int
    compute: ComputePartition
    memory: MemoryPartition
    support: Support
    min_gim: str | None = None  # first GIM release that supports it, where known
    note: str = ""


@dataclass(frozen=True)
class ModeSupport:
    support: Support
    note: str = ""


@dataclass(frozen=True)
class GpuModel:
    """One GPU model. ``None`` means nobody confirmed the value."""

    name: str
    arch: str
    pf_ids: tuple[int, ...]
    vf_ids: tuple[int, ...] = ()
    compute_units: int | None = None
    xcds: int | None = None
    hbm_gb: int | None = None
    hbm_tbps: float | None = None
    fp8: Fp8Format = Fp8Format.NONE
    peak_fp8_tflops: float | None = None  # dense, no sparsity
    peak_fp16_tflops: float | None = None
    measured_fp8_tflops: float | None = None  # AMD's max-achievable (MAF) figure
    measured_bf16_tflops: float | None = None
    gim_vf_counts: frozenset[int] = frozenset()  # what GIM's driver accepts; empty: no SR-IOV
    combos: tuple[PartitionCombo, ...] = ()
    compute_partitions: tuple[ComputePartition, ...] = ()
    memory_partitions: tuple[MemoryPartition, ...] = ()
    modes: dict[tuple[Mode, Hypervisor], ModeSupport] = field(default_factory=dict)
    rocm7: Support = Support.SUPPORTED
    vendor: int = AMD_VENDOR_ID
    target: bool = True  # False: known so plans can name it, but vgpu does not provision it
    notes: tuple[str, ...] = ()

    @property
    def all_ids(self) -> tuple[int, ...]:
        return self.pf_ids + self.vf_ids

    @property
    def sriov_capable(self) -> bool:
        return bool(self.gim_vf_counts)

    def combo(self, vf_num: int, compute: ComputePartition | None,
              memory: MemoryPartition | None) -> PartitionCombo | None:
        """The matching combination, or None when GIM would refuse or silently fall back."""
        for c in self.combos:
            if c.vf_num == vf_num and (compute is None or c.compute == compute) and (
                    memory is None or c.memory == memory):
                return c
        return None

    def default_combo(self, vf_num: int) -> PartitionCombo | None:
        """The first listed (preferred) combination for ``vf_num``."""
        return next((c for c in self.combos if c.vf_num == vf_num), None)

    def gim_default_memory(self, vf_num: int) -> MemoryPartition:
        """The memory partition GIM takes for ``vf_num`` when none is configured: NPS1 where that is valid
        (GIM's fallback, docs/hardware.md §3), else the model's listed mode (MI350-series multi-VF: NPS2)."""
        compute = ComputePartition({1: "SPX", 2: "DPX", 4: "QPX", 8: "CPX"}.get(vf_num, "SPX"))
        if self.combo(vf_num, compute, MemoryPartition.NPS1) is not None or self.default_combo(vf_num) is None:
            return MemoryPartition.NPS1
        return self.default_combo(vf_num).memory

    def mode_support(self, mode: Mode, hypervisor: Hypervisor) -> ModeSupport:
        return self.modes.get((mode, hypervisor), ModeSupport(Support.UNSUPPORTED, "not known to work"))

    def cus_per_partition(self, compute: ComputePartition) -> int | None:
        return None if self.compute_units is None else self.compute_units // compute.count

    def hbm_gb_per_partition(self, memory: MemoryPartition) -> float | None:
        return None if self.hbm_gb is None else self.hbm_gb / memory.count


def _combos_mi300(vf_one: Support, others: Support, eight: Support) -> tuple[PartitionCombo, ...]:
    """Valid MI300 (vf_num, compute, memory) triples from GIM ``mi300_nbio.c`` (docs/hardware.md §3)."""
    S, C, M = Support, ComputePartition, MemoryPartition
    return (
        PartitionCombo(1, C.SPX, M.NPS1, vf_one),
        PartitionCombo(1, C.CPX, M.NPS1, others),
        PartitionCombo(1, C.CPX, M.NPS4, others),
        PartitionCombo(2, C.DPX, M.NPS1, others),
        PartitionCombo(4, C.QPX, M.NPS1, others),
        PartitionCombo(4, C.QPX, M.NPS4, others),
        PartitionCombo(8, C.CPX, M.NPS4, eight, note="needs AMD's multi-VF firmware bundle"),
        PartitionCombo(8, C.CPX, M.NPS1, eight if eight is S.UNSUPPORTED else S.UNVALIDATED,
                       note="needs AMD's multi-VF firmware bundle"),
    )


_S, _M, _H = Support, Mode, Hypervisor
_MI300_PARTS = (ComputePartition.SPX, ComputePartition.DPX, ComputePartition.QPX, ComputePartition.CPX)
_MI300_NPS = (MemoryPartition.NPS1, MemoryPartition.NPS4)
_MI350_NPS = (MemoryPartition.NPS1, MemoryPartition.NPS2)
_RESET_BUG = ("after a VFIO reset at VM stop the PF can read all 0xFF until the host reboots "
              "(amd/MxGPU-Virtualization issue #25)")

_MI300X_MODES = {
    (_M.SRIOV, _H.KVM): ModeSupport(_S.SUPPORTED, "GIM 8.4.0.K or later for ROCm 7.0"),
    (_M.PASSTHROUGH, _H.KVM): ModeSupport(_S.UNVALIDATED, _RESET_BUG),
    (_M.PASSTHROUGH, _H.ESXI): ModeSupport(_S.SUPPORTED, "ROCm 7.0 added ESXi 8 support for MI300X"),
}
_MI350_MODES = {
    (_M.SRIOV, _H.KVM): ModeSupport(_S.SUPPORTED, "1 VF from GIM 8.5; 2 and 8 VFs from GIM 9.1"),
    (_M.PASSTHROUGH, _H.KVM): ModeSupport(_S.SUPPORTED, "new for MI350X/MI355X in ROCm 7.0"),
    (_M.PASSTHROUGH, _H.ESXI): ModeSupport(_S.UNVALIDATED, "ESXi support in ROCm 7.0 names MI300X only"),
}


def _combos_mi350() -> tuple[PartitionCombo, ...]:
    # GIM release notes: MI350X/MI355X 1 VF from GIM 8.5; from 9.1.0.K also 2 VFs (DPX, NPS2) and 8 VFs
    # (CPX, NPS2), both "*" (multi-VF firmware). docs/hardware.md §9 (vgpu/data/gim-matrix.json).
    C, M = ComputePartition, MemoryPartition
    return (
        PartitionCombo(1, C.SPX, M.NPS1, _S.SUPPORTED, min_gim="8.5"),
        PartitionCombo(2, C.DPX, M.NPS2, _S.PREVIEW, min_gim="9.1", note="needs AMD's multi-VF firmware (\"*\")"),
        PartitionCombo(8, C.CPX, M.NPS2, _S.PREVIEW, min_gim="9.1", note="needs AMD's multi-VF firmware (\"*\")"),
    )


def _mi300_like(name: str, pf: tuple[int, ...], vf: tuple[int, ...], **kw) -> GpuModel:
    base = dict(arch="gfx942", fp8=Fp8Format.FNUZ, gim_vf_counts=frozenset({1, 2, 4, 8}),
                compute_partitions=_MI300_PARTS, memory_partitions=_MI300_NPS, modes=dict(_MI300X_MODES))
    base.update(kw)
    return GpuModel(name=name, pf_ids=pf, vf_ids=vf, **base)


MODELS: tuple[GpuModel, ...] = (
    _mi300_like("MI300X", (0x74A1,), (0x74B5,), compute_units=304, xcds=8, hbm_gb=192, hbm_tbps=5.3,
                peak_fp8_tflops=2614.9, peak_fp16_tflops=1307.4, measured_fp8_tflops=1273.0,
                combos=_combos_mi300(_S.SUPPORTED, _S.UNVALIDATED, _S.PREVIEW)),
    _mi300_like("MI300X-HF", (0x74A9,), (0x74BD,), compute_units=304, hbm_gb=192,
                combos=_combos_mi300(_S.SUPPORTED, _S.UNVALIDATED, _S.PREVIEW)),
    _mi300_like("MI308X", (0x74A2, 0x74A8), (0x74B6, 0x74BC),
                combos=_combos_mi300(_S.UNVALIDATED, _S.UNVALIDATED, _S.UNVALIDATED),
                notes=("4-partition part: GIM names QPX 'CPX-4'; CU count UNVERIFIED",)),
    _mi300_like("MI325X", (0x74A5,), (0x74B9,), compute_units=304, xcds=8, hbm_gb=256, hbm_tbps=6.0,
                measured_fp8_tflops=1519.0,
                combos=_combos_mi300(_S.SUPPORTED, _S.UNSUPPORTED, _S.UNSUPPORTED),
                modes={(_M.SRIOV, _H.KVM): ModeSupport(_S.SUPPORTED, "1 VF only in AMD's matrix"),
                       (_M.PASSTHROUGH, _H.KVM): ModeSupport(_S.UNVALIDATED, _RESET_BUG)},
                notes=("VF id 0x74b9 seen in a real VF guest's amd-smi; not in GIM's table",)),
    GpuModel("MI350X", "gfx950", (0x75A0,), (0x75B0,), compute_units=256, xcds=8, hbm_gb=288, hbm_tbps=8.0,
             fp8=Fp8Format.OCP, gim_vf_counts=frozenset({1, 2, 8}), combos=_combos_mi350(),
             compute_partitions=(ComputePartition.SPX, ComputePartition.DPX, ComputePartition.CPX),
             memory_partitions=_MI350_NPS, modes=dict(_MI350_MODES)),
    GpuModel("MI355X", "gfx950", (0x75A3,), (0x75B3,), compute_units=256, xcds=8, hbm_gb=288, hbm_tbps=8.0,
             fp8=Fp8Format.OCP, gim_vf_counts=frozenset({1, 2, 8}), combos=_combos_mi350(),
             compute_partitions=(ComputePartition.SPX, ComputePartition.DPX, ComputePartition.CPX),
             memory_partitions=_MI350_NPS, modes=dict(_MI350_MODES)),
    # MI350P (PCIe card, gfx950): SR-IOV 1-SPX-NPS1 from GIM 9.4.0.K. Its PCI ids are in no public source
    # vgpu found (not in GIM's amdgv_marketing_name.c as stored): UNVERIFIED, so none are listed and
    # discovery cannot recognise it until they are (docs/hardware.md §1).
    GpuModel("MI350P", "gfx950", (), (), fp8=Fp8Format.OCP, gim_vf_counts=frozenset({1}),
             combos=(PartitionCombo(1, ComputePartition.SPX, MemoryPartition.NPS1, _S.SUPPORTED, min_gim="9.4"),),
             compute_partitions=(ComputePartition.SPX,), memory_partitions=(MemoryPartition.NPS1,),
             modes={(_M.SRIOV, _H.KVM): ModeSupport(_S.SUPPORTED, "1 VF (SPX/NPS1) from GIM 9.4.0.K")},
             notes=("PCI ids UNVERIFIED: no public source", "CU count, HBM size UNVERIFIED")),
    GpuModel("MI300A", "gfx942", (0x74A0,), compute_units=228, hbm_gb=128, fp8=Fp8Format.FNUZ,
             compute_partitions=(ComputePartition.SPX, ComputePartition.TPX), target=False,
             notes=("APU with unified memory; not a virtualization target",)),
    GpuModel("MI210", "gfx90a", (0x740F,), gim_vf_counts=frozenset({1}),
             combos=(PartitionCombo(1, ComputePartition.SPX, MemoryPartition.NPS1, _S.SUPPORTED),),
             modes={(_M.SRIOV, _H.KVM): ModeSupport(_S.SUPPORTED, "GIM release notes: MI210X 1 VF"),
                    (_M.PASSTHROUGH, _H.KVM): ModeSupport(_S.UNVALIDATED)},
             target=False, notes=("no FP8 in hardware: validate BF16/INT8 instead",)),
    GpuModel("MI250X", "gfx90a", (0x740C, 0x7408), target=False,
             notes=("no FP8 in hardware", "SR-IOV via GIM UNVERIFIED")),
    GpuModel("MI100", "gfx908", (0x738C,), target=False, notes=("PCI id UNVERIFIED", "no FP8 in hardware")),
    GpuModel("MI50/MI60", "gfx906", (0x66A1, 0x66A0), rocm7=Support.UNSUPPORTED, target=False,
             notes=("dropped from ROCm 7.0: stay on ROCm 6.4", "PCI ids UNVERIFIED")),
)


@dataclass(frozen=True)
class Match:
    model: GpuModel
    is_vf: bool


class Catalog:
    """Look-ups over a tuple of models. Tests may build one with extra entries (e.g. a stand-in)."""

    def __init__(self, models: tuple[GpuModel, ...] = MODELS):
        self.models = models
        self._by_id: dict[tuple[int, int], Match] = {}
        for m in models:
            for pid in m.pf_ids:
                self._by_id[(m.vendor, pid)] = Match(m, False)
            for vid in m.vf_ids:
                self._by_id[(m.vendor, vid)] = Match(m, True)
        self._by_name = {m.name.lower(): m for m in models}

    def match(self, vendor: int, device: int) -> Match | None:
        """The model a (vendor, device) pair belongs to, or None when it is not ours."""
        return self._by_id.get((vendor, device))

    def vendors(self) -> frozenset[int]:
        return frozenset(v for v, _ in self._by_id)

    def by_name(self, name: str) -> GpuModel | None:
        return self._by_name.get(name.lower())

    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def targets(self) -> list[GpuModel]:
        return [m for m in self.models if m.target]


DEFAULT = Catalog()
