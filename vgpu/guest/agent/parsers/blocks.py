"""A generic parser for the YAML-like "KEY: value" blocks that amd-smi (ROCm and GIM flavours)
prints, nested by indentation:

    GPU: 0                      <- ROCm amd-smi record header ("GPU 0:" in the GIM/Windows one)
        ASIC:
            MARKET_NAME: MI300X
            VCN_ACTIVITY: [0 %, N/A,     <- a list may wrap over several lines
                N/A, N/A]

Standard library only, Python 3.8. Pure: text in, a tree of ``Entry`` out; no value is
interpreted here (see the per-tool modules for typed accessors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .common import is_truncation, lines_of

# "GPU: 0" (ROCm amd-smi), "GPU 0:" (GIM amd-smi on Windows), "VF: 0", "VF 0:", "CACHE 0:".
_RECORD_VALUE = re.compile(r"^\d+$")
_RECORD_KEY = re.compile(r"^(?P<name>[A-Za-z_]+)[ _]?(?P<index>\d+)$")


@dataclass
class Entry:
    """One "KEY: value" line with the lines indented under it."""

    key: str
    value: str
    indent: int
    children: List["Entry"] = field(default_factory=list)

    def child(self, key: str) -> Optional["Entry"]:
        """The first child whose key equals ``key`` (case-insensitive), or None."""
        wanted = key.lower()
        for entry in self.children:
            if entry.key.lower() == wanted:
                return entry
        return None


def _indent(line: str) -> int:
    expanded = line.expandtabs(8)
    return len(expanded) - len(expanded.lstrip())


def _split(line: str) -> Optional[Tuple[str, str]]:
    """Split "KEY: value" at the first colon; None for lines without one."""
    stripped = line.strip()
    if ":" not in stripped:
        return None
    key, value = stripped.split(":", 1)
    key = key.strip().strip("*").strip()
    if not key:
        return None
    # rocminfo prints "Packet Processor uCode:: 189": the second colon is not part of the value.
    return key, value.lstrip(":").strip()


def _unbalanced(value: str) -> bool:
    return value.count("[") > value.count("]")


def parse_blocks(text: str) -> List[Entry]:
    """Parse indented "KEY: value" lines into a forest of ``Entry`` (top-level entries returned).

    Blank lines, truncation markers ('...', '---- snipped ----', '…') and lines without a colon
    are skipped; a value with an unclosed '[' swallows the following lines until it closes.
    Never raises.
    """
    roots: List[Entry] = []
    stack: List[Entry] = []
    pending: Optional[Entry] = None
    for line in lines_of(text):
        if pending is not None:
            pending.value = (pending.value + " " + line.strip()).strip()
            if not _unbalanced(pending.value):
                pending = None
            continue
        if not line.strip() or is_truncation(line):
            continue
        parts = _split(line)
        if parts is None:
            continue
        entry = Entry(parts[0], parts[1], _indent(line))
        while stack and stack[-1].indent >= entry.indent:
            stack.pop()
        (stack[-1].children if stack else roots).append(entry)
        stack.append(entry)
        if _unbalanced(entry.value):
            pending = entry
    return roots


def record_index(entry: Entry, name: str) -> Optional[int]:
    """The index of a record header named ``name``: 0 for "GPU: 0" and for "GPU 0:"; else None."""
    if entry.key.upper() == name.upper() and _RECORD_VALUE.match(entry.value):
        return int(entry.value)
    match = _RECORD_KEY.match(entry.key)
    if match and match.group("name").upper() == name.upper() and not entry.value:
        return int(match.group("index"))
    return None


def records(entries: List[Entry], name: str) -> List[Tuple[int, Entry]]:
    """The (index, entry) pairs of the entries that are ``name`` record headers, in order."""
    found = []
    for entry in entries:
        index = record_index(entry, name)
        if index is not None:
            found.append((index, entry))
    return found


def to_dict(entries: List[Entry]) -> Dict[str, Any]:
    """Entries as a dict with lower-case keys: a value, or a dict for an entry with children
    (its own value, if any, under "_value"). A key seen twice (GIM's repeated "BLOCK:"/"STATUS:")
    becomes a list of its values in order."""
    result: Dict[str, Any] = {}
    repeated = set()
    for entry in entries:
        if entry.children:
            value: Any = to_dict(entry.children)
            if entry.value:
                value["_value"] = entry.value
        else:
            value = entry.value
        key = entry.key.lower()
        if key not in result:
            result[key] = value
        elif key in repeated:
            result[key].append(value)
        else:
            result[key] = [result[key], value]
            repeated.add(key)
    return result
