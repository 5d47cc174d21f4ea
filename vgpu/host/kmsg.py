"""The kernel log, read for GIM's own account of why it refused a configuration.

GIM (AMD's host driver) does not fail ``modprobe`` when it rejects a vf_num: it loads, leaves the
PF without VFs and says why in the kernel log only, e.g. (amd/MxGPU-Virtualization issue 13)::

    gim error libgv: [0:c6:0:0][amdgv_parse_config_opt:1020] VF number 8 to be enabled exceeds the vf limit 1.

``mark`` notes where the log is before a gim reload; ``gim_since`` returns GIM's lines written
after it; ``explain`` says them in the plan's terms (the PF's address and the vf_num the plan gave
it) for the error a failed reload or verification raises.

Where the log is, by the HostPaths: a simulated host (or any tree under a root) keeps its own log
in ``<root>/dmesg.log`` (the simulator's GIM model writes the same lines there); this machine's
is the ring buffer ``/dev/kmsg`` (read non-blocking, by record sequence number), else the journal
(``journalctl -k -b -o short-monotonic --since @EPOCH``, an argv list, no shell). Reading never
raises: a log that cannot be read gives no lines, and the error is raised without them.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vgpu.host.paths import HostPaths
from vgpu.model.pci import PciAddress

LOG_FILE = "dmesg.log"  # a tree's kernel log, beside its sys/ (vgpu.sim writes it)
MAX_BYTES = 4 << 20  # read at most this much log: the ring buffer is a few MiB at most
MAX_SHOWN = 3  # distinct GIM messages in one error line
KMSG = Path("/dev/kmsg")
JOURNAL_TIMEOUT = 10.0


@dataclass(frozen=True)
class Mark:
    """Where the kernel log was: a tree log's size, the last /dev/kmsg sequence number, the time."""

    offset: int | None = None
    seq: int | None = None
    wall: float = 0.0


@dataclass(frozen=True)
class GimLine:
    """One GIM kernel-log line: its level ("error", "warning", ...; None when the format has
    none), the PCI function it names (None for host-wide lines), GIM's [function:line] and text."""

    level: str | None
    device: PciAddress | None
    where: str | None
    message: str


# -- where the log is ----------------------------------------------------------------------------

def _tree_log(paths: HostPaths) -> Path | None:
    return None if paths.is_system else paths.sys.parent / LOG_FILE


def mark(paths: HostPaths) -> Mark:
    """Where the log is now, so that ``gim_since`` returns only what is written after."""
    tree = _tree_log(paths)
    if tree is not None:
        try:
            return Mark(offset=tree.stat().st_size, wall=time.time())
        except OSError:
            return Mark(offset=0, wall=time.time())
    records = _kmsg_records()
    return Mark(seq=records[-1][0] if records else None, wall=time.time())


def lines_since(paths: HostPaths, since: Mark) -> list[str]:
    """The kernel-log lines written after ``since`` ([] when the log cannot be read)."""
    tree = _tree_log(paths)
    if tree is not None:
        return _file_lines(tree, since.offset or 0)
    records = _kmsg_records()
    if records:
        return [text for seq, text in records if since.seq is None or seq > since.seq]
    return _journal_lines(since.wall)


def _file_lines(path: Path, offset: int) -> list[str]:
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(offset, size - MAX_BYTES) if offset <= size else 0)
            data = fh.read(MAX_BYTES)
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()


_LEVELS = {0: "emerg", 1: "alert", 2: "crit", 3: "error", 4: "warning", 5: "notice", 6: "info", 7: "debug"}


def _kmsg_records(path: Path = KMSG) -> list[tuple[int, str]]:
    """(sequence, "<level> text") of each record in the ring buffer, read non-blocking to its end.
    /dev/kmsg gives one record per read: "prio,seq,usec,flags;text" plus continuation lines."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    records: list[tuple[int, str]] = []
    total = 0
    try:
        while total < MAX_BYTES:
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: skip to the next record
                    continue
                break  # EAGAIN: the end; EINVAL/EPERM: unreadable
            if not chunk:
                break
            total += len(chunk)
            record = _kmsg_record(chunk.decode("utf-8", errors="replace"))
            if record is not None:
                records.append(record)
    finally:
        os.close(fd)
    return records


def _kmsg_record(text: str) -> tuple[int, str] | None:
    head, sep, body = text.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    message = body.split("\n", 1)[0]
    usec = int(fields[2]) if fields[2].isdigit() else 0
    return int(fields[1]), f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] <{_LEVELS[int(fields[0]) & 7]}> {message}"


def _journal_lines(since_wall: float) -> list[str]:
    argv = ["journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q",
            "--since", f"@{int(since_wall)}"]
    try:
        run = subprocess.run(argv, capture_output=True, timeout=JOURNAL_TIMEOUT, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    if run.returncode != 0:
        return []
    return run.stdout[-MAX_BYTES:].decode("utf-8", errors="replace").splitlines()


# -- GIM's lines --------------------------------------------------------------------------------

# GIM 8.x (libgv):   "gim error libgv: [0:c6:0:0][amdgv_parse_config_opt:1020] VF number 8 ..."
#                    "gim info libgv: atom post costs 2 usec"
# GIM's shim:        "[gim][gim_alloc_dma_mem:1118] Allocate iova method memory failed."
# GIM 1.x:           "gim error:(set_new_adapter:617) asic does not support SRIOV"
# Any prefix before them is skipped: "[  429.121239] ", dmesg -T "[Wed Oct 15 16:04:04 2025] ",
# the journal's "host kernel: ", and the "<error> " this module puts on /dev/kmsg records.
_LIBGV = re.compile(r"(?:^|\s)gim (?P<level>[a-z]+) libgv: ?(?P<rest>.*)$")
_DEVICE = re.compile(r"^\[(?P<dom>[0-9a-fA-F]+):(?P<bus>[0-9a-fA-F]+):(?P<dev>[0-9a-fA-F]+):(?P<fn>[0-7])\]")
_WHERE = re.compile(r"^\[(?P<where>[A-Za-z_][\w]*:\d+)\]")
_SHIM = re.compile(r"(?:^|\s)\[gim\]\s*(?P<rest>.*)$")
_OLD = re.compile(r"(?:^|\s)gim (?P<level>[a-z]+):\((?P<where>[\w]+:\d+)\)\s*(?P<rest>.*)$")
_KMSG_LEVEL = re.compile(r"^\[[^\]]*\] <(?P<level>[a-z]+)> ")


def parse_gim_line(line: str) -> GimLine | None:
    """A GIM line in any of its formats, or None for every other kernel-log line."""
    match = _LIBGV.search(line)
    if match:
        return _with_device(match["level"], match["rest"])
    match = _OLD.search(line)
    if match:
        return GimLine(match["level"], None, match["where"], match["rest"].strip())
    match = _SHIM.search(line)
    if match:
        kmsg = _KMSG_LEVEL.match(line)  # /dev/kmsg said the level; the text does not
        return _with_device(kmsg["level"] if kmsg else None, match["rest"])
    return None


def _with_device(level: str | None, rest: str) -> GimLine:
    device = None
    found = _DEVICE.match(rest)
    if found:
        try:
            device = PciAddress(int(found["dom"], 16), int(found["bus"], 16), int(found["dev"], 16),
                                int(found["fn"]))
        except Exception:  # out of range: keep the text, name no device
            device = None
        rest = rest[found.end():]
    where = _WHERE.match(rest)
    if where:
        rest = rest[where.end():]
    return GimLine(level, device, where["where"] if where else None, rest.strip())


def gim_lines(lines: Iterable[str]) -> list[GimLine]:
    return [found for found in map(parse_gim_line, lines) if found is not None]


def gim_since(paths: HostPaths, since: Mark) -> list[GimLine]:
    """GIM's lines written to the kernel log after ``since``."""
    return gim_lines(lines_since(paths, since))


# -- in the plan's terms ------------------------------------------------------------------------

def reasons(lines: list[GimLine], vf_num: dict[PciAddress, int]) -> list[GimLine]:
    """The lines that say why: errors (else warnings, else lines without a level), about a PF in
    the plan or the host as a whole."""
    relevant = [ln for ln in lines if ln.device is None or ln.device in vf_num]
    for wanted in (("emerg", "alert", "crit", "error"), ("warning",), (None,)):
        chosen = [ln for ln in relevant if ln.level in wanted]
        if chosen:
            return chosen
    return []


def explain(lines: list[GimLine], vf_num: dict[PciAddress, int]) -> str | None:
    """GIM's reasons as one clause in the plan's terms, e.g. "gim's kernel log: 0000:05:00.0 and
    7 more GPU(s) (vf_num 8 in the plan): VF number 8 to be enabled exceeds the vf limit 1";
    None when GIM logged no reason."""
    grouped: dict[str, list[PciAddress | None]] = {}
    for line in reasons(lines, vf_num):
        grouped.setdefault(_one_line(line.message), []).append(line.device)
    if not grouped:
        return None
    parts = [_clause(message, devices, vf_num) for message, devices in list(grouped.items())[:MAX_SHOWN]]
    more = len(grouped) - MAX_SHOWN
    return "gim's kernel log: " + "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def _clause(message: str, devices: list[PciAddress | None], vf_num: dict[PciAddress, int]) -> str:
    pfs = sorted({d for d in devices if d is not None})
    if not pfs:
        return message
    counts = sorted({vf_num[pf] for pf in pfs})
    who = str(pfs[0]) if len(pfs) == 1 else f"{pfs[0]} and {len(pfs) - 1} more GPU(s)"
    return f"{who} (vf_num {'/'.join(map(str, counts))} in the plan): {message}"


def _one_line(text: str, limit: int = 200) -> str:
    """The message on one line, printable, its closing period dropped (the error goes on after it)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split()).rstrip(".")
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"
