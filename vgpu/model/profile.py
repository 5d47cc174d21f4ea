"""The profile schema (format ``v1``): the desired state of a host's GPUs and the VMs using them.

Pure pydantic v2 models, no I/O. ``vgpu.profiles.load_profile()`` reads YAML, resolves
``extends`` and validates through :class:`Profile`; nothing after it sees a raw dict.
Every rule below comes from docs/hardware.md (§2-4, §6, §7) through
``vgpu.catalog``: which VF counts GIM accepts, which (vf_num, compute, memory) triples it takes
without silently falling back, and AMD's support level for each mode. The operator's reference
is docs/profiles.md. Validators raise :class:`FieldError` so a problem found by a cross-field
rule is still reported at the field the operator must change.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, PrivateAttr, StrictBool,
                      StrictFloat, StrictInt, StrictStr, ValidationInfo, WithJsonSchema, field_validator,
                      model_validator)

from vgpu.catalog import (DEFAULT, Catalog, ComputePartition, GpuModel, Hypervisor, MemoryPartition, Mode,
                          PartitionCombo, Support)
from vgpu.errors import InputError
from vgpu.model import profile_assign
from vgpu.model.profile_assign import SAFE_NAME, FieldError, safe_name
from vgpu.model.pci import PciAddress

# C0 and C1 controls and DEL, and every other character Unicode (and str.splitlines) breaks a line at: NEL
# U+0085 (a C1 control), LINE SEPARATOR U+2028, PARAGRAPH SEPARATOR U+2029 (Unicode UAX #14, mandatory breaks).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Worse first: the summary support level of a profile is the worst of its parts.
_SUPPORT_ORDER = (Support.UNSUPPORTED, Support.UNVALIDATED, Support.PREVIEW, Support.SUPPORTED)
DEFAULT_NAME_PATTERN = "gpu-vm-{index:02d}"
MAX_FUNCTIONS = 64  # 8 GPUs x 8 VFs: the largest host the catalog describes


def _address(value: Any) -> PciAddress:
    if isinstance(value, PciAddress):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a PCI address must be a string like 0000:85:00.0, not {type(value).__name__}")
    try:
        return PciAddress.parse(value)
    except InputError as exc:
        raise ValueError(f"{exc.message}; use domain:bus:device.function, e.g. 0000:85:00.0") from None


Address = Annotated[PciAddress, PlainValidator(_address), PlainSerializer(str, return_type=str, when_used="json"),
                    WithJsonSchema({"type": "string", "pattern": r"^([0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{1,2}:"
                                    r"[0-1]?[0-9a-fA-F]\.[0-7]$", "examples": ["0000:85:00.0"]})]
_NAME_SCHEMA = {"pattern": f"^{SAFE_NAME.pattern}$", "maxLength": 63}
ProfileName = Annotated[StrictStr, AfterValidator(lambda v: safe_name(v, "profile name")),
                        Field(json_schema_extra=_NAME_SCHEMA)]
VmName = Annotated[StrictStr, AfterValidator(lambda v: safe_name(v, "VM name")), Field(json_schema_extra=_NAME_SCHEMA)]


class NumaPolicy(str, Enum):
    """How VM assignment treats NUMA nodes (OpenStack Nova's PCI NUMA policies)."""

    REQUIRED = "required"  # every function of a VM on one NUMA node, or refuse
    PREFERRED = "preferred"  # fill VMs node by node; mix nodes only for what is left over
    NONE = "none"  # address order


class GuestOs(str, Enum):
    """Guests ROCm 7.0 supports (docs/hardware.md §7)."""

    UBUNTU_2404 = "ubuntu-24.04"
    UBUNTU_2204 = "ubuntu-22.04"
    RHEL_96 = "rhel-9.6"
    RHEL_94 = "rhel-9.4"
    ROCKY_9 = "rocky-9"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)


def _fill(model: BaseModel, values: dict[str, Any]) -> None:
    """Set defaults computed by a validator on a frozen model (pydantic offers no hook for that)."""
    for key, value in values.items():
        object.__setattr__(model, key, value)


def _catalog(info: ValidationInfo) -> Catalog:
    context = info.context if isinstance(info.context, dict) else {}
    return context.get("catalog", DEFAULT)


class GpuSelection(_Strict):
    """Which GPUs of the profile's model: all of them, listed addresses, a count, or NUMA nodes."""

    all: StrictBool | None = None
    addresses: list[Address] | None = Field(None, min_length=1, max_length=MAX_FUNCTIONS)
    count: StrictInt | None = Field(None, ge=1, le=MAX_FUNCTIONS)
    numa_nodes: list[Annotated[StrictInt, Field(ge=0, le=255)]] | None = Field(None, min_length=1, max_length=64)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"all": True} if data == "all" else data

    @model_validator(mode="after")
    def _one_way(self) -> GpuSelection:
        chosen = [k for k in ("all", "addresses", "count", "numa_nodes") if getattr(self, k) is not None]
        if self.all is False:
            raise FieldError("all", "all: false selects nothing; choose addresses, count or numa_nodes instead")
        if len(chosen) > 1 and chosen != ["count", "numa_nodes"]:
            raise ValueError(f"choose one way to select GPUs, not {' and '.join(chosen)} "
                             "(only count may be combined with numa_nodes)")
        for key in ("addresses", "numa_nodes"):
            items = getattr(self, key) or []
            dupes = sorted({str(x) for x in items if items.count(x) > 1})
            if dupes:
                raise FieldError(key, f"listed more than once: {', '.join(dupes)}")
        return self

    @property
    def kind(self) -> str:
        """"all", "addresses", "count" or "numa_nodes" (count given with NUMA nodes reads "count")."""
        for key in ("addresses", "count", "numa_nodes"):
            if getattr(self, key) is not None:
                return key
        return "all"

    @property
    def fixed_count(self) -> int | None:
        """How many GPUs are selected when the profile alone says so, else None."""
        return len(self.addresses) if self.addresses else self.count


class GpuSpec(_Strict):
    """The GPUs: model, mode, VFs and partitions. Partitions default to the catalog's first combination."""

    model: StrictStr = Field(max_length=40)
    mode: Mode = Mode.SRIOV
    vfs_per_gpu: StrictInt | None = None
    compute_partition: ComputePartition | None = None
    memory_partition: MemoryPartition | None = None
    select: GpuSelection = GpuSelection(all=True)
    _catalog_model: GpuModel | None = PrivateAttr(default=None)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str, info: ValidationInfo) -> str:
        catalog = _catalog(info)
        found = catalog.by_name(value)
        targets = ", ".join(m.name for m in catalog.targets())
        if found is None:
            raise ValueError(f"unknown GPU model {value!r}; known: {targets}")
        if not found.target:
            raise ValueError(f"{found.name} is in the catalog but vgpu does not provision it; targets: {targets}")
        return found.name

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> GpuSpec:
        model = _catalog(info).by_name(self.model)
        if self.mode is Mode.PASSTHROUGH:
            _check_passthrough(self)
        else:
            _fill(self, _sriov_defaults(self, model))
        self._catalog_model = model
        return self

    @property
    def catalog_model(self) -> GpuModel:
        """The catalog entry of ``model`` (from the catalog the profile was validated with)."""
        assert self._catalog_model is not None, "GpuSpec built without validation"
        return self._catalog_model

    @property
    def combo(self) -> PartitionCombo | None:
        """The (vf_num, compute, memory) combination for SR-IOV; None for passthrough."""
        if self.mode is Mode.PASSTHROUGH:
            return None
        return self.catalog_model.combo(self.vfs_per_gpu, self.compute_partition, self.memory_partition)


def _check_passthrough(spec: GpuSpec) -> None:
    # docs/hardware.md §4: in passthrough the PF goes to vfio-pci and gim is not loaded, so nothing on the
    # host sets VFs or partitions; the guest sets partitions itself with amd-smi.
    for key in ("vfs_per_gpu", "compute_partition", "memory_partition"):
        if getattr(spec, key) is not None:
            raise FieldError(key, f"mode passthrough assigns whole GPUs without GIM, so {key} cannot be set "
                             "(set partitions inside the guest with amd-smi); remove it")


def _sriov_defaults(spec: GpuSpec, model: GpuModel) -> dict[str, Any]:
    """The VF count and partitions after defaults; raises FieldError for what GIM refuses (docs/hardware.md §3)."""
    vfs = 1 if spec.vfs_per_gpu is None else spec.vfs_per_gpu  # GIM's vf_num defaults to 1
    allowed = ", ".join(str(n) for n in sorted(model.gim_vf_counts)) or "none: no SR-IOV"
    if vfs not in model.gim_vf_counts:
        raise FieldError("vfs_per_gpu", f"{vfs} VFs per GPU is not allowed for {model.name} (GIM accepts {allowed})")
    for key, known in (("compute_partition", model.compute_partitions), ("memory_partition", model.memory_partitions)):
        value = getattr(spec, key)
        if value is not None and value not in known:
            raise FieldError(key, f"{value.value} is not a {key.split('_')[0]} partition of {model.name} "
                             f"({', '.join(p.value for p in known)})")
    combo = model.combo(vfs, spec.compute_partition, spec.memory_partition)
    if combo is None:
        raise _bad_combo(model, vfs, spec.compute_partition, spec.memory_partition)
    if combo.support is Support.UNSUPPORTED:
        raise FieldError("vfs_per_gpu", f"{vfs} VFs per GPU ({combo.compute.value}/{combo.memory.value}) is "
                         f"unsupported for {model.name} in AMD's support matrix")
    return {"vfs_per_gpu": vfs, "compute_partition": combo.compute, "memory_partition": combo.memory}


def _bad_combo(model: GpuModel, vfs: int, compute: ComputePartition | None,
               memory: MemoryPartition | None) -> FieldError:
    valid = [f"{c.compute.value}/{c.memory.value}" for c in model.combos if c.vf_num == vfs]
    field = "memory_partition" if compute is not None and model.combo(vfs, compute, None) else "compute_partition"
    asked = "/".join(p.value for p in (compute, memory) if p is not None)
    return FieldError(field, f"{asked} with {vfs} VFs per GPU is not a combination GIM accepts for {model.name} "
                      f"(it would silently fall back to NPS1 and the default compute mode); valid with {vfs} VFs: "
                      f"{', '.join(valid)}")


class VmSpec(_Strict):
    """How functions (VFs, or whole GPUs in passthrough) are grouped into VMs and named."""

    vfs_per_vm: StrictInt | None = Field(None, ge=1, le=MAX_FUNCTIONS)
    name_pattern: StrictStr | None = Field(None, max_length=63)
    assign: dict[VmName, list[Address]] | None = Field(None, min_length=1, max_length=MAX_FUNCTIONS)
    numa_policy: NumaPolicy = NumaPolicy.PREFERRED

    @field_validator("name_pattern")
    @classmethod
    def _safe_pattern(cls, value: str | None) -> str | None:
        if value is not None:  # null means "the default pattern", filled in below
            profile_assign.check_pattern(value)
        return value

    @model_validator(mode="after")
    def _defaults(self) -> VmSpec:
        if self.assign is None:
            _fill(self, {"vfs_per_vm": self.vfs_per_vm or 1, "name_pattern": self.name_pattern or DEFAULT_NAME_PATTERN})
            return self
        for key in ("vfs_per_vm", "name_pattern"):
            if getattr(self, key) is not None:
                raise FieldError(key, f"{key} cannot be combined with assign, which names each VM's addresses")
        seen: dict[PciAddress, str] = {}
        for vm, addresses in self.assign.items():
            if not addresses:
                raise FieldError(("assign", vm), "a VM needs at least one address")
            for address in addresses:
                if address in seen:
                    raise FieldError(("assign", vm), f"{address} is already assigned to {seen[address]}")
                seen[address] = vm
        return self


def _version(pattern: str, example: str, what: str) -> Any:
    def check(value: Any) -> str:
        if isinstance(value, float):
            raise ValueError(f"write the {what} version as a quoted string, e.g. \"{example}\" "
                             f"(YAML reads {value!r} as a number)")
        if not isinstance(value, str) or not re.fullmatch(pattern, value):
            raise ValueError(f"{what} version {value!r} is not supported; use {example} (optionally with a "
                             "patch number or .x)")
        return value
    return Annotated[str, PlainValidator(check), WithJsonSchema({"type": "string", "pattern": f"^{pattern}$"})]


# ROCm 7.0 and the amdgpu driver 30.10.x it was released with (30.10.1 with ROCm 7.0.1), docs/hardware.md §7.
RocmVersion = _version(r"7\.0(\.([0-9]{1,3}|x))?", "7.0", "ROCm")
DriverVersion = _version(r"30\.10(\.([0-9]{1,3}|x))?", "30.10.x", "amdgpu driver")


class GuestSpec(_Strict):
    """The guest stack: OS, ROCm user space and the decoupled amdgpu driver (docs/hardware.md §7)."""

    os: GuestOs = GuestOs.UBUNTU_2404
    rocm: RocmVersion = "7.0"
    amdgpu_driver: DriverVersion = "30.10.x"


PositiveNumber = Annotated[StrictFloat, Field(gt=0, le=1e6)]


class ValidationOverrides(_Strict):
    """Optional guest-validation thresholds; unset ones derive from the catalog (vgpu/guest/thresholds.py)."""

    tolerance: StrictFloat | None = Field(None, gt=0, le=1)
    fp8_tflops_min: PositiveNumber | None = None
    bf16_tflops_min: PositiveNumber | None = None
    hbm_bandwidth_gbps_min: PositiveNumber | None = None
    vram_gb_min: PositiveNumber | None = None
    compute_units: StrictInt | None = Field(None, ge=1, le=1024)
    # Checks allowed to go unjudged (a missing tool): reported as "not judged", never as passed.
    optional: list[StrictStr] | None = Field(None, max_length=64)

    @field_validator("optional")
    @classmethod
    def _known_checks(cls, value: list[str] | None) -> list[str] | None:
        from vgpu.guest.agent.metrics import CHECKS

        unknown = [v for v in value or [] if v not in CHECKS]
        if unknown:
            raise ValueError(f"unknown check {unknown[0][:60]!r}; the checks: {', '.join(CHECKS)}")
        return value

    def optional_checks(self, profile: str) -> dict[str, str]:
        """{check: why} for the expectation (vgpu.guest.expect.build_expectation(optional=...))."""
        return {name: f"profile {profile} validation.optional" for name in self.optional or []}

    def threshold_overrides(self) -> dict[str, float]:
        """The overrides in the form ``vgpu.guest.thresholds.thresholds_for(overrides=...)`` takes."""
        pairs = {"fp8_tflops": self.fp8_tflops_min, "bf16_tflops": self.bf16_tflops_min,
                 "hbm_gbps": self.hbm_bandwidth_gbps_min, "tolerance": self.tolerance}
        return {k: v for k, v in pairs.items() if v is not None}


class Profile(_Strict):
    """A whole profile, after ``extends`` was resolved. Build it with ``vgpu.profiles.load_profile``."""

    version: Literal["v1"]
    name: ProfileName
    description: StrictStr | None = Field(None, max_length=300)
    hypervisor: Hypervisor = Hypervisor.KVM
    gpu: GpuSpec
    vms: VmSpec = VmSpec()
    guest: GuestSpec = GuestSpec()
    validation: ValidationOverrides = ValidationOverrides()
    _source: str = PrivateAttr(default="<memory>")
    _lineage: tuple[str, ...] = PrivateAttr(default=())

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if _CONTROL.search(value):
            raise ValueError("the description must be one line of text without control characters")
        return value

    @model_validator(mode="after")
    def _cross_rules(self) -> Profile:
        _check_hypervisor(self)
        profile_assign.check_split(self)
        _check_thresholds(self)
        return self

    @property
    def source(self) -> str:
        """Where the profile came from (a path, or profiles/NAME.yaml for a shipped one)."""
        return self._source

    @property
    def lineage(self) -> tuple[str, ...]:
        """The files it was built from, the profile's own first, then each ``extends`` parent."""
        return self._lineage or (self._source,)

    @property
    def combo(self) -> PartitionCombo | None:
        return self.gpu.combo

    @property
    def support(self) -> Support:
        """AMD's support level for the whole profile: the worst of its partition combination and mode."""
        levels = [self.gpu.catalog_model.mode_support(self.gpu.mode, self.hypervisor).support]
        if self.combo is not None:
            levels.append(self.combo.support)
        return min(levels, key=_SUPPORT_ORDER.index)

    def warnings(self) -> list[str]:
        """Operator warnings from AMD's support levels and known problems; empty when fully supported."""
        return profile_assign.warnings(self)

    def select_gpus(self, gpus: Any) -> list[Any]:
        """The GPUs this profile takes, in address order. Raises RefusedError naming what is missing."""
        return profile_assign.select_gpus(self, list(gpus))

    def vm_assignment(self, functions: Any) -> dict[str, list[PciAddress]]:
        """{VM name: [addresses]} for the given functions (VFs, or PFs in passthrough). Raises RefusedError."""
        return profile_assign.vm_assignment(self, list(functions))

    def to_dict(self) -> dict[str, Any]:
        """The resolved profile as plain data (what ``vgpu profiles show`` prints); loads back unchanged."""
        return self.model_dump(mode="json", exclude_none=True)


def _check_hypervisor(profile: Profile) -> None:
    model, mode, hyp = profile.gpu.catalog_model, profile.gpu.mode, profile.hypervisor
    if hyp is Hypervisor.ESXI and mode is not Mode.PASSTHROUGH:
        # docs/hardware.md §6: GIM is Linux-only; on ESXi a GPU is assigned whole (DirectPath I/O).
        raise FieldError("hypervisor", "esxi takes GPUs only whole (gpu.mode: passthrough); GIM SR-IOV is "
                         "Linux/KVM only")
    support = model.mode_support(mode, hyp)
    if support.support is Support.UNSUPPORTED:
        raise FieldError("gpu.mode", f"{mode.value} on {hyp.value} is not supported for {model.name}: "
                         f"{support.note or 'not in AMD support matrix'}")


def _check_thresholds(profile: Profile) -> None:
    """Refuse thresholds no healthy GPU could reach: above the whole GPU's (or partition's) figure."""
    model, val, combo = profile.gpu.catalog_model, profile.validation, profile.combo
    share = 1 / combo.compute.count if combo else 1.0
    part = f" per {combo.compute.value} partition" if combo and share < 1 else ""
    limits = (("fp8_tflops_min", model.peak_fp8_tflops, share, "peak dense FP8", "TFLOPS"),
              ("bf16_tflops_min", model.peak_fp16_tflops, share, "peak dense FP16/BF16", "TFLOPS"),
              ("hbm_bandwidth_gbps_min", model.hbm_tbps and model.hbm_tbps * 1000, 1.0, "peak HBM bandwidth", "GB/s"),
              ("vram_gb_min", model.hbm_gb, 1.0, "HBM", "GB"))
    for key, figure, scale, what, unit in limits:
        value = getattr(val, key)
        if value is not None and figure is not None and value > figure * scale:
            raise FieldError(f"validation.{key}", f"{value:g} {unit} can never pass: {model.name} {what} is "
                             f"{figure * scale:g} {unit}{part}")
    expected = model.cus_per_partition(combo.compute if combo else ComputePartition.SPX)
    if val.compute_units is not None and expected is not None and val.compute_units != expected:
        raise FieldError("validation.compute_units", f"{val.compute_units} can never pass: each function of "
                         f"this profile has {expected} compute units on {model.name}")
