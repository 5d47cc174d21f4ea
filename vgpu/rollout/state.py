"""The roll-out's record: what was asked (the spec), the waves, and each host's state.

One JSON file, ``<state-dir>/state.json`` (schema ``vgpu.rollout/v1``, vgpu/schemas/rollout-v1.json), rewritten
atomically (mode 0600) after every change, so a roll-out killed at any moment resumes from its last record.
Each host is ``not_started``, ``in_progress``, ``done`` or ``failed`` (the AMD GPU Operator's per-node states);
a wave is ``pending``, ``running``, ``passed`` or ``failed``. The file comes back from disk as outside input:
read through vgpu.inputs (no FIFO, device, huge or binary file), validated field by field, and checked for
consistency (every wave's hosts recorded, canary first) before a resume trusts it. One run at a time holds
the state directory's lock.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError,
                      field_validator)

from vgpu import inputs
from vgpu.errors import InputError
from vgpu.fsutil import atomic_write

SCHEMA = "vgpu.rollout/v1"
STATE_NAME = "state.json"
MAX_HOSTS = 4096

HostState = Literal["not_started", "in_progress", "done", "failed"]
WaveState = Literal["pending", "running", "passed", "failed"]
RolloutState = Literal["running", "stopped", "interrupted", "done"]
Phase = Literal["provision", "guest-stack", "validate", "compare"]
# A host's provision stopped by a signal, as read back from the host after the stop (vgpu.automation.interrupt)
StopOutcome = Literal["applied", "rolled back", "unknown", "not started"]
Text = Field(default=None, max_length=4000)
Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]


# variables the roll-out sets for each playbook itself: an -e of the same name would silently change a wave
OWN_VARS = frozenset({"provision_profile", "vgpu_serial", "vgpu_max_fail_percentage", "vgpu_provision_hosts",
                      "vgpu_guests", "validate_report_dir", "validate_profile", "validate_simulate"})
# variables an -e would use to weaken the gate or re-target hosts behind the plan's back: the inventory or the
# roll-out's own options set them
GATE_VARS = frozenset({"inventory_hostname", "vgpu_host", "vgpu_guest_profile", "vgpu_guest_env", "validate_baseline",
                       "validate_thresholds", "validate_skip_workloads", "validate_sim_guests",
                       "validate_sim_scenarios", "ansible_host", "ansible_port", "ansible_connection",
                       "ansible_ssh_host", "ansible_ssh_port", "ansible_limit"})
_TEMPLATE = re.compile(r"\{\{|\{%|\{#")


def check_variable(key: str, value: Any) -> None:
    """A variable the roll-out passes to every playbook (from -e, or back from the state file): a plain name
    that is not the roll-out's own or a secret, and literal values (Ansible would run a template on the
    controller). Raises ValueError."""
    from vgpu.automation.playbooks import SECRET_NAME, VARIABLE_NAME

    if not VARIABLE_NAME.match(key):
        raise ValueError(f"{key[:60]!r} is not a variable name")
    if key in OWN_VARS:
        raise ValueError(f"{key}: the roll-out sets this variable itself for each wave")
    if key in GATE_VARS:
        raise ValueError(f"{key}: would change which hosts a wave reaches or what its gate checks; set it in the "
                         "inventory (or with the roll-out's options), where the plan shows it")
    if SECRET_NAME.search(key):
        raise ValueError(f"{key}: looks like a secret; a roll-out records its variables in its state file to "
                         "resume with them (keep secrets in the inventory, with ansible-vault)")
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str) and _TEMPLATE.search(item):
            raise ValueError(f"{key}: the value is a Jinja template; vgpu passes only literal values")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{key}: {item} is not a finite number")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class Spec(_Model):
    """What the operator asked for; a resume runs exactly this again."""

    inventory: str = Field(max_length=4096)
    inventory_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    inventory_view_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")  # as Ansible resolves it (group_vars, host_vars)
    profile: str = Field(max_length=128)
    guest_profile: str | None = Field(default=None, max_length=128)
    hosts_pattern: str = Field(max_length=1024)
    guests_pattern: str = Field(max_length=1024)
    canary: list[str] = Field(default_factory=list, max_length=MAX_HOSTS)
    serial: list[str] = Field(min_length=1, max_length=32)
    max_unavailable: str = Field(max_length=8)
    baseline: str | None = Field(default=None, max_length=4096)
    baseline_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    thresholds: dict[str, float] = Field(default_factory=dict, max_length=64)
    guest_stack: bool = False
    allow_unvalidated: bool = False
    extra_vars: dict[str, Union[Scalar, list[Scalar]]] = Field(default_factory=dict, max_length=128)

    @field_validator("profile", "guest_profile", "hosts_pattern", "guests_pattern", "inventory", "baseline")
    @classmethod
    def _literal(cls, v: str | None) -> str | None:
        if v is not None and _TEMPLATE.search(v):
            raise ValueError("a Jinja template; vgpu passes only literal values")
        return v

    @field_validator("extra_vars")
    @classmethod
    def _variables(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, value in v.items():
            check_variable(key, value)
        return v


class HostRecord(_Model):
    wave: int = Field(ge=1)
    state: HostState = "not_started"
    guests: list[str] = Field(default_factory=list, max_length=MAX_HOSTS)
    phase: Phase | None = None
    reason: str | None = Text
    started: str | None = Field(default=None, max_length=40)
    finished: str | None = Field(default=None, max_length=40)
    attempts: int = Field(default=0, ge=0)
    stopped: StopOutcome | None = None  # its last provision was interrupted: how the host ended (read back)


class WaveRecord(_Model):
    index: int = Field(ge=1)
    canary: bool = False
    hosts: list[str] = Field(min_length=1, max_length=MAX_HOSTS)
    state: WaveState = "pending"
    started: str | None = Field(default=None, max_length=40)
    finished: str | None = Field(default=None, max_length=40)
    reason: str | None = Text
    runs: int = Field(default=0, ge=0)  # its reports are in wave-NN/run-<runs>/
    reports: dict[str, str] = Field(default_factory=dict, max_length=16)  # name -> path relative to the state dir

    @property
    def label(self) -> str:
        return "the canary" if self.canary else f"wave {self.index}"


class Rollout(_Model):
    schema_: Literal["vgpu.rollout/v1"] = Field(default=SCHEMA, alias="schema")
    created: str = Field(max_length=40)
    updated: str = Field(max_length=40)
    state: RolloutState = "running"
    reason: str | None = Text
    spec: Spec
    max_unavailable_hosts: int = Field(ge=1)
    waves: list[WaveRecord] = Field(min_length=1, max_length=MAX_HOSTS)
    hosts: dict[str, HostRecord] = Field(max_length=MAX_HOSTS)
    warnings: list[str] = Field(default_factory=list, max_length=MAX_HOSTS)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in ("not_started", "in_progress", "done", "failed")}
        for h in self.hosts.values():
            out[h.state] += 1
        return out

    def check(self, source: str) -> None:
        """Consistency a resume relies on; InputError naming the first problem."""
        from vgpu.rollout.waves import check_name

        for name in [*self.hosts, *(g for rec in self.hosts.values() for g in rec.guests), *self.spec.canary]:
            check_name(name, f"{source}: host")
        seen: set[str] = set()
        for i, wave in enumerate(self.waves, start=1):
            if wave.index != i:
                raise InputError(f"{source}: wave {i} is numbered {wave.index}")
            if wave.canary != (i == 1):
                raise InputError(f"{source}: only the first wave is the canary (wave {i})")
            for h in wave.hosts:
                if h in seen:
                    raise InputError(f"{source}: host {h[:80]!r} is in two waves")
                seen.add(h)
                rec = self.hosts.get(h)
                if rec is None or rec.wave != i:
                    raise InputError(f"{source}: host {h[:80]!r} of wave {i} has no matching host record")
            for name, rel in wave.reports.items():
                if rel.startswith("/") or ".." in Path(rel).parts:
                    raise InputError(f"{source}: wave {i} report {name[:40]!r} points outside the state directory")
        if set(self.hosts) != seen:
            extra = sorted(set(self.hosts) - seen)[0]
            raise InputError(f"{source}: host {extra[:80]!r} is recorded but in no wave")
        if self.spec.canary and list(self.spec.canary) != list(self.waves[0].hosts):
            raise InputError(f"{source}: the canary wave is not the spec's canary hosts")
        owner: dict[str, str] = {}
        for h, rec in self.hosts.items():
            for g in rec.guests:
                if owner.setdefault(g, h) != h:
                    raise InputError(f"{source}: guest {g[:80]!r} is recorded on two hosts")
        for wave in self.waves:  # a wave's state and its hosts' must agree: a resume trusts both
            states = {self.hosts[h].state for h in wave.hosts}
            allowed = {"passed": {"done", "failed"}, "pending": {"not_started"},
                       "failed": {"done", "failed", "not_started", "in_progress"},
                       "running": {"done", "failed", "not_started", "in_progress"}}[wave.state]
            if not states <= allowed or (wave.state == "passed" and "done" not in states):
                raise InputError(f"{source}: {wave.label} is {wave.state} but its hosts are "
                                 f"{', '.join(sorted(states))}")


def schema_text() -> str:
    """The JSON schema of state.json, generated from the model (committed as vgpu/schemas/rollout-v1.json)."""
    import json

    schema = Rollout.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://vgpu.invalid/schemas/rollout-v1.json"
    schema["title"] = "vgpu roll-out state (vgpu rollout; docs/rollout.md)"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class StateDir:
    """A roll-out's directory: state.json, the lock, and one sub-directory of reports per wave."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.file = self.path / STATE_NAME

    def exists(self) -> bool:
        return self.file.exists() or self.file.is_symlink()

    def check_new(self) -> None:
        """Before a new roll-out writes anything: the directory is new, or an empty directory this user owns that
        nobody else may write into (a roll-out runs what its state file says: nobody else may write it), not a
        symlink, holds no roll-out yet. Raises InputError."""
        if not str(self.path).strip() or str(self.path) in (".", "/"):
            raise InputError(f"state directory {str(self.path)!r}: give a directory of its own, e.g. rollout-rocm70")
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            parent = self.path.parent
            if not parent.is_dir():
                raise InputError(f"state directory {self.path}: {parent} does not exist or is not a directory") \
                    from None
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(f"state directory {self.path} cannot be created: {parent} is not writable "
                                 "by this user") from None
            return
        except OSError as exc:
            raise inputs.write_error(exc, "state directory", self.path) from None
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise InputError(f"state directory {self.path} is {inputs.describe_mode(st.st_mode)}, not a directory; "
                             "vgpu will not write there")
        if self.exists():
            raise InputError(f"a roll-out is already recorded in {self.path}",
                             hint=f"vgpu rollout resume --state-dir {self.path} (or another --state-dir for a new one)")
        if any(self.path.iterdir()):
            raise InputError(f"state directory {self.path} is not empty; a roll-out takes a directory of its own",
                             hint="give a new directory: vgpu creates it")
        self._check_trusted(st, self.path, "state directory")

    @staticmethod
    def _check_trusted(st: os.stat_result, path: Path, what: str) -> None:
        if st.st_uid != os.geteuid():
            raise InputError(f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}); "
                             "a roll-out runs what its state says, so only its owner may write it")
        if st.st_mode & 0o022:
            raise InputError(f"{what} {path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}); a roll-out "
                             "runs what its state says, so only its owner may write it", hint=f"chmod go-w {path}")

    def check_unclaimed(self) -> None:
        """Under the lock, after ``create``: no other `run` recorded a roll-out here in the meantime."""
        if self.exists():
            raise InputError(f"a roll-out is already recorded in {self.path}",
                             hint=f"vgpu rollout resume --state-dir {self.path} (or another --state-dir for a new one)")

    def create(self) -> None:
        try:
            self.path.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise inputs.write_error(exc, "state directory", self.path) from None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One run per state directory (a second `run`/`resume` gets exit 7 at once)."""
        from vgpu.executor import host_lock

        from vgpu.errors import HostError

        held = host_lock(self.path, timeout=0.0, what=f"the roll-out in {self.path}")
        try:
            held.__enter__()
        except HostError as exc:  # the lock file itself: a state directory problem, nothing ran
            raise InputError(exc.message.replace("host lock", "roll-out lock"), hint=exc.hint) from None
        try:
            yield
        finally:
            held.__exit__(None, None, None)

    def load(self, *, trusted: bool = True) -> Rollout:
        """The recorded roll-out. ``trusted`` (run, resume: it will be acted on): the directory and the file must be
        this user's and writable by nobody else, neither a symlink."""
        source = f"roll-out state {self.file}"
        if not self.path.is_dir():
            raise InputError(f"no roll-out in {self.path}: not a directory",
                             hint="give the --state-dir a `vgpu rollout run` wrote")
        if not self.exists():
            raise InputError(f"no roll-out in {self.path}: {STATE_NAME} is missing",
                             hint="give the --state-dir a `vgpu rollout run` wrote")
        if trusted:
            for path, what in ((self.path, "state directory"), (self.file, "roll-out state")):
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    raise InputError(f"{what} {path} is a symbolic link; a roll-out acts only on its own files")
                if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                    self._check_trusted(st, path, what)
        data = inputs.load_json(self.file, "roll-out state")
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            found = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise InputError(f"{source}: schema {str(found)[:60]!r}; this vgpu reads {SCHEMA}")
        try:
            rollout = Rollout.model_validate(data)
        except ValidationError as exc:
            raise InputError(f"{source}: {inputs.validation_problem(exc, limit=200)}",
                             hint="the file is vgpu's record of a roll-out; restore it or start a new roll-out") \
                from None
        rollout.check(source)
        return rollout

    def save(self, rollout: Rollout) -> None:
        import json

        rollout.updated = now()
        data = json.dumps(rollout.to_dict(), indent=2, allow_nan=False) + "\n"
        try:
            atomic_write(self.file, data, 0o600)
        except OSError as exc:
            raise inputs.write_error(exc, "roll-out state", self.file) from None

    def run_dir(self, wave: int, run: int, batch: int = 1) -> Path:
        """Where one run of a wave keeps its reports (a wave split into batches: one directory per batch)."""
        return self.path / f"wave-{wave:02d}" / (f"run-{run}" + (f"-batch-{batch}" if batch > 1 else ""))

    def validation_reports(self) -> list[Path]:
        """Every validation report the roll-out's runs wrote (run_dir()/validate, as PlaybookActions.validate writes
        them), wave by wave and run by run: `vgpu metrics --report STATE-DIR` reads them."""
        import re

        from vgpu.guest.report import JSON_NAME

        def order(path: Path) -> list[int]:  # by number: run-10 after run-9
            return [int(n) for n in re.findall(r"\d+", str(path.relative_to(self.path)))]

        return sorted(self.path.glob(f"wave-[0-9][0-9]*/run-[0-9]*/validate/{JSON_NAME}"), key=order)
