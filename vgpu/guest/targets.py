"""Which guests to validate: a vgpu guests file (YAML, ``version: v1``) or an Ansible inventory.

Guests files are parsed here (the caller reads the file through vgpu.inputs): every malformed input
ends in one ``InputError`` that names the file and the field; YAML goes through the strict loader
of vgpu.inputs. Ansible inventories are read by Ansible itself through vgpu.automation.inventory (the
one inventory reader, shared with `vgpu playbook run`); from each host's resolved variables only
those listed in docs/validate.md are used (ansible_host, ansible_port, ansible_user,
ansible_ssh_private_key_file, ansible_python_interpreter, vgpu_*); templated (``{{ }}``) values are
refused, not guessed.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from vgpu import inputs
from vgpu.errors import InputError
from vgpu.guest.transport import Endpoint

GUESTS_FILE_VERSION = "v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$")
_ZONE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")  # an IPv6 zone: an interface name or index


@dataclass(frozen=True)
class ExpectSpec:
    """An explicit expectation: the model and partition the guest's GPU function should show."""

    model: str
    compute: str | None = None
    memory: str | None = None
    is_vf: bool = True


@dataclass(frozen=True)
class Target:
    name: str
    endpoint: Endpoint
    profile: str | None = None
    expect: ExpectSpec | None = None
    env: tuple[tuple[str, str], ...] = ()  # extra agent environment; never written to reports
    python: str = "python3"
    skip_workloads: bool = False


# ---------------------------------------------------------------- guests file


class _Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    compute: str | None = None
    memory: str | None = None
    vf: bool = True


class _Guest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    host: str | None = None
    port: StrictInt | None = Field(default=None, ge=1, le=65535)  # `port: true` or "22" is refused, not 1
    user: str | None = None
    identity: str | None = None
    profile: str | None = None
    expect: _Expect | None = None
    env: dict[str, str] | None = None
    python: str | None = None
    skip_workloads: bool | None = None

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for k in v or {}:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v


class _GuestsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str
    defaults: _Guest = _Guest()
    guests: list[_Guest] = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if v != GUESTS_FILE_VERSION:
            raise ValueError(f"unsupported version {v!r}; this vgpu reads version {GUESTS_FILE_VERSION!r}")
        return v


def parse_guests_file(text: str, *, source: str, base_dir: Path) -> list[Target]:
    """Targets from a guests file. Relative identity paths are relative to ``base_dir``."""
    data = inputs.parse_yaml(text, "guests file", source, aliases=True)  # shared expectations: &mi300x / *mi300x
    try:
        spec = _GuestsFile.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"guests file {source}: {inputs.validation_problem(exc)}",
                         hint="see docs/validate.md for the guests file format") from None
    fields = ("host", "port", "user", "identity", "profile", "expect", "env", "python", "skip_workloads")
    targets = []
    for i, g in enumerate(spec.guests):
        if g.profile and g.expect:
            raise InputError(f"guests file {source}: guests.{i}: give either a profile or an expect block, "
                             "not both")
        merged = {f: getattr(spec.defaults, f) if getattr(g, f) is None else getattr(g, f) for f in fields}
        if g.profile or g.expect:  # the guest's own choice replaces the default, whichever kind it is
            merged["profile"], merged["expect"] = g.profile, g.expect
        if not merged["host"]:
            raise InputError(f"guests file {source}: guests.{i}: no host given")
        exp = merged["expect"]
        targets.append(_target(
            name=g.name or merged["host"], host=merged["host"], port=merged["port"], user=merged["user"],
            profile=merged["profile"], expect=ExpectSpec(exp.model, exp.compute, exp.memory, exp.vf) if exp else None,
            env=merged["env"] or {}, python=merged["python"], skip=bool(merged["skip_workloads"]),
            source=source, key=_beside(merged["identity"], base_dir)))
    return _unique(targets, source)


def _beside(identity: str | None, base_dir: Path) -> Path | None:
    """A guests file's identity: ``~`` expanded, a relative path from the file's directory (vgpu's own format)."""
    if not identity:
        return None
    key = Path(identity).expanduser()
    return key if key.is_absolute() else base_dir / key


def _target(*, name: str, host: str, port: int | None, user: str | None, key: Path | None,
            profile: str | None, expect: ExpectSpec | None, env: dict[str, str], python: str | None,
            skip: bool, source: str) -> Target:
    host = guest_host(host, source)
    if not _NAME.match(name) and ipv6_literal(name) is None:
        raise InputError(f"{source}: guest name {name!r} is not a plain host or guest name")
    if key is not None:
        try:
            inputs.regular_file(key, "identity file")
        except inputs.InputFileError as exc:
            raise InputError(f"{source}: guest {name}: identity file {key} {exc.problem}",
                             hint="give the path of an SSH private key, or omit it to use ssh-agent") from None
    if profile and expect:
        raise InputError(f"{source}: guest {name}: give either a profile or an expect block, not both")
    return Target(name=name, endpoint=Endpoint(host=host, port=port or 22, user=user, identity=key),
                  profile=profile, expect=expect, env=tuple(sorted(env.items())),
                  python=python or "python3", skip_workloads=skip)


def guest_host(host: str, source: str) -> str:
    """``host`` as vgpu connects to it: a DNS name, an IPv4 address, or an IPv6 literal (``::1``,
    ``fe80::1%eth0``, ``[2001:db8::5]``, brackets dropped). Anything else is refused, above all a
    leading ``-`` (an option to ssh-like tools)."""
    bare = ipv6_literal(host)
    if bare is not None:
        return bare
    if not _NAME.match(host):
        raise InputError(f"{source}: host {host!r} is not a host name or address")
    return host


def ipv6_literal(text: str) -> str | None:
    """``text`` without brackets if it is an IPv6 address (optionally with a %zone), else None."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    addr, sep, zone = bare.partition("%")
    if sep and not _ZONE.match(zone):
        return None
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        return None
    return bare


def _unique(targets: list[Target], source: str) -> list[Target]:
    seen: set[str] = set()
    for t in targets:
        if t.name in seen:
            raise InputError(f"{source}: guest name {t.name!r} appears twice; names must be unique")
        seen.add(t.name)
    return targets


# ---------------------------------------------------------------- Ansible inventory


def targets_from_inventory(path: Path, *, limit: str | None = None) -> list[Target]:
    """Targets from an Ansible inventory as Ansible parses it (vgpu.automation.inventory, the one
    inventory reader); ``limit``: an Ansible host pattern (``gpu_guests``, ``vm01,vm02``)."""
    return read_inventory_targets(path, limit=limit)[0]


def read_inventory_targets(path: Path, *, limit: str | None = None) -> tuple[list[Target], Path | None]:
    """The targets, and the known_hosts file the selected hosts name in ``validate_known_hosts`` (the validate
    role's variable; None when none does), its path read as Ansible reads it (controller_path)."""
    from vgpu.automation.inventory import read_inventory

    inv = read_inventory(path, limit=limit, host_level=True)
    targets = _unique([_from_hostvars(n, hv, inv.host_level.get(n, set()), inv.source)
                       for n, hv in inv.hostvars.items()], inv.source)
    return targets, _known_hosts(inv.hostvars, inv.source)


def _known_hosts(hostvars: dict[str, dict[str, Any]], source: str) -> Path | None:
    from vgpu.automation.inventory import controller_path

    named = {}
    for host, hv in hostvars.items():
        value = hv.get("validate_known_hosts")
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip() or "{{" in value:
            raise InputError(f"inventory {source}: host {host}: validate_known_hosts must be a literal path, "
                             f"not {value!r}"[:300])
        named.setdefault(value, host)
    if len(named) > 1:
        shown = ", ".join(f"{v} ({h})" for v, h in list(named.items())[:3])
        raise InputError(f"inventory {source}: the guests name different validate_known_hosts files: {shown}; "
                         "vgpu validate checks host keys against one", hint="give --known-hosts FILE, or --limit "
                         "the guests that share one")
    return controller_path(next(iter(named))) if named else None


def _from_hostvars(name: str, hv: dict[str, Any], own: set[str], source: str) -> Target:
    """A target from one host's variables as Ansible resolved them; ``own``: the ones the host sets itself."""

    def get(*aliases: str) -> Any:
        """The first of the aliases that is set, a host's own setting before a group's
        (ansible_user before ansible_ssh_user, as Ansible's connection plugins read them)."""
        found = [k for k in aliases if hv.get(k) is not None]
        found.sort(key=lambda k: k not in own)
        if not found:
            return None
        k = found[0]
        if isinstance(hv[k], str) and "{{" in hv[k]:
            raise InputError(f"inventory {source}: host {name}: {k} is templated ({hv[k]!r}); "
                             "vgpu does not evaluate Jinja: give a literal value")
        return hv[k]

    port = get("ansible_port", "ansible_ssh_port")
    if isinstance(port, str) and port.strip().isdigit():  # YAML `ansible_port: "2222"`, as ansible takes it
        port = int(port.strip())
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise InputError(f"inventory {source}: host {name}: ansible_port {port!r} is not a number")
    if port is not None and not 1 <= port <= 65535:
        raise InputError(f"inventory {source}: host {name}: ansible_port {port} is out of range")
    model, profile = get("vgpu_model"), get("vgpu_profile")
    if model and profile:  # the host's own setting beats a group's; both its own, or both from groups: ambiguous
        if ("vgpu_model" in own) == ("vgpu_profile" in own):
            raise InputError(f"inventory {source}: host {name}: set vgpu_profile or vgpu_model, not both")
        model, profile = (model, None) if "vgpu_model" in own else (None, profile)
    expect = None
    if model:
        vf = get("vgpu_is_vf")
        expect = ExpectSpec(str(model), get("vgpu_compute_partition"), get("vgpu_memory_partition"),
                            True if vf is None else _boolean(vf))
    env = hv.get("vgpu_guest_env") or {}  # the agent's extra environment, as `env:` in a guests file
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", k) and isinstance(v, str)
            and "{{" not in v for k, v in env.items()):
        raise InputError(f"inventory {source}: host {name}: vgpu_guest_env must map environment variable names "
                         "to literal strings")
    return _target(name=name, host=str(get("ansible_host", "ansible_ssh_host") or name), port=port,
                   user=get("ansible_user", "ansible_ssh_user"),
                   key=_key(get("ansible_ssh_private_key_file", "ansible_private_key_file"), name, source),
                   profile=profile or get("vgpu_guest_profile"), expect=expect, env=env,
                   python=get("ansible_python_interpreter"), skip=_boolean(get("vgpu_skip_workloads") or False),
                   source=f"inventory {source}")


def _key(value: Any, name: str, source: str) -> Path | None:
    """A host's ansible_ssh_private_key_file as Ansible's ssh connection takes it: "" is none, a relative path is
    from the current directory (controller_path)."""
    from vgpu.automation.inventory import controller_path

    if value is not None and not isinstance(value, str):
        raise InputError(f"inventory {source}: host {name}: ansible_ssh_private_key_file must be a path, "
                         f"not {value!r}"[:300])
    return controller_path(value) if value else None


def _boolean(v: Any) -> bool:
    """A boolean as Ansible's `bool` filter takes it (INI values arrive as strings)."""
    if isinstance(v, bool):
        return v
    return str(v).strip().lower() in ("true", "yes", "on", "1", "y", "t")
