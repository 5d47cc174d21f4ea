"""Parser for ``rocm-smi`` output: the concise table (ROCm 6.1-era "[Model : Revision]" layout and
the 6.2+ "Node IDs (DID, GUID)" / "Partitions (Mem, Compute, ID)" layout), ``--showhw``, the
"GPU[n]<TAB><TAB>: key: value" lines of ``-a``, ``-i``, ``--showbus``, ``--showproduct`` and
``--showmetrics`` (also "GPU[n] XCP[m]"), and ``--version``. Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .common import (ParseError, is_na, is_noise, lines_of, normalize_bdf, parse_float,
                     parse_int, require_text)
from .tables import column_starts, cut_row

_GPU_LINE = re.compile(r"^\s*GPU\[(\d+)\]\s*(?:XCP\[(\d+)\]\s*)?:\s?(.*)$")
# rocm-smi's printLogSpacer: the title centred in a line of '=' as wide as the tool's output
# (90, 116, 122 columns across versions), or a line of '=' alone. Wrapper scripts' echo lines
# ("=== GPU info ===") are narrower or lopsided and are not sections.
_BANNER = re.compile(r"^\s?(?P<left>=+)(?: (?P<title>\S.*?) (?P<right>=+))?$")
_BANNER_MIN_WIDTH = 60


def _banner(line: str) -> Optional[str]:
    """The title of a rocm-smi banner line ("" for a plain '=' rule), or None for any other line."""
    match = _BANNER.match(line.rstrip())
    if match is None or len(line.strip()) < _BANNER_MIN_WIDTH:
        return None
    if match.group("title") is None:
        return ""
    left, right = len(match.group("left")), len(match.group("right"))
    return match.group("title") if abs(left - right) <= 2 else None


@dataclass
class RocmSmiGpu:
    """One GPU (or logical partition GPU) of rocm-smi. ``fields`` keeps every "key: value" as printed
    (first occurrence); ``xcp`` holds per-XCP fields of ``--showmetrics``; ``notes`` the lines
    without a value ("Not supported" messages)."""

    index: int
    device_id: Optional[int] = None
    revision: Optional[int] = None
    name: Optional[str] = None
    node: Optional[int] = None
    guid: Optional[int] = None
    bdf: Optional[str] = None
    gfx_version: Optional[str] = None
    compute_partition: Optional[str] = None
    memory_partition: Optional[str] = None
    partition_id: Optional[int] = None
    temperature_c: Optional[float] = None
    power_w: Optional[float] = None
    power_cap_w: Optional[float] = None
    vram_percent: Optional[float] = None
    gpu_percent: Optional[float] = None
    fields: Dict[str, str] = field(default_factory=dict)
    xcp: Dict[int, Dict[str, str]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    @property
    def device_id_hex(self) -> Optional[str]:
        return None if self.device_id is None else "0x%04x" % self.device_id


@dataclass
class RocmSmi:
    """What one rocm-smi invocation printed: its sections' titles, the driver version and the GPUs."""

    driver_version: Optional[str] = None
    sections: List[str] = field(default_factory=list)
    gpus: List[RocmSmiGpu] = field(default_factory=list)

    def gpu(self, index: int) -> Optional[RocmSmiGpu]:
        return next((g for g in self.gpus if g.index == index), None)


def _gpu(result: RocmSmi, index: int) -> RocmSmiGpu:
    found = result.gpu(index)
    if found is None:
        found = RocmSmiGpu(index=index)
        result.gpus.append(found)
    return found


def _apply_field(gpu: RocmSmiGpu, key: str, value: str) -> None:
    """Fill the typed attributes from the keys rocm-smi uses across versions."""
    lowered = key.lower()
    if lowered in ("device id", "card model"):
        gpu.device_id = gpu.device_id if gpu.device_id is not None else parse_int(value)
    elif lowered in ("device name", "card series") and not is_na(value):
        gpu.name = gpu.name or value
    elif lowered == "device rev":
        gpu.revision = parse_int(value)
    elif lowered == "guid":
        gpu.guid = parse_int(value)
    elif lowered == "node id":
        gpu.node = parse_int(value)
    elif lowered == "pci bus":
        gpu.bdf = normalize_bdf(value)
    elif lowered == "gfx version":
        gpu.gfx_version = value
    elif lowered == "compute partition":
        gpu.compute_partition = None if is_na(value) else value
    elif lowered == "memory partition":
        gpu.memory_partition = None if is_na(value) else value


def _key_value_line(result: RocmSmi, match) -> None:
    gpu = _gpu(result, int(match.group(1)))
    rest = match.group(3).strip()
    if ":" not in rest:
        if rest:
            gpu.notes.append(rest)
        return
    key, value = rest.split(":", 1)
    key, value = key.strip(), value.replace("\t", " ").strip()
    if match.group(2) is not None:
        gpu.xcp.setdefault(int(match.group(2)), {}).setdefault(key, value)
        return
    if key not in gpu.fields:
        gpu.fields[key] = value
        _apply_field(gpu, key, value)


def _partitions(gpu: RocmSmiGpu, cell: str) -> None:
    parts = [part.strip() for part in cell.split(",")]
    gpu.memory_partition = parts[0] if parts and not is_na(parts[0]) else None
    gpu.compute_partition = parts[1] if len(parts) > 1 and not is_na(parts[1]) else None
    gpu.partition_id = parse_int(parts[2]) if len(parts) > 2 else gpu.partition_id


def _concise_cell(gpu: RocmSmiGpu, name: str, cell: str) -> None:
    gpu.fields[name] = cell
    if name.startswith("[Model"):
        match = re.match(r"^\[\s*(\S+)\s*:\s*(\S+)\s*\]", cell)
        if match:
            gpu.device_id, gpu.revision = parse_int(match.group(1)), parse_int(match.group(2))
    elif name == "Node":
        gpu.node = parse_int(cell)
    elif name == "IDs":  # "0x74a1,   55354" = DID, GUID
        ids = [part.strip() for part in cell.split(",")]
        gpu.device_id = parse_int(ids[0])
        gpu.guid = parse_int(ids[1]) if len(ids) > 1 else None
    elif name == "Temp":
        gpu.temperature_c = parse_float(cell)
    elif name == "Power":
        gpu.power_w = parse_float(cell)
    elif name == "PwrCap":
        gpu.power_cap_w = parse_float(cell)
    elif name == "Partitions":
        _partitions(gpu, cell)
    elif name == "VRAM%":
        gpu.vram_percent = parse_float(cell)
    elif name == "GPU%":
        gpu.gpu_percent = parse_float(cell)


# Header names of the concise table (ROCm 6.1 and 6.2+) and of --showhw; a table is found by
# its header line naming the index column ("Device", "GPU") and at least two of these.
_CONCISE = {"Node", "IDs", "[Model : Revision]", "Temp", "Power", "Partitions", "SCLK", "MCLK", "Fan",
            "Perf", "PwrCap", "VRAM%", "GPU%"}
_SHOWHW = {"NODE", "DID", "GUID", "GFX VER", "GFX RAS", "SDMA RAS", "UMC RAS", "VBIOS", "BUS", "PARTITION ID"}


def _concise(result: RocmSmi, header: str, rows: List[str]) -> None:
    """The concise table, keyed by header name (any columns, any order); ROCm 6.1 prints the
    device name on its own line under each row (and "Name (20 chars)" in the second header line)."""
    columns = column_starts(header)
    starts, names = [c[0] for c in columns], [c[1] for c in columns]
    last: Optional[RocmSmiGpu] = None
    for line in rows:
        if _banner(line) is not None or line.lstrip().startswith("("):
            continue
        cells = dict(zip(names, cut_row(line, starts)))
        index = parse_int(cells.get("Device"))
        if index is None:
            if last is not None and line[:1].isspace() and not last.name and "Name" not in line:
                last.name = line.strip()
            continue
        last = _gpu(result, index)
        for name, cell in cells.items():
            if name != "Device":
                _concise_cell(last, name, cell)


def _showhw(result: RocmSmi, header: str, rows: List[str]) -> None:
    columns = column_starts(header)
    starts, names = [c[0] for c in columns], [c[1] for c in columns]
    for line in rows:
        cells = dict(zip(names, cut_row(line, starts)))
        index = parse_int(cells.get("GPU"))
        if index is None:
            continue
        gpu = _gpu(result, index)
        gpu.fields.update(cells)
        gpu.node = parse_int(cells.get("NODE"))
        gpu.device_id = parse_int(cells.get("DID"))
        gpu.guid = parse_int(cells.get("GUID"))
        gpu.gfx_version = None if is_na(cells.get("GFX VER")) else cells["GFX VER"]
        gpu.bdf = normalize_bdf(cells.get("BUS", ""))
        gpu.partition_id = parse_int(cells.get("PARTITION ID"))


def _table_body(lines: List[str]) -> List[str]:
    """The lines of a table up to the next titled banner ("=== End of ROCm SMI Log ===")."""
    for at, line in enumerate(lines):
        if _banner(line):
            return lines[:at]
    return lines


def _tables(result: RocmSmi, lines: List[str]) -> None:
    """Find the concise and --showhw tables by their header lines and parse the rows under them."""
    for at, line in enumerate(lines):
        names = {name for _, name in column_starts(line)}
        if "Device" in names and len(names & _CONCISE) >= 2:
            _concise(result, line, _table_body(lines[at + 1:]))
        elif "GPU" in names and len(names & _SHOWHW) >= 2:
            _showhw(result, line, _table_body(lines[at + 1:]))


def parse_rocmsmi(text: str) -> RocmSmi:
    """Parse any rocm-smi report: concise table, ``--showhw`` or "GPU[n] : key: value" sections.

    Returns a RocmSmi with the GPUs in printed order (logical partition GPUs included). Raises
    ParseError for empty text or text with no rocm-smi banner, table or GPU[n] line.
    """
    require_text(text, "rocm-smi")
    result = RocmSmi()
    lines = [line for line in lines_of(text) if not is_noise(line)]
    for line in lines:
        title = _banner(line)
        if title:
            result.sections.append(title)
            continue
        match = _GPU_LINE.match(line)
        if match:
            _key_value_line(result, match)
        elif line.lower().startswith("driver version:"):
            result.driver_version = line.split(":", 1)[1].strip()
    _tables(result, lines)
    if not result.gpus and not result.sections:
        raise ParseError("not rocm-smi output: no banner, table or GPU[n] line")
    return result


@dataclass
class RocmSmiVersion:
    smi_version: Optional[str] = None
    lib_version: Optional[str] = None


def parse_rocmsmi_version(text: str) -> RocmSmiVersion:
    """Parse ``rocm-smi --version`` ("ROCM-SMI version: 2.0.0+8e78352", "ROCM-SMI-LIB version: 6.0.0").
    Raises ParseError when neither line is present."""
    require_text(text, "rocm-smi --version")
    found = RocmSmiVersion()
    for line in lines_of(text):
        match = re.match(r"^\s*ROCM-SMI(-LIB)? version:\s*(\S+)", line, re.I)
        if match and match.group(1):
            found.lib_version = match.group(2)
        elif match:
            found.smi_version = match.group(2)
    if found.smi_version is None and found.lib_version is None:
        raise ParseError("not rocm-smi --version output: no 'ROCM-SMI version:' line")
    return found
