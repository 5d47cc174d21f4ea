"""Which guests to validate: a vgpu guests file (YAML, ``version: v1``) or an Ansible inventory.

Pure parsing (the caller reads the file through vgpu.inputs): every malformed input ends in one
``InputError`` that names the file and the field. YAML goes through the strict loader of
vgpu.inputs (no aliases, no duplicate keys, bounded nesting); host ranges are counted before they
are expanded, and one inventory names at most MAX_INVENTORY_HOSTS hosts and MAX_INVENTORY_GROUPS
groups (docs/security.md). Ansible inventories are parsed here rather than through ansible,
so validation needs no ansible install; only the variables listed in docs/validate.md are read
(ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file,
ansible_python_interpreter, vgpu_*); templated (``{{ }}``) values are refused, not guessed.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
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
MAX_INVENTORY_HOSTS = 4096  # host names one inventory may produce, ranges expanded
MAX_INVENTORY_GROUPS = 1024


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
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "top level"
        raise InputError(f"guests file {source}: {where}: {err['msg']}",
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
            identity=merged["identity"], profile=merged["profile"],
            expect=ExpectSpec(exp.model, exp.compute, exp.memory, exp.vf) if exp else None,
            env=merged["env"] or {}, python=merged["python"], skip=bool(merged["skip_workloads"]),
            source=source, base_dir=base_dir))
    return _unique(targets, source)


def _target(*, name: str, host: str, port: int | None, user: str | None, identity: str | None,
            profile: str | None, expect: ExpectSpec | None, env: dict[str, str], python: str | None,
            skip: bool, source: str, base_dir: Path) -> Target:
    host = guest_host(host, source)
    if not _NAME.match(name) and ipv6_literal(name) is None:
        raise InputError(f"{source}: guest name {name!r} is not a plain host or guest name")
    key = None
    if identity:
        key = Path(identity).expanduser()
        key = key if key.is_absolute() else base_dir / key
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


_RANK = "__vgpu_rank__"


@dataclass
class _Group:
    hosts: dict[str, dict[str, Any]]
    vars: dict[str, Any]
    children: list[str]


def parse_ansible_inventory(text: str, *, source: str, base_dir: Path,
                            limit: str | None = None) -> list[Target]:
    """Targets from an Ansible inventory in INI or YAML form; ``limit``: comma-separated groups/hosts."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip()[0] not in "#;"), "")
    looks_yaml = first.startswith("---") or re.fullmatch(r"[\w.-]+:\s*(#.*)?", first)
    hosts = _HostBudget(source)
    groups = _yaml_groups(text, source, hosts) if looks_yaml else _ini_groups(text, source, hosts)
    if len(groups) > MAX_INVENTORY_GROUPS + 2:  # + all and ungrouped
        raise InputError(f"inventory {source} has {len(groups) - 2} groups; the limit is {MAX_INVENTORY_GROUPS} "
                         "groups per inventory")
    hostvars = _resolve(groups)
    names = _select(groups, hostvars, limit, source)
    if not names:
        raise InputError(f"inventory {source}: no hosts" + (f" match --limit {limit}" if limit else ""))
    return _unique([_from_hostvars(n, hostvars[n], source, base_dir) for n in names], source)


def _ini_groups(text: str, source: str, hosts: "_HostBudget") -> dict[str, _Group]:
    groups: dict[str, _Group] = {"all": _Group({}, {}, []), "ungrouped": _Group({}, {}, [])}
    section, kind = "ungrouped", "hosts"
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = re.fullmatch(r"\[([^\]:\s]+)(?::(vars|children))?\]", line)
        if m:
            section, kind = m.group(1), m.group(2) or "hosts"
            groups.setdefault(section, _Group({}, {}, []))
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InputError(f"inventory {source} line {lineno}: {exc}") from None
        if not words:
            continue
        group = groups[section]
        if kind == "children":
            group.children.append(words[0])
            groups.setdefault(words[0], _Group({}, {}, []))
        elif kind == "vars":
            key, sep, value = line.partition("=")
            if not sep:
                raise InputError(f"inventory {source} line {lineno}: expected key=value in [{section}:vars]")
            group.vars[key.strip()] = _ini_value(value.strip().strip("'\""))
        else:
            hvars = {}
            for word in words[1:]:
                key, sep, value = word.partition("=")
                if not sep:
                    raise InputError(f"inventory {source} line {lineno}: expected key=value, got {word!r}")
                hvars[key] = _ini_value(value)
            m = re.fullmatch(r"([^:\[\]]+):(\d+)", words[0])  # INI "host:port" form
            if m:
                words[0] = m.group(1)
                hvars.setdefault("ansible_port", int(m.group(2)))
            for host in hosts.expand(words[0], lineno):
                group.hosts.setdefault(host, {}).update(hvars)
    return groups


def _ini_value(v: str) -> Any:
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return {"true": True, "false": False, "yes": True, "no": False}.get(v.lower(), v)


_RANGE = re.compile(r"\[([0-9a-z]+):([0-9a-z]+)(?::(\d+))?\]")


class _HostBudget:
    """Expands Ansible host ranges (``vm[01:03]``, ``vm[a:c]``, ``vm[0:10:2]``) within one
    inventory's cap: each pattern is counted (its ranges multiply) before anything is expanded."""

    def __init__(self, source: str):
        self.source = source
        self.used = 0

    def expand(self, pattern: str, lineno: int) -> list[str]:
        count = 1
        for m in _RANGE.finditer(pattern):
            count *= len(self._items(m, lineno))
            if self.used + count > MAX_INVENTORY_HOSTS:
                where = f" line {lineno}" if lineno else ""
                shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
                raise InputError(f"inventory {self.source}{where}: host pattern {shown!r} names more hosts "
                                 f"than the limit of {MAX_INVENTORY_HOSTS} hosts per inventory")
        return self._expand(pattern, lineno)

    def _expand(self, pattern: str, lineno: int) -> list[str]:
        m = _RANGE.search(pattern)
        if not m:
            self.used += 1
            if self.used > MAX_INVENTORY_HOSTS:  # a range that only formed after another expanded
                raise InputError(f"inventory {self.source}: more than {MAX_INVENTORY_HOSTS} hosts; "
                                 "that is the limit per inventory")
            return [pattern]
        out = []
        for item in self._items(m, lineno):
            out += self._expand(pattern[:m.start()] + item + pattern[m.end():], lineno)
        return out

    def _items(self, m: re.Match, lineno: int) -> range | list[str]:
        """The range's items, lazily for numbers (len() is arithmetic, nothing is built)."""
        lo, hi, step = m.group(1), m.group(2), int(m.group(3) or 1)
        where = f" line {lineno}" if lineno else ""
        items: Any = None
        if step > 0 and lo.isdigit() and hi.isdigit() and len(lo) <= 18 and len(hi) <= 18:
            width = len(lo) if lo.startswith("0") else 0
            items = _Numbered(range(int(lo), int(hi) + 1, step), width)
        elif step > 0 and len(lo) == len(hi) == 1 and lo.isalpha() and hi.isalpha():
            items = [chr(c) for c in range(ord(lo), ord(hi) + 1, step)]
        if items is None:
            raise InputError(f"inventory {self.source}{where}: bad host range {m.group(0)[:60]!r}")
        if not len(items):
            raise InputError(f"inventory {self.source}{where}: empty host range {m.group(0)!r}")
        return items


class _Numbered:
    def __init__(self, numbers: range, width: int):
        self.numbers, self.width = numbers, width

    def __len__(self) -> int:
        return len(self.numbers)

    def __iter__(self):  # noqa: ANN204
        return (str(i).zfill(self.width) for i in self.numbers)


def _yaml_groups(text: str, source: str, hosts: _HostBudget) -> dict[str, _Group]:
    data = inputs.parse_yaml(text, "inventory", source, aliases=True)  # Ansible allows anchors
    if not isinstance(data, dict):
        raise InputError(f"inventory {source}: expected a mapping of groups at the top level")
    groups: dict[str, _Group] = {"all": _Group({}, {}, []), "ungrouped": _Group({}, {}, [])}

    def visit(name: str, body: Any, path: str) -> None:
        body = body or {}
        if not isinstance(body, dict) or set(body) - {"hosts", "vars", "children"}:
            raise InputError(f"inventory {source}: {path}: a group holds only hosts, vars and children")
        group = groups.setdefault(name, _Group({}, {}, []))
        for host, hv in (body.get("hosts") or {}).items():
            if hv is not None and not isinstance(hv, dict):
                raise InputError(f"inventory {source}: {path}.hosts.{host}: host variables must be a mapping")
            for h in hosts.expand(str(host), 0):
                group.hosts.setdefault(h, {}).update(hv or {})
        group.vars.update(body.get("vars") or {})
        for child, cbody in (body.get("children") or {}).items():
            group.children.append(str(child))
            visit(str(child), cbody, f"{path}.children.{child}")

    for name, body in data.items():
        visit(str(name), body, str(name))
    return groups


def _resolve(groups: dict[str, _Group]) -> dict[str, dict[str, Any]]:
    """Each host's variables: group vars from shallow to deep (all first), then host vars."""
    depth: dict[str, int] = {"all": 0}
    parents: dict[str, set[str]] = {}
    for name, g in groups.items():
        for child in g.children:
            parents.setdefault(child, set()).add(name)
    for _ in range(len(groups)):  # longest path from all; bounded, so cycles cannot loop forever
        changed = False
        for name in groups:
            d = max((depth.get(p, 0) + 1 for p in parents.get(name, ())), default=1 if name != "all" else 0)
            changed |= depth.get(name) != d
            depth[name] = d
        if not changed:
            break
    membership: dict[str, set[str]] = {}
    for name, g in groups.items():
        for host in g.hosts:
            membership.setdefault(host, set()).update(_ancestors(name, parents))
    hostvars = {}
    for host, names in membership.items():
        merged: dict[str, Any] = {}
        rank: dict[str, int] = {}  # how specific each value is: aliases and profile-vs-model pick the higher
        for gname in sorted(names | {"all"}, key=lambda n: (depth[n], n)):
            merged.update(groups[gname].vars)
            rank.update(dict.fromkeys(groups[gname].vars, depth[gname]))
        for gname in sorted(names, key=lambda n: (depth[n], n)):
            merged.update(groups[gname].hosts.get(host, {}))
            rank.update(dict.fromkeys(groups[gname].hosts.get(host, {}), 10_000 + depth[gname]))
        merged["group_names"] = sorted(names - {"all", "ungrouped"})
        merged[_RANK] = rank
        hostvars[host] = merged
    return hostvars


def _ancestors(name: str, parents: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += parents.get(n, ())
    return seen


def _select(groups: dict[str, _Group], hostvars: dict[str, dict[str, Any]], limit: str | None,
            source: str) -> list[str]:
    if not limit:
        return sorted(hostvars)
    chosen: set[str] = set()
    for word in (w.strip() for w in limit.split(",") if w.strip()):
        if word in hostvars:
            chosen.add(word)
        elif word in groups:
            chosen |= {h for h, hv in hostvars.items() if word == "all" or word in hv["group_names"]}
        else:
            raise InputError(f"inventory {source}: --limit names {word!r}, which is neither a group "
                             "nor a host")
    return sorted(chosen)


def _from_hostvars(name: str, hv: dict[str, Any], source: str, base_dir: Path) -> Target:
    rank = hv[_RANK]

    def get(*aliases: str) -> Any:
        """The most specific of the aliases that is set (ansible_user vs ansible_ssh_user)."""
        found = sorted((rank.get(k, 0), -i, k) for i, k in enumerate(aliases) if hv.get(k) is not None)
        if not found:
            return None
        k = found[-1][2]
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
    if model and profile:  # the more specific level wins; at the same level it is ambiguous
        if rank["vgpu_model"] == rank["vgpu_profile"]:
            raise InputError(f"inventory {source}: host {name}: set vgpu_profile or vgpu_model, not both")
        model, profile = (model, None) if rank["vgpu_model"] > rank["vgpu_profile"] else (None, profile)
    expect = None
    if model:
        vf = get("vgpu_is_vf")
        expect = ExpectSpec(str(model), get("vgpu_compute_partition"), get("vgpu_memory_partition"),
                            True if vf is None else _ini_value(str(vf)) is True)
    return _target(name=name, host=str(get("ansible_host", "ansible_ssh_host") or name), port=port,
                   user=get("ansible_user", "ansible_ssh_user"),
                   identity=get("ansible_ssh_private_key_file", "ansible_private_key_file"),
                   profile=profile, expect=expect, env={},
                   python=get("ansible_python_interpreter"), skip=bool(get("vgpu_skip_workloads")),
                   source=f"inventory {source}", base_dir=base_dir)
