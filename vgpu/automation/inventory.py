"""Ansible inventories, read by Ansible itself: the one inventory reader of vgpu.

`vgpu validate --inventory` and `vgpu playbook run --inventory` both come here, and both see an
inventory exactly as ansible-playbook would: ``ansible-inventory --list`` parses it (INI or YAML,
groups, children, ranges, ``host:port``, IPv6, group_vars/ and host_vars/ beside the file,
Ansible's variable precedence and ``--limit`` patterns). vgpu adds only guards, because the file
comes from outside:

- the bytes are read once by vgpu.inputs (a FIFO, /dev/zero, a directory, a huge or binary file
  is refused before Ansible runs), and Ansible parses a private 0600 copy of exactly those bytes:
  an executable inventory is never executed;
- only the static ``yaml`` and ``ini`` inventory plugins are enabled (no script, no ``plugin:``
  inventories such as ``constructed`` or cloud plugins from an outside file), a file Ansible cannot
  parse is an error rather than a warning, and no ANSIBLE_* setting or ansible.cfg of the caller
  can change that (the environment is rebuilt and the working directory is private);
- YAML is first loaded by vgpu's hardened loader (aliases counted as what they expand to, depth
  bounded), and host ranges are counted before Ansible expands them (at most MAX_HOSTS per
  inventory), so ``vm[0:99999999]`` is refused in milliseconds instead of eating the machine;
- ansible-inventory runs with a timeout, an address-space limit and a cap on what it prints.

Paths in an inventory (a key, a known_hosts file, a simulator directory) mean what they mean to Ansible on the
controller: ``controller_path`` is that one rule, for every vgpu reader (docs/validate.md, "Paths in an
inventory").
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu import inputs
from vgpu.errors import InputError, VgpuError

MAX_HOSTS = 4096  # hosts one inventory may name, ranges expanded
MAX_GROUPS = 1024
TIMEOUT = 60.0  # seconds ansible-inventory may take
MEMORY = 2 << 30  # its address space
MAX_OUTPUT = 64 << 20  # what it may print
YAML_SUFFIXES = (".yml", ".yaml", ".json")  # what Ansible's yaml plugin reads; everything else is INI
_RANGE = re.compile(r"\[([0-9a-z]+):([0-9a-z]+)(?::(\d+))?\]")


def controller_path(value: str | os.PathLike) -> Path:
    """A path read from an inventory variable, as Ansible uses it on the controller: ``~`` expanded, and a relative
    path taken from the current directory, not from the inventory's. Ansible's ssh connection passes
    ``ansible_ssh_private_key_file`` to ssh as ``IdentityFile`` with only ``~`` expanded (ansible-core 2.19,
    plugins/connection/ssh.py), so ssh opens it from ansible-playbook's working directory. `vgpu playbook run`
    runs ansible-playbook where vgpu was started (vgpu.automation.playbooks), and the validate role takes its
    paths from there too (``realpath`` on the controller: a module on the local connection would run in the play's
    directory, plugins/action/__init__.py), so vgpu and the playbooks read one inventory alike."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    try:
        return Path.cwd() / path
    except OSError:  # the directory vgpu was started in was removed meanwhile
        raise InputError(f"relative path {str(path)!r} in the inventory: the current directory no longer exists",
                         hint="run vgpu from an existing directory, or give the path absolute") from None


@dataclass
class Inventory:
    """An inventory as Ansible resolved it: each host's variables (all levels merged by Ansible's
    precedence), the hosts of each group (children included), and which variables each host sets
    itself (not through a group)."""

    source: str
    hostvars: dict[str, dict[str, Any]]
    groups: dict[str, list[str]]
    host_level: dict[str, set[str]] = field(default_factory=dict)
    text: str = ""  # the checked bytes Ansible parsed: a playbook run stages exactly these (stage())
    path: Path | None = None

    @property
    def hosts(self) -> list[str]:
        return list(self.hostvars)


def read_inventory(path: Path | str, *, limit: str | None = None, host_level: bool = False) -> Inventory:
    """The inventory at ``path`` as Ansible sees it, restricted to ``limit`` (an Ansible pattern:
    ``gpu_guests``, ``vm01,vm02``, ``gpu:!broken``...). Raises InputError (exit 5) naming the file."""
    path = Path(path)
    source = str(path)
    text = inputs.read_text(path, "inventory")
    is_yaml = path.suffix.lower() in YAML_SUFFIXES
    precheck(text, source=source, is_yaml=is_yaml)
    data = _ansible_inventory(text, path, limit, export=False)
    inv = _from_list(data, source)
    inv.text, inv.path = text, path
    if not inv.hostvars:
        raise InputError(f"inventory {source}: no hosts" + (f" match --limit {limit}" if limit else ""),
                         hint="Ansible's patterns: a group, a host, comma-separated, :! to exclude")
    if host_level:
        exported = _ansible_inventory(text, path, limit, export=True)
        meta = exported.get("_meta", {}).get("hostvars", {}) if isinstance(exported, dict) else {}
        inv.host_level = {h: set(meta.get(h) or {}) for h in inv.hostvars}
    return inv


def precheck(text: str, *, source: str, is_yaml: bool) -> None:
    """vgpu's own guards before Ansible sees the file: hardened YAML loading, and host ranges
    counted (their sizes multiply) without expanding anything."""
    if is_yaml:
        data = inputs.parse_yaml(text, "inventory", source, aliases=True)  # Ansible allows anchors
        if not isinstance(data, dict):
            raise InputError(f"inventory {source}: expected a mapping of groups at the top level")
        patterns = list(_yaml_host_patterns(data))
    else:
        patterns = list(_ini_host_patterns(text))
    total = 0
    for lineno, pattern in patterns:
        total += _count(pattern, source, lineno)
        if total > MAX_HOSTS:
            where = f" line {lineno}" if lineno else ""
            shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
            raise InputError(f"inventory {source}{where}: host pattern {shown!r} names more hosts than the limit "
                             f"of {MAX_HOSTS} hosts per inventory")
    groups = sum(1 for _, p in patterns if p.startswith("[")) if not is_yaml else 0
    if groups > MAX_GROUPS:
        raise InputError(f"inventory {source} has {groups} groups; the limit is {MAX_GROUPS} groups per inventory")


def _ini_host_patterns(text: str):
    """(line, pattern) for every host line and every group header (a range there multiplies too)."""
    section_kind = "hosts"
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = re.fullmatch(r"\[(.+?)(?::(vars|children))?\]", line)
        if header:
            section_kind = header.group(2) or "hosts"
            yield lineno, "[" + header.group(1)  # a group's name (a range in it multiplies too)
            continue
        if section_kind == "hosts":
            yield lineno, line.split()[0]


def _yaml_host_patterns(data: dict, depth: int = 0):
    for body in data.values():
        if not isinstance(body, dict):
            continue
        hosts = body.get("hosts")
        if isinstance(hosts, dict):
            for name in hosts:
                yield 0, str(name)
        children = body.get("children")
        if isinstance(children, dict) and depth < 64:
            yield from _yaml_host_patterns(children, depth + 1)


def _count(pattern: str, source: str, lineno: int) -> int:
    """How many names ``pattern`` expands to (Ansible's ``[a:b]``, ``[a:b:step]``, ``[x:z]``)."""
    count = 1
    where = f" line {lineno}" if lineno else ""
    for m in _RANGE.finditer(pattern):
        lo, hi, step = m.group(1), m.group(2), int(m.group(3) or 1) if (m.group(3) or "1").isdigit() else 0
        if step > 0 and lo.isdigit() and hi.isdigit() and len(lo) <= 18 and len(hi) <= 18:
            n = len(range(int(lo), int(hi) + 1, step))
        elif step > 0 and len(lo) == len(hi) == 1 and lo.isalpha() and hi.isalpha():
            n = len(range(ord(lo), ord(hi) + 1, step))
        else:
            raise InputError(f"inventory {source}{where}: bad host range {m.group(0)[:60]!r}")
        if n == 0:
            raise InputError(f"inventory {source}{where}: empty host range {m.group(0)!r}")
        count *= n
        if count > MAX_HOSTS:
            return count
    return count


def ansible_tool(name: str) -> str:
    """An ansible-core command: the one beside this Python (vgpu's venv) first, then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise VgpuError(f"{name} is not installed: reading Ansible inventories and running playbooks needs "
                        "ansible-core", hint="pip install ansible-core (a dependency of vgpu)")
    return found


def clean_env(home: Path) -> dict[str, str]:
    """An environment for Ansible tools with none of the caller's ANSIBLE_* settings."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env.update(HOME=str(home), ANSIBLE_HOME=str(home / ".ansible"), ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
               ANSIBLE_CONFIG=str(home / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0")
    return env


def _limits() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _ansible_inventory(text: str, path: Path, limit: str | None, *, export: bool) -> Any:
    source = str(path)
    with tempfile.TemporaryDirectory(prefix="vgpu-inventory-") as tmp:
        home = Path(tmp)
        (home / "ansible.cfg").write_text("[defaults]\n")
        copy = stage(text, path, home)
        env = clean_env(home)
        plugin = "yaml" if copy.suffix in YAML_SUFFIXES else "ini"  # one plugin: its reason is the reason
        env.update(ANSIBLE_INVENTORY_ENABLED=plugin, ANSIBLE_INVENTORY_UNPARSED_FAILED="1",
                   ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="1", ANSIBLE_VARS_ENABLED="host_group_vars")
        argv = [ansible_tool("ansible-inventory"), "-i", str(copy), "--list"]
        if export:
            argv.append("--export")
        if limit:
            argv.append(f"--limit={limit}")
        out, err, rc = _run(argv, env, home, source)
    if rc != 0:
        raise InputError(f"inventory {source}: Ansible cannot parse it: {_ansible_error(err, copy.name)}")
    try:
        data = json.loads(out)
    except ValueError:
        raise InputError(f"inventory {source}: ansible-inventory printed no JSON") from None
    if not isinstance(data, dict):
        raise InputError(f"inventory {source}: ansible-inventory printed no inventory")
    return data


def stage(text: str, path: Path, dest: Path) -> Path:
    """Write the checked inventory text as a private 0600 file in ``dest`` (named so Ansible picks the
    same plugin as for ``path``), with ``path``'s group_vars/ and host_vars/ linked beside it."""
    copy = dest / ("inventory" + (path.suffix.lower() if path.suffix.lower() in YAML_SUFFIXES else ".ini"))
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    for d in ("group_vars", "host_vars"):  # Ansible reads these beside the inventory file
        beside = path.parent / d
        if beside.is_dir():
            (dest / d).symlink_to(beside.resolve())
    return copy


def _run(argv: list[str], env: dict[str, str], cwd: Path, source: str) -> tuple[str, str, int]:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, preexec_fn=_limits, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise InputError(f"inventory {source}: Ansible took longer than {TIMEOUT:.0f} s to read it") from None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if len(out) > MAX_OUTPUT:
        raise InputError(f"inventory {source}: Ansible's view of it is larger than {MAX_OUTPUT >> 20} MiB")
    if proc.returncode < 0:
        raise InputError(f"inventory {source}: ansible-inventory was killed by signal {-proc.returncode} "
                         "(it ran out of its memory limit?)")
    return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), proc.returncode


def _ansible_error(err: str, copy_name: str) -> str:
    """Ansible's reason in one line, without the private copy's path."""
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    plugin = re.compile(r"^\[WARNING\]: Failed to parse inventory with '\w+' plugin: (?:Failed to parse inventory: )?")
    picked = [plugin.sub("", ln) for ln in lines if plugin.match(ln)] or \
        [re.sub(r"^\[ERROR\]:\s*", "", ln) for ln in lines if ln.startswith("[ERROR]")] or lines[:1]
    reason = picked[0] if picked else "no reason given"
    reason = re.sub(r"\S*/" + re.escape(copy_name), "the file", reason).rstrip(":")
    return reason[:400]


def _from_list(data: dict, source: str) -> Inventory:
    meta = data.get("_meta", {}).get("hostvars", {}) if isinstance(data.get("_meta"), dict) else {}
    groups: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    for name, body in data.items():
        if name == "_meta" or not isinstance(body, dict):
            continue
        groups[name] = [str(h) for h in body.get("hosts") or []]
        children[name] = [str(c) for c in body.get("children") or []]
    if len(groups) > MAX_GROUPS + 2:  # + all and ungrouped
        raise InputError(f"inventory {source} has {len(groups) - 2} groups; the limit is {MAX_GROUPS} groups "
                         "per inventory")

    def members(name: str, seen: set[str]) -> list[str]:
        if name in seen:
            return []
        seen.add(name)
        out = list(groups.get(name, []))
        for child in children.get(name, []):
            out += members(child, seen)
        return out

    resolved = {name: list(dict.fromkeys(members(name, set()))) for name in groups}
    order = list(dict.fromkeys(h for name in groups for h in resolved[name]))
    hostvars = {h: dict(meta.get(h) or {}) for h in order}
    if len(hostvars) > MAX_HOSTS:
        raise InputError(f"inventory {source}: more than {MAX_HOSTS} hosts; that is the limit per inventory")
    return Inventory(source=source, hostvars=hostvars, groups=resolved)
