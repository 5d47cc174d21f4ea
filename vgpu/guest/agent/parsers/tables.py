"""Whitespace-aligned tables, as amd-smi (`partition`, `monitor`, `ras`) and rocm-smi (concise
info, `--showhw`) print them. Standard library only, Python 3.8.

Two shapes exist:
- left-aligned columns (values start under their header): cut each row at the header's column
  starts (``aligned_rows``); a row may leave cells empty (amd-smi's continuation rows);
- right-aligned monitor columns whose cells carry units ("171 W", "32 °C", "0.5/ 48.0 GB"):
  split the row into value-with-unit cells (``unit_cells``) and key them by ``header_names``.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

# A header cell is a run of text without two consecutive spaces ("GFX VER", "[Model : Revision]").
_HEADER_CELL = re.compile(r"\S+(?: \S+)*")


def column_starts(header: str) -> List[Tuple[int, str]]:
    """(start, name) of each header column; names are separated by two or more spaces."""
    return [(m.start(), m.group(0)) for m in _HEADER_CELL.finditer(header.expandtabs(8))]


def _snap(line: str, start: int) -> int:
    """Move a cut that falls inside a token left to the token's start (a value wider than its
    header pushes into the next column's space, never the other way in these tools)."""
    start = min(start, len(line))
    while 0 < start < len(line) and not line[start - 1].isspace() and not line[start].isspace():
        start -= 1
    return start


def cut_row(line: str, starts: List[int]) -> List[str]:
    """The stripped cells of ``line`` cut at the column ``starts``."""
    line = line.expandtabs(8)
    cuts = [0] + [_snap(line, start) for start in starts[1:]] + [len(line)]
    return [line[cuts[i]:cuts[i + 1]].strip() for i in range(len(starts))]


def aligned_rows(header: str, lines: List[str]) -> List[Dict[str, str]]:
    """Rows of a left-aligned table as dicts keyed by header name (empty cells are "")."""
    columns = column_starts(header)
    starts = [start for start, _ in columns]
    names = [name for _, name in columns]
    rows = []
    for line in lines:
        if not line.strip():
            continue
        rows.append(dict(zip(names, cut_row(line, starts))))
    return rows


# One monitor cell: "N/A", "0.5/ 48.0 GB", "171 W", "32 °C", "0 %", "1427 MHz", "0", "SPX".
_UNIT_CELL = re.compile(
    r"N/A"
    r"|[-+]?\d+(?:\.\d+)?\s*/\s*[-+]?\d+(?:\.\d+)?(?:\s+[^\s\d][^\s]*)?"
    r"|[-+]?\d+(?:\.\d+)?(?:\s+(?!N/A)[^\s\d][^\s]*)?"
    r"|\S+"
)


def unit_cells(line: str) -> List[str]:
    """Split a monitor row into cells, keeping each number with the unit after it."""
    return [m.group(0) for m in _UNIT_CELL.finditer(line.strip())]


def header_names(line: str) -> List[str]:
    """Single-space separated header names with markup stripped ("**GFX_UTIL**" -> "GFX_UTIL")."""
    return [name.strip("*") for name in line.split() if name.strip("*")]


def ratio(cell: Optional[str]) -> Optional[Tuple[float, float, str]]:
    """(used, total, unit) from "285/196288 MB" or "0.5/ 48.0 GB"; None otherwise."""
    if not cell:
        return None
    match = re.match(r"^\s*([-+]?\d+(?:\.\d+)?)\s*/\s*([-+]?\d+(?:\.\d+)?)\s*(\S*)", cell)
    if not match:
        return None
    return float(match.group(1)), float(match.group(2)), match.group(3)
