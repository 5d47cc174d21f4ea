"""Host snapshots: the PCI/IOMMU/module subset of /sys, /proc/cmdline, and what vgpu reads of /etc.

``capture`` writes a tar.gz an operator can attach to a support case; ``open_snapshot`` unpacks
one into a temporary tree that discovery and ``plan`` read exactly like a live host. Only the
attributes discovery reads are copied (never config space, ROMs or the mmap-able resourceN files),
and unpacking checks every member itself (:mod:`vgpu.host.archive`), so a hostile archive cannot write
outside its tree, fill the disk or point discovery at the host's own files (docs/security.md).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from vgpu import __version__
from vgpu.errors import InputError
from vgpu.host.archive import MAX_MEMBER_SIZE, unpack
from vgpu.host.facts import WATCHED_MODULES
from vgpu.host.paths import HostPaths
from vgpu.host.pcifunc import ATTRIBUTES, LINKS
from vgpu.inputs import load_json, read_input

SNAPSHOT_SCHEMA = "vgpu.host-snapshot/v1"
MANIFEST = "MANIFEST.json"
_MAX_FILE = MAX_MEMBER_SIZE  # what unpacking accepts per member
_HUGEPAGES = ("hugepages-2048kB", "hugepages-1048576kB")


def capture(paths: HostPaths) -> tuple[bytes, dict]:
    """The snapshot of ``paths`` as tar.gz bytes, and its manifest (the caller writes them where
    the operator asked: :func:`vgpu.cli.host.snapshot`)."""
    manifest = {"schema": SNAPSHOT_SCHEMA, "vgpu_version": __version__, "host": socket.gethostname(),
                "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": paths.label}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        writer = _Writer(tar)
        for src, arc in _entries(paths):
            writer.add(src, arc)
        writer.add_bytes(MANIFEST, json.dumps(manifest, indent=2).encode())
    return buffer.getvalue(), manifest


def _entries(paths: HostPaths) -> Iterator[tuple[Path, str]]:
    sys = paths.sys
    yield from _pci(sys)
    yield from _tree_links(sys / "kernel" / "iommu_groups", "sys/kernel/iommu_groups", depth=3)
    yield from _tree_links(sys / "class" / "iommu", "sys/class/iommu", depth=1)
    for driver in _listdir(sys / "bus/pci/drivers"):
        yield from _tree_links(sys / "bus/pci/drivers" / driver, f"sys/bus/pci/drivers/{driver}", depth=1)
    for module in WATCHED_MODULES:
        base = sys / "module" / module
        for name in ("version", "initstate"):
            yield base / name, f"sys/module/{module}/{name}"
        for name in _listdir(base / "parameters"):
            yield base / "parameters" / name, f"sys/module/{module}/parameters/{name}"
    for size in _HUGEPAGES:
        yield sys / "kernel/mm/hugepages" / size / "nr_hugepages", f"sys/kernel/mm/hugepages/{size}/nr_hugepages"
    if paths.proc:
        yield paths.proc / "cmdline", "proc/cmdline"
        # the kernel release: the capability matrix (docs/hardware.md §9) is keyed by it
        yield paths.proc / "sys/kernel/osrelease", "proc/sys/kernel/osrelease"
    if paths.etc:
        yield from _etc(paths.etc)


def _etc(etc: Path) -> Iterator[tuple[Path, str]]:
    """What plan and status read of /etc: gim's and modprobe's config, and what provision recorded."""
    from vgpu.persist import STATE_RECORD, UNIT_LINK, UNIT_PATH

    yield etc / "gim_config", "etc/gim_config"
    yield etc / "os-release", "etc/os-release"  # host OS for the capability matrix (read through its link)
    for name in _listdir(etc / "modprobe.d"):
        yield etc / "modprobe.d" / name, f"etc/modprobe.d/{name}"
    for name in _listdir(etc / "modules-load.d"):
        yield etc / "modules-load.d" / name, f"etc/modules-load.d/{name}"
    yield etc / STATE_RECORD, f"etc/{STATE_RECORD}"
    yield etc / UNIT_PATH, f"etc/{UNIT_PATH}"
    # the unit's enable link points at an absolute path, which the safe unpacking refuses: keep the
    # link's target as the file's text, which is what FileStore.read gives for a link
    yield etc / UNIT_LINK, f"etc/{UNIT_LINK}{LINK_AS_TEXT}"


LINK_AS_TEXT = "#link-as-text"  # suffix (never written) marking an entry stored as its link target


def _pci(sys: Path) -> Iterator[tuple[Path, str]]:
    """bus/pci/devices links, and for each device its directory chain with the attributes we read."""
    devices = sys / "bus/pci/devices"
    seen: set[Path] = set()
    for name in _listdir(devices):
        yield devices / name, f"sys/bus/pci/devices/{name}"
        real = Path(os.path.realpath(devices / name))
        try:
            rel = real.relative_to(os.path.realpath(sys))
        except ValueError:
            continue
        if real in seen:
            continue
        seen.add(real)
        for attr in ATTRIBUTES:
            yield real / attr, f"sys/{rel}/{attr}"
        for link in (*LINKS, *[n for n in _listdir(real) if n.startswith("virtfn")]):
            yield real / link, f"sys/{rel}/{link}"


def _tree_links(base: Path, arc: str, depth: int) -> Iterator[tuple[Path, str]]:
    """Symlinks (and the directories holding them) up to ``depth`` levels below ``base``."""
    if depth < 0:
        return
    for name in _listdir(base):
        path = base / name
        if path.is_symlink():
            yield path, f"{arc}/{name}"
        elif path.is_dir():
            yield from _tree_links(path, f"{arc}/{name}", depth - 1)


class _Writer:
    def __init__(self, tar: tarfile.TarFile):
        self.tar = tar

    def add(self, src: Path, arc: str) -> None:
        if arc.endswith(LINK_AS_TEXT):
            if src.is_symlink():
                self.add_bytes(arc[:-len(LINK_AS_TEXT)], os.readlink(src).encode())
            return
        if src.is_symlink() and not arc.startswith("etc/"):  # config files are read through their links
            # (a "-> /dev/null" mask is common there, and an absolute link cannot be unpacked safely)
            info = tarfile.TarInfo(arc)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(src), 0o777
            self.tar.addfile(info)
            return
        try:
            with open(src, "rb") as fh:
                data = fh.read(_MAX_FILE)
        except OSError:  # absent, write-only (bind, unbind) or unreadable: not part of the capture
            return
        self.add_bytes(arc, data)

    def add_bytes(self, arc: str, data: bytes) -> None:
        info = tarfile.TarInfo(arc)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        self.tar.addfile(info, io.BytesIO(data))


@contextlib.contextmanager
def open_snapshot(path: Path) -> Iterator[HostPaths]:
    """Unpack a snapshot into a private temporary tree; yields its HostPaths.

    A snapshot usually comes from another host (a support case, a ticket), so it is unpacked by
    :func:`vgpu.host.archive.unpack` under rules that do not depend on the interpreter's tarfile
    filters. Anything wrong is one InputError (exit 5) and nothing is left behind."""
    path = Path(path)
    raw = read_input(path, "snapshot")  # regular file, capped: never a FIFO, device or directory
    with tempfile.TemporaryDirectory(prefix="vgpu-snapshot-") as tmp:
        root = Path(tmp) / "tree"
        root.mkdir(mode=0o700)
        unpack(raw, path, root)
        manifest = _manifest(root, path)
        yield HostPaths.under(root, label=f"snapshot {path.name} of {manifest.get('host', '?')}")


def _manifest(root: Path, path: Path) -> dict:
    try:
        manifest = load_json(root / MANIFEST, "manifest")
    except InputError:
        raise InputError(f"{path} is not a vgpu host snapshot: {MANIFEST} is missing or corrupt") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SNAPSHOT_SCHEMA:
        raise InputError(f"{path}: unsupported snapshot schema {manifest.get('schema') if isinstance(manifest, dict) else manifest!r}"
                         f" (this vgpu reads {SNAPSHOT_SCHEMA})")
    if not stat.S_ISDIR(_lstat_mode(root / "sys/bus/pci")):
        raise InputError(f"{path} is not a vgpu host snapshot: it holds no sys/bus/pci tree")
    return manifest


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
