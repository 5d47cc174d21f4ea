"""Machine specs: the YAML that describes a simulated host (documented in docs/sim-machine-spec.md).

A spec lists PCI functions (GPUs, NICs, NVMe, bridges, ...) by address with a ``kind`` whose
preset fills in realistic ids, BARs and links (``vgpu.sim.presets``), plus the host's initial
``state`` (IOMMU, command line, loaded modules, bindings, hugepages, config files).
Nothing after ``load_spec`` sees a raw dict.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, \
    model_validator

from vgpu.catalog import DEFAULT as CATALOG
from vgpu.errors import InputError
from vgpu.inputs import load_yaml
from vgpu.model.pci import PciAddress
from vgpu.sim.drivers import MODULE_NAME, PARAM_NAME

MACHINES_DIR = Path(__file__).resolve().parent / "machines"
DEFAULT_MACHINE = "8xmi300x"
_SIZE = re.compile(r"^(\d+)\s*([KMGT]?)i?B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

Kind = Literal["gpu", "nic", "nvme", "vga", "audio", "bridge", "root_port", "host_bridge", "iommu", "other"]
BarType = Literal["mem64pref", "mem64", "mem32", "mem32pref", "io"]


def _hex(value: object) -> object:
    """Ids: YAML ints (0x1002 is an int in YAML 1.1) or strings with an 0x prefix."""
    if isinstance(value, str):
        if not re.fullmatch(r"0[xX][0-9a-fA-F]+", value.strip()):
            raise ValueError(f"expected a hex number like 0x1002, got {value!r}")
        return int(value, 16)
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    return value


def _size(value: object) -> object:
    """BAR sizes: bytes or "256G" / "2M" / "16K"; a power of two, as BAR sizes are."""
    if isinstance(value, str):
        match = _SIZE.match(value.strip())
        if not match:
            raise ValueError(f"expected a size like 256G, 2M or 16K, got {value!r}")
        value = int(match[1]) * _UNITS[match[2].upper()]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a size, got {value!r}")
    if value < 16 or value & (value - 1):
        raise ValueError(f"BAR size {value} is not a power of two of at least 16 bytes")
    return value


def _address(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a PCI address string like 0000:85:00.0, got {value!r}")
    try:
        return str(PciAddress.parse(value))
    except InputError as exc:
        raise ValueError(exc.message) from None


HexInt = Annotated[int, BeforeValidator(_hex), Field(ge=0, le=0xFFFFFF)]
ModuleName = Annotated[str, Field(pattern=f"^{MODULE_NAME.pattern}$")]
ParamName = Annotated[str, Field(pattern=f"^{PARAM_NAME.pattern}$")]
OneLine = Annotated[str, Field(max_length=64, pattern=r"^[ -~]+$")]
Size = Annotated[int, BeforeValidator(_size)]
Address = Annotated[str, BeforeValidator(_address)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BarSpec(_Strict):
    index: int = Field(ge=0, le=5)
    size: Size
    type: BarType = "mem64pref"

    @model_validator(mode="after")
    def _64bit_fits(self) -> "BarSpec":
        if self.type.startswith("mem64") and self.index == 5:
            raise ValueError("a 64-bit BAR takes two BAR slots: index 5 cannot hold one")
        return self


class SriovSpec(_Strict):
    total_vfs: int = Field(ge=0, le=256)
    offset: int | None = Field(None, ge=1, le=255)
    stride: int | None = Field(None, ge=1, le=255)
    vf_device: HexInt | None = None
    vf_bars: tuple[BarSpec, ...] | None = None
    initial_vfs: int = Field(0, ge=0, description="VFs enabled at build via sriov_numvfs (drivers with "
                                                      "sriov_configure only, e.g. mlx5_core)")
    vf_limit: int | None = Field(None, ge=0, description="the VF count the GPU's firmware allows, which GIM "
                                                         "enforces at probe (default total_vfs): a host whose "
                                                         "firmware allows fewer VFs than TotalVFs advertises")

    @model_validator(mode="after")
    def _initial_within_total(self) -> "SriovSpec":
        if self.initial_vfs > self.total_vfs:
            raise ValueError(f"initial_vfs {self.initial_vfs} is above total_vfs {self.total_vfs}")
        return self


class LinkSpec(_Strict):
    speed: str = Field(pattern=r"^\d+(\.\d+)? GT/s PCIe$")
    width: int = Field(ge=1, le=32)
    max_speed: str | None = Field(None, pattern=r"^\d+(\.\d+)? GT/s PCIe$")
    max_width: int | None = Field(None, ge=1, le=32)


class FunctionSpec(_Strict):
    address: Address
    kind: Kind = "other"
    model: str | None = None
    vendor: HexInt | None = None
    device: HexInt | None = None
    subsystem_vendor: HexInt | None = None
    subsystem_device: HexInt | None = None
    class_code: HexInt | None = None
    revision: int = Field(0, ge=0, le=255)
    driver: str | None = Field(None, pattern=f"^{MODULE_NAME.pattern}$")  # becomes a sysfs directory name
    no_driver: bool = False
    numa_node: int = Field(0, ge=-1, le=63)
    bars: tuple[BarSpec, ...] | None = None
    sriov: SriovSpec | None = None
    link: LinkSpec | None = None
    path: tuple[Address, ...] = ()
    iommu_group_with: Address | None = None
    # a GPU's VBIOS/IFWI name as the host amd-smi reports it (state.amdsmi); "..._1VF" is a 1-VF build
    vbios: OneLine | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str | None) -> str | None:
        if value is not None and CATALOG.by_name(value) is None:
            raise ValueError(f"unknown GPU model {value!r}; the catalog knows {', '.join(CATALOG.names())}")
        return value

    @model_validator(mode="after")
    def _identified(self) -> "FunctionSpec":
        if self.kind == "gpu" and self.model is None and (self.vendor is None or self.device is None):
            raise ValueError("a gpu needs a catalog model or both vendor and device")
        if self.kind in ("other", "audio") and (self.vendor is None or self.device is None):
            raise ValueError(f"a function of kind {self.kind} needs vendor and device")
        if self.kind == "other" and self.class_code is None:
            raise ValueError("a function of kind other needs class_code")
        indexes = [b.index for b in self.bars or ()]
        taken = indexes + [b.index + 1 for b in self.bars or () if b.type.startswith("mem64")]
        if len(taken) != len(set(taken)):
            raise ValueError(f"BARs overlap: indexes {sorted(indexes)} "
                             "(a 64-bit BAR also takes the next slot)")
        return self


class OsRelease(_Strict):
    """The host's /etc/os-release ID and VERSION_ID, which AMD's GIM support tables are keyed by."""

    id: str = Field("ubuntu", pattern=r"^[a-z0-9._-]{1,32}$")  # os-release(5): lower-case, no spaces
    version_id: str = Field("22.04", pattern=r"^[A-Za-z0-9._~-]{1,32}$")
    pretty_name: str | None = Field(None, max_length=64, pattern=r"^[ -~]+$")


class GpuClientSpec(_Strict):
    """A process holding a GPU device node at boot (AMD's metrics exporter, gpuagent, an amd-smi monitor)."""

    comm: str = Field(pattern=r"^[A-Za-z0-9._-]{1,15}$")  # /proc/PID/comm: at most 15 characters
    device: str = Field(pattern=r"^/dev/(kfd|gim-smi[0-9]{1,3}|dri/(card|renderD)[0-9]{1,4})$")
    unit: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}\.service$")  # None: no service


class StateSpec(_Strict):
    iommu: bool = True
    # the host OS and kernel (`uname -r`): the capability matrix's keys (docs/hardware.md §9). The
    # defaults are the default machine's: Ubuntu 22.04 with its GA kernel, as in GIM's README table
    os_release: OsRelease = Field(default_factory=OsRelease)
    kernel_release: str = Field("6.8.0-79-generic", pattern=r"^[0-9][A-Za-z0-9._+~-]{0,63}$")
    cmdline: str = Field("BOOT_IMAGE=/boot/vmlinuz root=/dev/sda2 ro iommu=pt modprobe.blacklist=amdgpu",
                         max_length=2048, pattern=r"^[^\n\x00]*$")  # COMMAND_LINE_SIZE on x86
    cpu_vendor: Literal["AuthenticAMD", "GenuineIntel"] = "AuthenticAMD"
    modules: dict[ModuleName, dict[ParamName, str]] = Field(default_factory=dict)
    module_versions: dict[ModuleName, OneLine] = Field(default_factory=lambda: {"gim": "8.4.0.K"})
    bind: dict[Address, ModuleName] = Field(default_factory=dict)
    hugepages: dict[int, Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: {2048: 0, 1048576: 0})
    modprobe_d: dict[str, str] = Field(default_factory=dict)
    gim_config: str | None = None
    gpu_clients: tuple[GpuClientSpec, ...] = Field((), max_length=64)
    amdsmi: bool = False  # the GIM build of amd-smi is installed (vgpu.sim.amdsmi answers for it)

    @field_validator("modules", mode="before")
    @classmethod
    def _params_as_strings(cls, value: object) -> object:
        if isinstance(value, dict):
            return {k: ({pk: _param_text(pv) for pk, pv in (v or {}).items()}
                        if isinstance(v, dict) or v is None else v) for k, v in value.items()}
        return value

    @field_validator("hugepages")
    @classmethod
    def _page_sizes(cls, value: dict[int, int]) -> dict[int, int]:
        for size in value:
            if size not in (2048, 1048576):
                raise ValueError(f"hugepage size {size} kB is not 2048 or 1048576")
        return value

    @field_validator("modprobe_d")
    @classmethod
    def _conf_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}\.conf", name) or name.startswith("."):
                raise ValueError(f"modprobe.d file name {name!r} must be a plain name ending in .conf")
        return value


def _param_text(value: object) -> object:
    if isinstance(value, bool):
        return "Y" if value else "N"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return value


class MachineSpec(_Strict):
    version: Literal["v1"]
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    description: str = Field(min_length=1, max_length=200, pattern=r"^[^\n]*$")
    auto_host_bridges: bool = True
    functions: tuple[FunctionSpec, ...] = Field(min_length=1)
    state: StateSpec = Field(default_factory=StateSpec)

    @model_validator(mode="after")
    def _references(self) -> "MachineSpec":
        declared = [f.address for f in self.functions]
        dupes = sorted({a for a in declared if declared.count(a) > 1})
        if dupes:
            raise ValueError(f"function address declared twice: {', '.join(dupes)}")
        known = set(declared) | {a for f in self.functions for a in f.path}
        for f in self.functions:
            if f.address in f.path:
                raise ValueError(f"{f.address} lists itself in its path")
            if f.iommu_group_with is not None and f.iommu_group_with not in known:
                raise ValueError(f"{f.address}: iommu_group_with {f.iommu_group_with} is not a function here")
        for address, driver in self.state.bind.items():
            if address not in known:
                raise ValueError(f"state.bind: {address} is not a function here")
        gim = "gim" in self.state.modules
        for f in self.functions:
            if f.kind == "gpu" and f.sriov is not None and f.sriov.total_vfs == 0 and \
                    (gim or self.state.bind.get(f.address) == "gim"):
                raise ValueError(f"{f.address}: sriov.total_vfs is 0, but gim drives this GPU and needs SR-IOV "
                                 "(GIM's GPUs advertise at least one VF); leave sriov out to take the model's value")
        return self


def list_machines() -> list[tuple[str, str]]:
    """(name, one-line description) of every machine shipped in vgpu/sim/machines/."""
    out = []
    for path in sorted(MACHINES_DIR.glob("*.yaml")):
        out.append((path.stem, load_spec(path).description))
    return out


def load_spec(name_or_path: str | Path) -> MachineSpec:
    """A shipped machine by name, or a spec file by path. Raises InputError (one line) when
    the name is unknown, the file is unreadable, not YAML, or does not match the schema."""
    path = _locate(name_or_path)
    data = load_yaml(path, "machine spec")  # bounded, no aliases, no duplicate keys, UTF-8
    if not isinstance(data, dict):
        raise InputError(f"machine spec {path} must be a YAML mapping with version, name, functions")
    try:
        return MachineSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"machine spec {path} is invalid: {_first_error(exc)}") from None


def _locate(name_or_path: str | Path) -> Path:
    if isinstance(name_or_path, Path) or "/" in str(name_or_path) or str(name_or_path).endswith(
            (".yaml", ".yml")):
        return Path(name_or_path)  # load_yaml says what is wrong with it (missing, a FIFO, a directory)
    name = str(name_or_path)
    path = MACHINES_DIR / f"{name}.yaml"
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name) or not path.is_file():
        known = ", ".join(sorted(p.stem for p in MACHINES_DIR.glob("*.yaml")))
        raise InputError(f"unknown simulated machine {name!r}; known machines: {known}",
                         hint="or pass the path of a machine spec YAML file")
    return path


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    err = errors[0]
    loc = ".".join(str(p) for p in err["loc"]) or "spec"
    msg = err["msg"].removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{loc}: {msg}{more}"
