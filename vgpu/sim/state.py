"""The simulated host's state: every PCI function, loaded modules, holders; saved as JSON.

The JSON file is the source of truth; the sysfs tree under ``root/`` is rendered from it
(``vgpu.sim.tree``). Each kernel operation saves the new state first, then renders the changed
parts, then records the rendered generation, so that a process killed mid-operation leaves a
state that the next ``SimHost.open`` re-renders completely (``tree_generation`` != ``generation``).
"""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vgpu.fsutil import atomic_write
from vgpu.errors import InputError
from vgpu.inputs import InputFileError, parse_json, read_text
from vgpu.model.pci import PciAddress
from vgpu.sim.drivers import MODULE_NAME, PARAM_NAME

STATE_SCHEMA = "vgpu.sim.state/v1"
STATE_FILE = "state.json"
TREE_MARK = "tree-generation"
LOCK_FILE = ".lock"


class Bar(BaseModel):
    """One line of the ``resource`` file: index 0-5 BARs, 6 ROM, 7-12 IOV BARs."""

    index: int
    start: int
    size: int
    flags: int


class Sriov(BaseModel):
    total_vfs: int
    offset: int
    stride: int
    vf_device: int
    num_vfs: int = 0
    vf_bars: list[Bar] = Field(default_factory=list)  # per-VF sizes; start = IOV BAR start
    vf_limit: int | None = None  # what the firmware allows GIM to enable (None: total_vfs)


class Function(BaseModel):
    """One PCI function as the kernel knows it."""

    model_config = ConfigDict(validate_assignment=False)

    address: str
    parent: str | None  # upstream bridge address; None: on the host bridge's root bus
    kind: str
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    class_code: int
    revision: int = 0
    numa_node: int = -1
    natural_driver: str | None = None  # the driver drivers_probe picks when its module is loaded
    driver: str | None = None
    driver_override: str | None = None
    iommu_group: int | None = None
    bars: list[Bar] = Field(default_factory=list)
    link: tuple[str, int, str, int] | None = None  # speed, width, max speed, max width
    sriov: Sriov | None = None
    physfn: str | None = None
    vf_index: int | None = None
    gpu_model: str | None = None  # catalog name for catalog-known AMD GPUs
    compute_partition: str | None = None
    memory_partition: str | None = None

    @property
    def pci(self) -> PciAddress:
        return PciAddress.parse(self.address)

    @property
    def is_bridge(self) -> bool:
        return (self.class_code >> 8) == 0x0604


class Holder(BaseModel):
    pid: int
    comm: str
    group: int


class GimSaved(BaseModel):
    """What GIM remembers per PF between loads (its saved partition modes)."""

    vf_num: int
    compute: str
    memory: str


class Fault(BaseModel):
    """An armed fault: the next operation matching ``pattern`` (after ``skip`` matches) fails."""

    pattern: str
    error: str
    skip: int = 0
    kill: bool = False  # SIGKILL the calling process right after the operation instead


class SimState(BaseModel):
    schema_: str = Field(STATE_SCHEMA, alias="schema")
    machine: dict  # the MachineSpec it was built from (model_dump)
    generation: int = 0
    functions: dict[str, Function] = Field(default_factory=dict)
    modules: dict[str, dict[str, str]] = Field(default_factory=dict)  # loaded: name -> params
    module_versions: dict[str, str] = Field(default_factory=dict)
    available_modules: list[str] = Field(default_factory=list)
    iommu: bool = True
    cmdline: str = ""
    cpu_vendor: str = "AuthenticAMD"
    hugepages: dict[str, int] = Field(default_factory=dict)  # "2048" / "1048576" -> count
    holders: dict[str, Holder] = Field(default_factory=dict)
    next_pid: int = 4000
    next_group: int = 0
    clock_us: int = 5_000_000  # dmesg timestamp, microseconds since boot
    gim_saved: dict[str, GimSaved] = Field(default_factory=dict)
    gim_config: dict[str, list[str]] = Field(default_factory=dict)  # GIM's effective per-GPU settings
    dynamic_ids: dict[str, list[str]] = Field(default_factory=dict)  # driver -> "vvvv dddd" (new_id)
    faults: list[Fault] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _names_are_kernel_names(self) -> "SimState":
        """Names become paths under root/ (vgpu.sim.tree), so a hand-edited state.json is held to the
        machine spec's rules: kernel module, driver and parameter names, sysfs PCI addresses, numeric pids."""
        fs = self.functions.values()
        drivers = [*self.modules, *self.module_versions, *self.available_modules, *self.dynamic_ids,
                   *(d for f in fs for d in (f.driver, f.natural_driver, f.driver_override) if d is not None)]
        bad = next((d for d in drivers if not MODULE_NAME.fullmatch(d)), None)
        bad = bad or next((p for ps in self.modules.values() for p in ps if not PARAM_NAME.fullmatch(p)), None)
        bad = bad or next((p for p in self.holders if not p.isascii() or not p.isdigit() or len(p) > 10), None)
        addresses = [*self.functions, *self.gim_saved,
                     *(a for f in fs for a in (f.address, f.parent, f.physfn) if a is not None)]
        bad = bad or next((a for a in addresses if not _sysfs_address(a)), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not a kernel name, pid or PCI address")
        return self

    def function(self, address: str) -> Function | None:
        return self.functions.get(address)

    def sorted_functions(self) -> list[Function]:
        return sorted(self.functions.values(), key=lambda f: f.pci)

    def group_members(self, group: int) -> list[Function]:
        return [f for f in self.sorted_functions() if f.iommu_group == group]

    def vfs_of(self, pf: Function) -> list[Function]:
        vfs = [f for f in self.functions.values() if f.physfn == pf.address]
        return sorted(vfs, key=lambda f: f.vf_index or 0)


def _sysfs_address(text: str) -> bool:
    try:
        return str(PciAddress.parse(text)) == text
    except InputError:
        return False


def load_state(state_dir: Path) -> SimState:
    """Read ``state_dir/state.json``. Raises InputError when missing or corrupt."""
    return parse_state(read_state_text(state_dir), state_dir)


def read_state_text(state_dir: Path) -> str:
    """The text of ``state_dir/state.json`` (bounded: size cap, UTF-8), unchecked; :func:`parse_state`
    checks it. Raises InputError when missing or unreadable (corrupt when not text)."""
    path = Path(state_dir) / STATE_FILE
    try:
        return read_text(path, "simulator state")
    except InputFileError as exc:
        raise _state_error(exc, state_dir, path) from None


def parse_state(text: str, state_dir: Path) -> SimState:
    """The state that :func:`read_state_text` read from ``state_dir``. Raises InputError when corrupt."""
    path = Path(state_dir) / STATE_FILE
    try:
        data = parse_json(text, "simulator state", path)  # nesting bounded
    except InputFileError as exc:
        raise _state_error(exc, state_dir, path) from None
    try:
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise ValueError(f"schema is not {STATE_SCHEMA}")
        return SimState.model_validate(data)
    except (ValueError, ValidationError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
        raise InputError(f"simulated host state {path} is corrupt ({first})",
                         hint="rebuild it with `vgpu sim reset`") from None


def _state_error(exc: InputFileError, state_dir: Path, path: Path) -> Exception:
    if exc.errno == errno.ENOENT:
        return InputError(f"no simulated host in {state_dir}",
                          hint="create one with `vgpu sim reset` or SimHost.create()")
    if exc.errno is not None:
        return exc
    return InputError(f"simulated host state {path} is corrupt ({exc.problem})",
                      hint="rebuild it with `vgpu sim reset`")


def save_state(state_dir: Path, state: SimState) -> None:
    """Write the state atomically (temp file + os.replace), mode 0644."""
    text = state.model_dump_json(by_alias=True)
    write_atomic(Path(state_dir) / STATE_FILE, text)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Atomic against readers and a killed process; no fsync (a simulated host need not survive power loss)."""
    atomic_write(path, text, mode, durable=False)


def read_tree_mark(state_dir: Path) -> int | None:
    try:
        return int((Path(state_dir) / TREE_MARK).read_text())
    except (OSError, ValueError):
        return None


def write_tree_mark(state_dir: Path, generation: int) -> None:
    write_atomic(Path(state_dir) / TREE_MARK, str(generation))


@contextmanager
def locked(state_dir: Path):
    """Hold an exclusive flock on the state dir so separate processes never interleave operations."""
    fd = os.open(Path(state_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
