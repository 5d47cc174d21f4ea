"""Unpacking a tar archive that came from elsewhere (a host snapshot attached to a ticket), safely on
any Python: the member-by-member rules below do not depend on tarfile's extraction filters, whose
symlink handling was defeated by CVE-2025-4517 on interpreters before 3.11.13 / 3.12.11.

Two passes over the (decompressed, bounded) stream:

1. :func:`_scan` reads only the headers and builds the archive's tree in memory. Everything is decided
   there, before a byte is written: accepted are regular files and directories whose normalised names
   stay below the archive root, and symbolic links whose target, resolved against that tree (links
   through links included, component by component, never with realpath and its PATH_MAX cut-off),
   stays inside it. Refused: absolute names, ``..``, backslashes, hard links, devices, FIFOs, sparse
   members, set-id and sticky bits, a member below a link or a file, a name given twice, and an archive
   over the caps (members, bytes per member, bytes in all, decompressed stream).
2. :func:`_write` creates exactly what was scanned in an empty private directory: files with
   O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, directories 0700, every existing component checked with
   lstat, so even a race or a bug in the scan cannot write through a link.

Every refusal is one InputError (exit 5) that names the archive and the member.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import tarfile
import zlib
from pathlib import Path

from vgpu.errors import InputError

# What an archive may unpack to. A real snapshot of an 8-GPU host holds about 1 500 members and
# 0.3 MiB; vgpu captures every file at most 1 MiB long.
MAX_MEMBERS = 20_000
MAX_MEMBER_SIZE = 1 << 20
MAX_UNPACKED = 64 << 20  # bytes of file content in all
MAX_STREAM = MAX_UNPACKED + MAX_MEMBERS * 1024 + (1 << 20)  # the decompressed tar stream, headers included
MAX_NAME = 4096  # PATH_MAX
MAX_LINK_HOPS = 40  # the kernel's limit on nested symbolic links

DIR, FILE = "dir", "file"  # kinds in the scanned tree; a link's entry is its target text


def unpack(raw: bytes, source: Path, root: Path, *, what: str = "snapshot") -> None:
    """Unpack the archive ``raw`` (read from ``source``) into the empty directory ``root``."""
    bad = _Refusal(what, source)
    tree = _scan(raw, bad)
    _write(raw, bad, root, tree)


class _Refusal:
    """Builds the one-line InputError naming the archive."""

    def __init__(self, what: str, source: Path):
        self.what, self.source = what, source

    def __call__(self, problem: str) -> InputError:
        return InputError(f"{self.what} {self.source} {problem}; nothing was unpacked",
                          hint="take a new one with `vgpu host snapshot -o FILE` on the host")


def _members(raw: bytes, bad: _Refusal):
    """The archive's members, streamed from the decompressed, bounded stream; yields (tar, member)."""
    stream = _BoundedStream(_decompressor(raw, bad), bad)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                yield tar, member
    except InputError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError, ValueError) as exc:
        raise bad(f"is not a readable archive ({' '.join(str(exc).split())[:160] or type(exc).__name__})") from None


def _scan(raw: bytes, bad: _Refusal) -> dict[tuple[str, ...], str]:
    """Every check, on headers only: the archive's tree (parts -> DIR, FILE or a link's target)."""
    tree: dict[tuple[str, ...], str] = {(): DIR}
    count = total = 0
    for _, member in _members(raw, bad):
        count += 1
        if count > MAX_MEMBERS:
            raise bad(f"holds more than {MAX_MEMBERS} members")
        parts = _parts(member, bad)
        _check_parents(tree, parts, bad)
        if member.issym():
            _check_link_text(member, bad)
            kind = member.linkname
        elif member.isdir():
            kind = DIR
        else:
            if member.size > MAX_MEMBER_SIZE:
                raise bad(f"member {_show(member.name)} is {member.size} bytes, over the limit of "
                          f"{MAX_MEMBER_SIZE >> 20} MiB per member")
            total += member.size
            if total > MAX_UNPACKED:
                raise bad(f"unpacks to more than {MAX_UNPACKED >> 20} MiB")
            kind = FILE
        known = tree.get(parts)
        if known is not None and not (known == DIR and kind == DIR):
            raise bad(f"holds {_show(member.name)} twice")
        tree[parts] = kind
    for parts, kind in tree.items():
        if kind not in (DIR, FILE):
            _resolve_inside(tree, parts, bad)
    return tree


def _parts(member: tarfile.TarInfo, bad: _Refusal) -> tuple[str, ...]:
    """The member's name as components below the root, or the refusal of what it is."""
    name = member.name
    if member.issparse() or not (member.isfile() or member.isdir() or member.issym()):
        kind = ("a hard link" if member.islnk() else "a FIFO" if member.isfifo() else
                "a device" if member.isdev() else "a sparse or special member")
        raise bad(f"member {_show(name)} is {kind}; an archive may hold only files, directories and "
                  "links inside it")
    if member.mode & 0o7000:
        raise bad(f"member {_show(name)} has set-id or sticky bits (mode {member.mode:o})")
    if not name or len(name) > MAX_NAME or "\x00" in name or "\\" in name:
        raise bad(f"has a member with an unusable name {_show(name)}")
    if name.startswith("/"):
        raise bad(f"member {_show(name)} has an absolute name")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise bad(f"member {_show(name)} climbs out of the archive with '..'")
    if not parts and not member.isdir():
        raise bad(f"has a member with an unusable name {_show(name)}")
    return parts


def _check_parents(tree: dict[tuple[str, ...], str], parts: tuple[str, ...], bad: _Refusal) -> None:
    """Every parent of ``parts`` is a directory (recorded as one if new): never a link or a file."""
    for i in range(1, len(parts)):
        prefix = parts[:i]
        kind = tree.setdefault(prefix, DIR)
        if kind != DIR:
            raise bad(f"places {_show('/'.join(parts))} below {_show('/'.join(prefix))}, which is "
                      f"{'a file' if kind == FILE else 'a link'}, not a directory")


def _check_link_text(member: tarfile.TarInfo, bad: _Refusal) -> None:
    target = member.linkname
    if not target or len(target) > MAX_NAME or "\x00" in target:
        raise bad(f"link {_show(member.name)} has an unusable target")
    if target.startswith("/"):
        raise bad(f"link {_show(member.name)} points to the absolute path {_show(target)}")


def _resolve_inside(tree: dict[tuple[str, ...], str], link: tuple[str, ...], bad: _Refusal) -> None:
    """Resolve ``link`` against the scanned tree the way the kernel would, one component at a time;
    refuse it if it ever leaves the root, loops, or nests more than MAX_LINK_HOPS links. A missing
    component (a dangling link) resolves by name from there on, and must stay inside too."""
    pending = list(link)
    current: tuple[str, ...] = ()
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                raise bad(f"link {_show('/'.join(link))} resolves outside the archive")
            current = current[:-1]
            continue
        candidate = current + (part,)
        kind = tree.get(candidate)
        if kind is None or kind in (DIR, FILE):
            current = candidate
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            raise bad(f"link {_show('/'.join(link))} nests more than {MAX_LINK_HOPS} links (a loop?)")
        pending[:0] = kind.split("/")


def _write(raw: bytes, bad: _Refusal, root: Path, tree: dict[tuple[str, ...], str]) -> None:
    """Create what :func:`_scan` accepted, never through a link."""
    made: set[tuple[str, ...]] = {()}  # directories this pass created (checked once, not per member)
    for tar, member in _members(raw, bad):
        parts = tuple(p for p in member.name.split("/") if p not in ("", "."))
        _make_dirs(root, parts if member.isdir() else parts[:-1], bad, made)
        target = root.joinpath(*parts)
        if member.isdir():
            continue
        if member.issym():
            os.symlink(member.linkname, target)
            continue
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            data = tar.extractfile(member)
            remaining = member.size
            while remaining > 0:
                chunk = data.read(min(remaining, 1 << 16)) if data is not None else b""
                if not chunk:
                    raise bad(f"is truncated inside member {_show(member.name)}")
                out.write(chunk)
                remaining -= len(chunk)


def _make_dirs(root: Path, parts: tuple[str, ...], bad: _Refusal, made: set[tuple[str, ...]]) -> None:
    if parts in made:
        return
    current = root
    for i, part in enumerate(parts, 1):
        current = current / part
        if parts[:i] in made:
            continue
        made.add(parts[:i])
        try:
            os.mkdir(current, 0o700)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(current).st_mode):  # the scan rules this out: belt and braces
                raise bad(f"places a member below {_show(str(current.relative_to(root)))}, "
                          "which is not a directory") from None


def _show(name: str) -> str:
    return repr(name[:120])


def _decompressor(raw: bytes, bad: _Refusal):
    """A reader of the decompressed tar stream (gzip, xz, bzip2 or none), chosen by magic bytes."""
    fileobj = io.BytesIO(raw)
    if raw[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fileobj, mode="rb")
    if raw[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(fileobj, mode="rb")
    if raw[:3] == b"BZh":
        return bz2.BZ2File(fileobj, mode="rb")
    if len(raw) < 512:
        raise bad("is not an archive (too short to be a tar archive)")
    return fileobj


class _BoundedStream(io.RawIOBase):
    """Reads at most MAX_STREAM decompressed bytes, then refuses: a small bomb stops at the cap."""

    def __init__(self, inner, bad: _Refusal):
        self.inner, self.bad, self.count = inner, bad, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        room = MAX_STREAM + 1 - self.count
        data = self.inner.read(room if size is None or size < 0 else min(size, room))
        self.count += len(data)
        if self.count > MAX_STREAM:
            raise self.bad(f"decompresses to more than {MAX_STREAM >> 20} MiB")
        return data
