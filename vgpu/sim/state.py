"""The simulated host's state: every PCI function, loaded modules, holders; saved as JSON.

The JSON file is the source of truth; the sysfs tree under ``root/`` is rendered from it
(``vgpu.sim.tree``). Each kernel operation saves the new state first, then renders the changed
parts, then records the rendered generation, so that a process killed mid-operation leaves a
state that the next ``SimHost.open`` re-renders completely (``tree_generation`` != ``generation``).

The records are plain classes with a field table each, checked by a small strict validator of their
own: every read command opens a simulated host, and pydantic's import and model building cost more
than the rest of such a command's start-up (benchmarks/README.md "CLI start-up"). The validator is
strict where pydantic's lax mode was not: an integer is a JSON integer (not true, 5.0 or "5"), a boolean
is true or false. Keys the records do not know are refused at the top level and dropped inside
records, as before; what ``save_state`` writes is byte for byte what the pydantic models wrote.
"""

from __future__ import annotations

import errno
import fcntl
import json
import operator
import os
import re
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vgpu.errors import InputError
from vgpu.fsutil import atomic_write
from vgpu.inputs import InputFileError, parse_json, read_text
from vgpu.model.pci import PciAddress
from vgpu.sim.drivers import MODULE_NAME, PARAM_NAME

STATE_SCHEMA = "vgpu.sim.state/v1"
STATE_FILE = "state.json"
TREE_MARK = "tree-generation"
LOCK_FILE = ".lock"


# -- the validator's pieces: a check takes a value parsed from JSON and returns it (or its record) -----

class _Bad(Exception):
    """A value the state file must not hold; ``loc`` grows (key by key, outermost first) on the way up."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
        self.loc: list[str | int] = []


_KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
          dict: "an object", type(None): "null"}


def _wrong(expected: str, value: object) -> _Bad:
    return _Bad(f"Input should be {expected}, not {_KINDS.get(type(value), type(value).__name__)}")


def _exactly(kind: type, expected: str) -> Callable[[Any], Any]:
    """A check that the value is of type ``kind`` itself, not a subtype (True is an int to Python, not here)."""
    def check(value: Any) -> Any:
        if type(value) is kind:
            return value
        raise _wrong(expected, value)
    return check


_int = _exactly(int, "a valid integer")
_str = _exactly(str, "a valid string")
_bool = _exactly(bool, "a valid boolean")
_object = _exactly(dict, "a valid dictionary")


_SCALARS = (_int, _str, _bool)  # checks that return the value itself


def _opt(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _list(check: Callable[[Any], Any]) -> Callable[[Any], list]:
    scalar = check in _SCALARS  # a list of scalars is kept as parsed

    def checked(value: Any) -> list:
        if type(value) is not list:
            raise _wrong("a valid list", value)
        out = value if scalar else []
        i = 0
        try:
            for i, item in enumerate(value):
                item = check(item)
                if not scalar:
                    out.append(item)
        except _Bad as exc:
            exc.loc.insert(0, i)
            raise
        return out
    return checked


def _dict(check: Callable[[Any], Any]) -> Callable[[Any], dict]:
    """An object whose values pass ``check`` (its keys are strings: JSON's always are)."""
    scalar = check in _SCALARS

    def checked(value: Any) -> dict:
        if type(value) is not dict:
            raise _wrong("a valid dictionary", value)
        out = value if scalar else {}
        key = None
        try:
            for key, item in value.items():
                item = check(item)
                if not scalar:
                    out[key] = item
        except _Bad as exc:
            exc.loc.insert(0, key)
            raise
        return out
    return checked


def _link(value: Any) -> tuple[str, int, str, int]:
    """speed, width, max speed, max width (saved as a JSON list)."""
    if type(value) is not list or len(value) != 4:
        raise _wrong("a list of 4 items (speed, width, max speed, max width)", value)
    for i, check in enumerate((_str, _int, _str, _int)):
        try:
            check(value[i])
        except _Bad as exc:
            exc.loc.insert(0, i)
            raise
    return tuple(value)


_REQUIRED = object()


def _fields(**spec: Any) -> tuple[tuple[str, ...], tuple[tuple[str, str, Callable, Any], ...]]:
    """A record's ``__slots__`` and field table from ``name=check`` (required) or ``name=(check, default)``
    or ``name=(check, default, json_key)``; a default that is a type (list, dict) is called per record."""
    table = []
    for name, entry in spec.items():
        check, default, key = (entry + (name,))[:3] if isinstance(entry, tuple) else (entry, _REQUIRED, name)
        table.append((name, key, check, default))
    return tuple(spec), tuple(table)


class _Record:
    """Fields in a table (``_FIELDS``: attribute, JSON key, check, default), compared by value as pydantic
    models were; not hashable, since they change. The constructor checks names, not types: vgpu's own code
    builds records, and what it builds is checked when the saved state is next read (``from_json``)."""

    __slots__ = ()
    _FIELDS: tuple[tuple[str, str, Callable, Any], ...] = ()
    _FORBID_EXTRA = False  # unknown keys: refused, or dropped (pydantic's default, which the records had)
    _SPARSE: frozenset[str] = frozenset()
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, **values: Any):
        for name, _key, _check, default in self._FIELDS:
            if name in values:
                setattr(self, name, values.pop(name))
            elif default is _REQUIRED:
                raise TypeError(f"{type(self).__name__}() needs {name}")
            else:
                setattr(self, name, default() if isinstance(default, type) else default)
        if values:
            raise TypeError(f"{type(self).__name__}() has no field {next(iter(values))}")

    @classmethod
    def from_json(cls, data: Any):
        """The record that ``data`` (parsed JSON) describes; raises _Bad naming the first problem."""
        if type(data) is not dict:
            raise _wrong("a valid dictionary", data)
        record = cls.__new__(cls)
        for name, key, check, default in cls._FIELDS:
            if key in data:
                try:
                    value = check(data[key])
                except _Bad as exc:
                    exc.loc.insert(0, key)
                    raise
            elif default is _REQUIRED:
                bad = _Bad("Field required")
                bad.loc.append(key)
                raise bad
            else:
                value = default() if isinstance(default, type) else default
            setattr(record, name, value)
        if cls._FORBID_EXTRA and not cls._KEYS.issuperset(data):
            bad = _Bad("Extra inputs are not permitted")
            bad.loc.append(next(k for k in data if k not in cls._KEYS))
            raise bad
        return record

    def to_json(self) -> dict:
        """The fields by JSON key, in table order; nested records stay records (``save_state`` dumps them).
        Fields named in ``_SPARSE`` (added after states were saved) are written only when not their default,
        so a state that does not use them saves byte for byte as before."""
        data = dict(zip(self._KEY_ORDER, self._values(self)))
        for name, key, _check, default in self._FIELDS:
            if name in self._SPARSE and data[key] == (default() if isinstance(default, type) else default):
                del data[key]
        return data

    def __init_subclass__(cls) -> None:
        cls._KEY_ORDER = tuple(key for _name, key, _check, _default in cls._FIELDS)
        cls._KEYS = frozenset(cls._KEY_ORDER)
        cls._values = operator.attrgetter(*cls.__slots__)  # a tuple of the fields (each record has several)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


# -- the records -------------------------------------------------------------------------------------

class Bar(_Record):
    """One line of the ``resource`` file: index 0-5 BARs, 6 ROM, 7-12 IOV BARs."""

    __slots__, _FIELDS = _fields(index=_int, start=_int, size=_int, flags=_int)


class Sriov(_Record):
    __slots__, _FIELDS = _fields(
        total_vfs=_int, offset=_int, stride=_int, vf_device=_int, num_vfs=(_int, 0),
        vf_bars=(_list(Bar.from_json), list),  # per-VF sizes; start = IOV BAR start
        vf_limit=(_opt(_int), None),  # what the firmware allows GIM to enable (None: total_vfs)
    )


class Function(_Record):
    """One PCI function as the kernel knows it."""

    __slots__, _FIELDS = _fields(
        address=_str,
        parent=_opt(_str),  # upstream bridge address; None: on the host bridge's root bus (required)
        kind=_str, vendor=_int, device=_int, subsystem_vendor=_int, subsystem_device=_int, class_code=_int,
        revision=(_int, 0), numa_node=(_int, -1),
        natural_driver=(_opt(_str), None),  # the driver drivers_probe picks when its module is loaded
        driver=(_opt(_str), None), driver_override=(_opt(_str), None), iommu_group=(_opt(_int), None),
        bars=(_list(Bar.from_json), list),
        link=(_opt(_link), None),  # (speed, width, max speed, max width)
        sriov=(_opt(Sriov.from_json), None), physfn=(_opt(_str), None), vf_index=(_opt(_int), None),
        gpu_model=(_opt(_str), None),  # catalog name for catalog-known AMD GPUs
        compute_partition=(_opt(_str), None), memory_partition=(_opt(_str), None),
    )

    @property
    def pci(self) -> PciAddress:
        return PciAddress.parse(self.address)

    @property
    def is_bridge(self) -> bool:
        return (self.class_code >> 8) == 0x0604


GPU_NODE = re.compile(r"/dev/(kfd|gim-smi[0-9]{1,3}|dri/(card|renderD)[0-9]{1,4})")  # what a GPU client holds
UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}\.service")  # a systemd service name


class Holder(_Record):
    """A simulated process holding a device: /dev/vfio/<group> (``group``), or a GPU node such as
    /dev/gim-smi0 (``device``, group -1), optionally as part of a systemd service (``unit``)."""

    __slots__, _FIELDS = _fields(pid=_int, comm=_str, group=_int, device=(_str, ""), unit=(_str, ""))
    _SPARSE = frozenset({"device", "unit"})  # GPU clients (issue 24); a VFIO holder has neither


class GimSaved(_Record):
    """What GIM remembers per PF between loads (its saved partition modes)."""

    __slots__, _FIELDS = _fields(vf_num=_int, compute=_str, memory=_str)


class Fault(_Record):
    """An armed fault: the next operation matching ``pattern`` (after ``skip`` matches) fails."""

    __slots__, _FIELDS = _fields(
        pattern=_str, error=_str, skip=(_int, 0),
        kill=(_bool, False),  # SIGKILL the calling process right after the operation instead
    )


class SimState(_Record):
    __slots__, _FIELDS = _fields(
        schema_=(_str, STATE_SCHEMA, "schema"),
        machine=_object,  # the MachineSpec it was built from (model_dump(mode="json"))
        generation=(_int, 0),
        functions=(_dict(Function.from_json), dict),
        modules=(_dict(_dict(_str)), dict),  # loaded: name -> params
        module_versions=(_dict(_str), dict),
        available_modules=(_list(_str), list),
        iommu=(_bool, True), cmdline=(_str, ""), cpu_vendor=(_str, "AuthenticAMD"),
        hugepages=(_dict(_int), dict),  # "2048" / "1048576" -> count
        holders=(_dict(Holder.from_json), dict),
        stopped_units=(_dict(_list(Holder.from_json)), dict),  # unit -> its processes while it is stopped
        next_pid=(_int, 4000), next_group=(_int, 0),
        clock_us=(_int, 5_000_000),  # dmesg timestamp, microseconds since boot
        gim_saved=(_dict(GimSaved.from_json), dict),
        gim_config=(_dict(_list(_str)), dict),  # GIM's effective per-GPU settings
        dynamic_ids=(_dict(_list(_str)), dict),  # driver -> "vvvv dddd" (new_id)
        faults=(_list(Fault.from_json), list),
    )
    _FORBID_EXTRA = True
    _SPARSE = frozenset({"stopped_units"})

    @classmethod
    def from_json(cls, data: Any) -> SimState:
        state = super().from_json(data)
        state._names_are_kernel_names()
        return state

    def _names_are_kernel_names(self) -> None:
        """Names become paths under root/ (vgpu.sim.tree), so a hand-edited state.json is held to the
        machine spec's rules: kernel module, driver and parameter names, sysfs PCI addresses, numeric pids."""
        fs = self.functions.values()
        drivers = [*self.modules, *self.module_versions, *self.available_modules, *self.dynamic_ids,
                   *(d for f in fs for d in (f.driver, f.natural_driver, f.driver_override) if d is not None)]
        bad = next((d for d in drivers if not MODULE_NAME.fullmatch(d)), None)
        bad = bad or next((p for ps in self.modules.values() for p in ps if not PARAM_NAME.fullmatch(p)), None)
        bad = bad or next((p for p in self.holders if not p.isascii() or not p.isdigit() or len(p) > 10), None)
        held = [*self.holders.values(), *(h for hs in self.stopped_units.values() for h in hs)]
        bad = bad or next((h.device for h in held if h.device and not GPU_NODE.fullmatch(h.device)), None)
        bad = bad or next((u for u in [*self.stopped_units, *(h.unit for h in held if h.unit)]
                           if not UNIT_NAME.fullmatch(u)), None)
        addresses = [*self.functions, *self.gim_saved,
                     *(a for f in fs for a in (f.address, f.parent, f.physfn) if a is not None)]
        bad = bad or next((a for a in addresses if not _sysfs_address(a)), None)
        if bad is not None:
            raise _Bad(f"{bad!r} is not a kernel name, pid or PCI address")
        self._functions_are_a_tree()

    def _functions_are_a_tree(self) -> None:
        """The sysfs tree follows ``parent`` and ``physfn`` and puts BARs in ``resource`` rows, so a hand-edited
        state must not name a function it lacks, loop, or hold a BAR outside its slots or of negative size
        (the tree's rendering would crash or never end)."""
        for key, f in self.functions.items():
            where = f"functions.{key}"
            if f.address != key:
                raise _Bad(f"{where}.address: {f.address!r} is not its key")
            for field in ("parent", "physfn"):
                other = getattr(f, field)
                if other is not None and (other == key or other not in self.functions):
                    raise _Bad(f"{where}.{field}: {other!r} is not another function of this state")
            seen, up = {key}, f.parent
            while up is not None:
                if up in seen:
                    raise _Bad(f"{where}.parent: the chain of parents loops back to {up!r}")
                seen.add(up)
                up = self.functions[up].parent
            bars = [(b, 6) for b in f.bars] + [(b, 5) for b in (f.sriov.vf_bars if f.sriov else ())]
            for bar, top in bars:
                if not 0 <= bar.index <= top or bar.start < 0 or bar.size < 0 or bar.flags < 0:
                    raise _Bad(f"{where}: BAR {bar.index} (index 0-{top}, start, size and flags from 0) "
                               "is out of range")

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


# -- the file ----------------------------------------------------------------------------------------

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


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")  # a \uD800-\uDFFF escape: maybe a lone surrogate


def parse_state(text: str, state_dir: Path) -> SimState:
    """The state that :func:`read_state_text` read from ``state_dir``. Raises InputError when corrupt."""
    path = Path(state_dir) / STATE_FILE
    try:
        data = parse_json(text, "simulator state", path)  # nesting bounded
    except InputFileError as exc:
        raise _state_error(exc, state_dir, path) from None
    try:
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise _Bad(f"schema is not {STATE_SCHEMA}")
        state = SimState.from_json(data)
        if _SURROGATE.search(text):  # a string that could not be saved (or rendered) again as UTF-8
            try:
                _dumps(state).encode("utf-8")
            except UnicodeEncodeError:
                raise _Bad("a string holds a lone surrogate (\\ud800-\\udfff)") from None
        return state
    except _Bad as exc:
        raise InputError(f"simulated host state {path} is corrupt ({_problem(exc)})",
                         hint="rebuild it with `vgpu sim reset`") from None


def _problem(exc: _Bad) -> str:
    """"where: what", ``where`` the dotted path of the value (keys that are not plain names quoted, cut)."""
    if not exc.loc:
        return exc.message
    parts = (str(p) if isinstance(p, int) or (p.isprintable() and len(p) <= 64 and p.strip() == p and p)
             else repr(p[:64]) for p in exc.loc)
    return f"{'.'.join(parts)}: {exc.message}"


def _state_error(exc: InputFileError, state_dir: Path, path: Path) -> Exception:
    if exc.errno == errno.ENOENT:
        return InputError(f"no simulated host in {state_dir}",
                          hint="create one with `vgpu sim reset` or SimHost.create()")
    if exc.errno is not None:
        return exc
    return InputError(f"simulated host state {path} is corrupt ({exc.problem})",
                      hint="rebuild it with `vgpu sim reset`")


def _dumps(state: SimState) -> str:
    """Compact JSON, keys in field order, non-ASCII as is: what pydantic's model_dump_json wrote."""
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False, default=_to_json)


def _to_json(value: object) -> dict:
    if isinstance(value, _Record):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not part of a simulated host's state")


def save_state(state_dir: Path, state: SimState) -> str:
    """Write the state atomically (temp file + os.replace), mode 0644; returns the text written."""
    text = _dumps(state)
    write_atomic(Path(state_dir) / STATE_FILE, text)
    return text


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
