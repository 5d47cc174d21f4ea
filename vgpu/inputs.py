"""The one way vgpu reads a file that comes from outside, and writes an output path it was given.

Everything an operator or a third party hands vgpu (profiles, machine specs, guests files, Ansible
inventories, validation reports, snapshot members and manifests, captured sysfs attributes,
journals, simulator state) is read through :func:`read_input`, which

- opens without blocking (a FIFO never hangs the run) and refuses anything that is not a regular
  file (FIFOs, devices such as /dev/zero, sockets, directories), naming the file;
- reads at most the cap for that kind of file (:data:`LIMITS`, documented in docs/security.md) and
  refuses a larger file instead of filling memory;
- turns every OSError (missing, permission, I/O) into one line naming the path.

:func:`load_json` and :func:`load_yaml` add decoding (UTF-8 only), bounded nesting, and for YAML no
aliases (billion-laughs bombs) and no duplicate keys. :func:`output_target` is the check every
``-o PATH`` goes through before anything is written: ``-`` is stdout, an existing target must be a
regular file (never a device, FIFO, directory or symlink), its directory must exist.

All failures are :class:`InputFileError` (an :class:`~vgpu.errors.InputError`, exit code 5), one
line; it keeps the kind, the path and the problem apart for callers with their own message format.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
from pathlib import Path
from typing import Any

from vgpu.errors import InputError

KiB = 1024
MiB = 1024 * KiB

# What each kind of outside file may weigh at most (bytes). Each cap is far above any real file of
# that kind (the real sizes are in docs/security.md) and far below what hurts a 2-core host.
LIMITS: dict[str, int] = {
    "profile": 256 * KiB,
    "machine spec": 1 * MiB,
    "guests file": 4 * MiB,
    "inventory": 4 * MiB,
    "report": 64 * MiB,
    "sysfs attribute": 64 * KiB,
    "proc file": 4 * MiB,  # /proc/cmdline, /proc/cpuinfo (about 1.5 KiB per CPU thread)
    "journal": 4 * MiB,
    "manifest": 4 * MiB,
    "simulator state": 16 * MiB,
    "config file": 1 * MiB,
    "snapshot": 64 * MiB,
    "known_hosts": 16 * MiB,
    "agent output": 8 * MiB,  # what one guest's agent may print (stdout of one run)
    "replay file": 16 * MiB,
    "roll-out state": 16 * MiB,  # vgpu rollout's state.json: about 300 bytes per host  # validate --simulate --replay-dir: a simulated guest's description
}
MAX_JSON_DEPTH = 64  # vgpu's own JSON documents nest at most 6 levels
MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 200_000


class InputFileError(InputError):
    """An outside file that cannot be used. ``problem`` is the message without "KIND PATH";
    ``errno`` is set when the file could not be opened or read (missing, permission, I/O), and None
    when it was refused for what it is (not a regular file, too large, bad content)."""

    def __init__(self, kind: str, path: Path | str, problem: str, *, sep: str = " ",
                 errno: int | None = None):
        super().__init__(f"{kind} {path}{sep}{problem}")
        self.kind, self.path, self.problem, self.errno = kind, str(path), problem, errno


def read_input(path: Path | str, kind: str, *, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` (default: the cap for ``kind``).

    Raises InputError naming ``kind``, the path and the problem: missing, a directory, not a regular
    file (FIFO, device, socket), unreadable, or larger than the cap.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise _os_error(exc, kind, Path(path)) from None
    try:
        return _read_regular(fd, path, kind, LIMITS[kind] if limit is None else limit)
    except OSError as exc:
        raise _os_error(exc, kind, Path(path)) from None
    finally:
        os.close(fd)


def read_optional(path: Path | str, kind: str, *, limit: int | None = None) -> bytes | None:
    """:func:`read_input`, but None when the file cannot be opened or read (absent, permission,
    I/O error: a sysfs attribute a driver does not provide). A file that is not a regular file or
    is over the cap still raises: a capture cannot make vgpu block or fill memory. (Discovery
    reads thousands of attributes, many absent: this path raises nothing for those.)"""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _os_error(exc, kind, Path(path)) from None
        return None
    try:
        return _read_regular(fd, path, kind, LIMITS[kind] if limit is None else limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def regular_file(path: Path | str, kind: str) -> Path:
    """``path`` if it names a regular file (links followed), for files another program opens (an
    SSH key paramiko reads): else one InputFileError saying what it is (missing, a directory, ...)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _os_error(exc, kind, Path(path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(kind, path, f"is {describe_mode(st.st_mode)}, not a regular file")
    return Path(path)


# O_NONBLOCK: opening a FIFO must not wait for a writer. It does not affect regular files, the only
# kind read after the fstat check.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _read_regular(fd: int, path: Path | str, kind: str, cap: int) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(kind, path, f"is {describe_mode(st.st_mode)}, not a regular file")
    if st.st_size > cap:
        raise _too_large(kind, Path(path), cap)
    # st_size is exact for ordinary files, 4096 for sysfs attributes and 0 for procfs files
    step = min(cap + 1, max(st.st_size, 4095) + 1, 1 * MiB)
    chunks, total = [], 0
    while True:
        chunk = os.read(fd, min(step, cap + 1 - total))
        if not chunk:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:  # grew while we read, or st_size lied
            raise _too_large(kind, Path(path), cap)


def read_text(path: Path | str, kind: str, *, limit: int | None = None) -> str:
    """:func:`read_input` decoded as UTF-8; binary content (NUL bytes, bad UTF-8) is one line."""
    return decode_text(read_input(path, kind, limit=limit), kind, path)


def decode_text(raw: bytes, kind: str, path: Path | str, *, limit: int | None = None) -> str:
    """``raw`` as UTF-8 text; ``limit``: refuse more bytes than that (text already in memory)."""
    if limit is not None and len(raw) > limit:
        raise _too_large(kind, Path(path), limit)
    if b"\x00" in raw:
        raise InputFileError(kind, path, "holds binary data (NUL bytes), not text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(kind, path, f"is not UTF-8 text (bad byte 0x{raw[exc.start]:02x} at offset "
                             f"{exc.start})") from None


def load_json(path: Path | str, kind: str, *, limit: int | None = None) -> Any:
    """The JSON document in ``path``, read through :func:`read_input`, nesting bounded."""
    return parse_json(read_text(path, kind, limit=limit), kind, path)


def _no_constant(name: str) -> Any:
    raise ValueError(f"holds {name}, which JSON does not have")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"holds the key {twice[:60]!r} twice in one object")
    return obj


def parse_json(text: str, kind: str, path: Path | str) -> Any:
    try:
        # NaN, Infinity: Python's extension, not JSON; a key twice in one object: JSON leaves it undefined
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise _too_deep(kind, path, MAX_JSON_DEPTH) from None
    except json.JSONDecodeError as exc:
        raise InputFileError(kind, path, f"is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                             f"{exc.msg})") from None
    except ValueError as exc:  # NaN/Infinity, a duplicate key, or an integer longer than Python converts
        problem = str(exc) if str(exc).startswith("holds ") else "holds a number too long to read"
        raise InputFileError(kind, path, f"is not valid JSON: it {problem}") from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise _too_deep(kind, path, MAX_JSON_DEPTH)
    return data


def load_yaml(path: Path | str, kind: str, *, limit: int | None = None, max_depth: int = MAX_YAML_DEPTH,
              aliases: bool = False) -> Any:
    """The YAML document in ``path``: no duplicate keys, bounded nesting and size; aliases refused, or
    with ``aliases`` allowed as long as the document they expand to stays within MAX_YAML_NODES."""
    return parse_yaml(read_text(path, kind, limit=limit), kind, path, max_depth=max_depth, aliases=aliases)


def parse_yaml(text: str, kind: str, path: Path | str, *, max_depth: int = MAX_YAML_DEPTH,
               aliases: bool = False) -> Any:
    """``text`` as YAML under the same rules as :func:`load_yaml` (for text read elsewhere)."""
    import yaml  # here, not at the top: discovery reads sysfs through this module on hosts without PyYAML

    try:
        check_yaml_events(text, kind, path, max_depth=max_depth, aliases=aliases)
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem) and max_depth < 1000:  # libyaml's own limit (1000) looks ahead
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else "?"
            raise InputFileError(kind, path, f"line {line}: nested deeper than {max_depth} levels", sep=": ") from None
        raise InputFileError(kind, path, yaml_problem(exc), sep=": ") from None
    except yaml.YAMLError as exc:
        raise InputFileError(kind, path, f"is not valid YAML ({' '.join(str(exc).split())[:200]})") from None
    except ValueError as exc:  # a scalar YAML accepts that Python cannot build: 5000 digits, 2026-13-45
        problem = "a number too long to read" if "digits" in str(exc) else f"an impossible value ({exc})"
        raise InputFileError(kind, path, f"is not valid YAML: it holds {problem}") from None


def _safe_loader() -> type:
    """PyYAML's safe loader on libyaml (C) when PyYAML was built with it (the wheels are): the same events,
    documents and marks, parsed several times faster than in pure Python."""
    import yaml
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _strict_loader() -> type:
    """A SafeLoader that refuses duplicate keys, which PyYAML would otherwise silently collapse."""
    import yaml

    class StrictLoader(_safe_loader()):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            if not isinstance(node, yaml.MappingNode):  # !!set or !!map on a list: PyYAML's own error
                return super().construct_mapping(node, deep=deep)
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                            key_node.start_mark) from None
                if duplicate:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

        def construct_checked_scalar(self, node: yaml.Node) -> Any:
            """A bool, timestamp, int or float, explicitly tagged (!!bool maybe, !!int '') or not: on text that
            is not one, PyYAML's constructors fail with KeyError, AttributeError or IndexError."""
            value = self.construct_scalar(node)
            kind = node.tag.rpartition(":")[2]
            try:
                return getattr(self, f"construct_yaml_{kind}")(node)
            except (KeyError, AttributeError, IndexError):
                what = {"bool": "a boolean", "timestamp": "a timestamp", "int": "an integer"}.get(kind, "a number")
                raise yaml.constructor.ConstructorError(None, None, f"{value[:60]!r} is not {what}",
                                                        node.start_mark) from None

    for kind in ("bool", "timestamp", "int", "float"):
        StrictLoader.add_constructor(f"tag:yaml.org,2002:{kind}", StrictLoader.construct_checked_scalar)
    return StrictLoader


def check_yaml_events(text: str, kind: str, path: Path | str, *, max_depth: int = MAX_YAML_DEPTH,
                      max_nodes: int = MAX_YAML_NODES, aliases: bool = False) -> None:
    """Refuse deep nesting and huge node counts before any object is built (the event parser itself
    is not recursive, so this is safe on hostile text). Aliases are refused, or (``aliases``, for files
    people write by hand with shared parts, such as guests files) counted as the nodes they stand for,
    so a "billion laughs" document is refused at MAX_YAML_NODES however few bytes it has."""
    import yaml

    depth = nodes = 0
    sizes: dict[str, int] = {}  # anchor -> nodes it stands for
    open_anchors: list[tuple[str | None, int]] = []  # per open collection: its anchor, nodes before it
    unfinished: set[str] = set()  # anchors whose latest definition is a collection still open
    for event in yaml.parse(text, Loader=_safe_loader()):
        line = event.start_mark.line + 1 if event.start_mark else "?"
        if isinstance(event, yaml.AliasEvent):
            if not aliases:
                raise InputFileError(kind, path, f"line {line}: YAML aliases (*{event.anchor}) are not allowed; "
                                     "write the value out", sep=": ")
            if event.anchor in unfinished:  # the value would contain itself: endless for whoever walks it
                raise InputFileError(kind, path, f"line {line}: the alias *{event.anchor} is inside the value "
                                     f"&{event.anchor} names (a loop)", sep=": ")
            nodes += sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise InputFileError(kind, path, f"line {line}: nested deeper than {max_depth} levels", sep=": ")
            open_anchors.append((event.anchor, nodes))
            if event.anchor is not None:
                unfinished.add(event.anchor)
            nodes += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            anchor, before = open_anchors.pop()
            if anchor is not None:
                sizes[anchor] = nodes - before
                unfinished.discard(anchor)
        else:
            if isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
                sizes[event.anchor] = 1
                unfinished.discard(event.anchor)
            nodes += 1
        if nodes > max_nodes:
            what = "YAML nodes once its aliases are expanded" if sizes else "YAML nodes"
            raise InputFileError(kind, path, f"more than {max_nodes} {what}", sep=": ")


def yaml_problem(exc: Any) -> str:  # a yaml.MarkedYAMLError
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    words = [exc.context, exc.problem] if exc.context and exc.problem else [exc.problem or exc.context or "malformed"]
    problem = " ".join(" ".join(str(w) for w in words).split())
    return f"{where}not valid YAML ({problem})"


def validation_problem(exc: Any, *, limit: int | None = None) -> str:
    """The first problem of a pydantic ValidationError as "where: what" (``where`` the dotted path of the
    field, "top level" for the document), each part cut at ``limit`` characters when given."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "top level"
    return f"{where[:limit]}: {err['msg'][:limit]}"


def output_target(path: Path | str, what: str) -> Path | None:
    """Check an ``-o PATH`` before anything is written: None for ``-`` (stdout), else the path.

    Refuses (InputError, nothing written): an empty path; an existing target that is not a regular
    file (device, FIFO, socket, directory) or is a symlink (the rename would replace the link, not
    what it points at, and as root it could replace /dev/null); a directory that does not exist or
    is not a directory.
    """
    text = str(path)
    if text == "-":
        return None
    if not text.strip():
        raise InputError(f"{what}: an empty output path; give a file name or - for standard output")
    target = Path(text)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _os_error(exc, what, target) from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{what} {target} is a symbolic link; vgpu replaces only regular files "
                             "(give the link's target, or another name)")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {target} is {describe_mode(st.st_mode)}, not a regular file; "
                             "vgpu will not replace it (use - for standard output)")
    parent = target.parent
    if not parent.is_dir():
        raise InputError(f"{what} {target}: directory {parent} does not exist" if not parent.exists()
                         else f"{what} {target}: {parent} is not a directory")
    return target


def write_error(exc: OSError, what: str, path: Path | str) -> InputError:
    """One line for an OSError while writing ``path`` (full disk, permission, read-only fs)."""
    return _os_error(exc, what, Path(path), writing=True)


def describe_mode(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _os_error(exc: OSError, kind: str, path: Path, *, writing: bool = False) -> InputError:
    verb = "cannot write" if writing else "cannot read"
    reasons = {
        errno.ENOENT: "does not exist",
        errno.EISDIR: "is a directory, not a regular file",
        errno.ENOTDIR: "has a path component that is not a directory",
        errno.EACCES: f"{verb} it: permission denied",
        errno.EPERM: f"{verb} it: operation not permitted",
        errno.ENOSPC: f"{verb} it: no space left on the device",
        errno.EDQUOT: f"{verb} it: disk quota exceeded",
        errno.EROFS: f"{verb} it: read-only file system",
        errno.ELOOP: "is a symbolic link loop",
        errno.ENAMETOOLONG: "has a name that is too long",
        errno.ENXIO: "is a device or socket with nothing behind it, not a regular file",
    }
    reason = reasons.get(exc.errno or 0) or f"{verb} it: {exc.strerror or exc}"
    # ENXIO (a socket or a device with nothing behind it) is refused for what the file is
    return InputFileError(kind, path, reason, errno=None if exc.errno == errno.ENXIO else exc.errno or -1)


def _too_large(kind: str, path: Path, cap: int) -> InputError:
    return InputFileError(kind, path, f"is larger than the limit of {_size(cap)} for a {kind}")


def _too_deep(kind: str, path: Path | str, limit: int) -> InputError:
    return InputFileError(kind, path, f"nests deeper than {limit} levels")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n // KiB} KiB"


def _depth(data: Any) -> int:
    """Nesting depth of a parsed JSON value, iteratively (no recursion on hostile input)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            items = value.values()
        elif isinstance(value, list):
            items = value
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((v, level + 1) for v in items)
    return deepest
