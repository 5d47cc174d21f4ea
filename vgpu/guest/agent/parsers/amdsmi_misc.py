"""Parsers for the amd-smi outputs that are not "GPU: N" blocks: ``version`` (every form), the
default boxed summary (``amd-smi`` with no arguments), ``monitor`` tables, ``partition`` tables and
other aligned tables (``ras --cper``). Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .amdsmi import SmiGpu
from .blocks import parse_blocks, to_dict
from .common import (ParseError, is_na, is_noise, json_payload, lines_of, normalize_bdf, parse_int,
                     parse_quantity, require_text, size_mb)
from .tables import aligned_rows, header_names, ratio, unit_cells

_VERSION = re.compile(r"^\d+(?:\.\d+)+")


@dataclass
class SmiVersion:
    """``amd-smi version``. A field the tool could not read (e.g. amdgpu_version as non-root, which
    prints an error string there) is None; ``fields`` keeps every key as printed (lower-case).

    With the kernel's inbox amdgpu (no amdgpu-dkms), amd-smi prints the kernel's /proc/version
    string ("Linux version 6.8.0-45-generic (buildd@...) ...") as the amdgpu version: that is no
    driver version, so ``amdgpu_version`` stays None and ``kernel_release`` keeps "6.8.0-45-generic"."""

    tool_name: Optional[str] = None
    tool_version: Optional[str] = None
    library_version: Optional[str] = None
    rocm_version: Optional[str] = None
    amdgpu_version: Optional[str] = None
    kernel_release: Optional[str] = None
    fields: Dict[str, str] = field(default_factory=dict)


_PROC_VERSION = re.compile(r"^Linux version (\S+)")


def _kernel_release(value: Any) -> Optional[str]:
    match = _PROC_VERSION.match("" if value is None else str(value).strip())
    return match.group(1) if match else None


def _version(value: Any) -> Optional[str]:
    text = "" if value is None else str(value).strip()
    return text if _VERSION.match(text) else None


def _version_pairs(text: str) -> Dict[str, str]:
    try:
        payload = json_payload(text, "amd-smi version")
    except ParseError:
        payload = None
    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        payload = payload[0]
    if isinstance(payload, dict):
        return {str(k).lower(): str(v) for k, v in payload.items()}
    pairs: Dict[str, str] = {}
    for line in lines_of(text):
        # ROCm one-liner: "AMDSMI Tool: 23.4.2+505b858 | AMDSMI Library version: 24.2.0.0 | ...";
        # GIM: a "VERSION:" block with TOOL_NAME / TOOL_VERSION / LIB_VERSION lines.
        for part in line.split("|"):
            if ":" in part:
                key, value = part.split(":", 1)
                key = re.sub(r"\s+", "_", key.strip().lower())
                if key and value.strip():
                    pairs.setdefault(key, value.strip())
    return pairs


def parse_amdsmi_version(text: str) -> SmiVersion:
    """Parse ``amd-smi version`` in its ROCm one-line '|' form, GIM's multi-line VERSION block, or
    ``--json`` (a list of one object). Raises ParseError when no version field is found."""
    require_text(text, "amd-smi version")
    pairs = _version_pairs(text)
    tool = pairs.get("amdsmi_tool") or pairs.get("tool_version") or pairs.get("version")
    name = pairs.get("tool_name") or pairs.get("tool") or ("AMDSMI Tool" if "amdsmi_tool" in pairs else None)
    found = SmiVersion(
        tool_name=name,
        tool_version=_version(tool),
        library_version=_version(pairs.get("amdsmi_library_version") or pairs.get("lib_version")),
        rocm_version=_version(pairs.get("rocm_version")),
        amdgpu_version=_version(pairs.get("amdgpu_version")),
        kernel_release=_kernel_release(pairs.get("amdgpu_version")),
        fields=pairs)
    if not (found.tool_version or found.library_version or found.rocm_version):
        raise ParseError("not amd-smi version output: no tool, library or ROCm version found")
    return found


@dataclass
class SmiSummary:
    """The boxed table ``amd-smi`` prints without arguments (AMD-SMI 26.x)."""

    tool_version: Optional[str] = None
    amdgpu_version: Optional[str] = None
    rocm_version: Optional[str] = None
    vbios_version: Optional[str] = None
    platform: Optional[str] = None
    gpus: List[SmiGpu] = field(default_factory=list)


def _search(pattern: str, text: str) -> Optional[str]:
    match = re.search(pattern, text)
    return match.group(1) if match else None


def _summary_gpu(first: List[str], second: List[str]) -> Optional[SmiGpu]:
    head = re.match(r"^(\S+)\s+(.*)$", first[0].strip())
    ids = second[0].split()
    if not head or normalize_bdf(head.group(1)) is None or len(ids) < 4:
        return None
    gpu = SmiGpu(index=parse_int(ids[0]) or 0, bdf=normalize_bdf(head.group(1)),
                 market_name=head.group(2).strip(), hip_id=parse_int(ids[1]), oam_id=parse_int(ids[2]))
    modes = ids[3].split("/")
    gpu.compute_partition = None if is_na(modes[0]) else modes[0]
    gpu.memory_partition = modes[1] if len(modes) > 1 and not is_na(modes[1]) else None
    usage = ratio(_search(r"(\d+(?:\.\d+)?\s*/\s*\d+(?:\.\d+)?\s*[KMG]B)", second[1]))
    if usage:
        gpu.vram_total_mb = size_mb("%s %s" % (usage[1], usage[2]))
        gpu.fields["vram_used_mb"] = size_mb("%s %s" % (usage[0], usage[2]))
    power = ratio(_search(r"(\d+(?:\.\d+)?\s*/\s*\d+(?:\.\d+)?\s*W)", first[1]))
    if power:
        gpu.fields["power_w"], gpu.fields["power_cap_w"] = power[0], power[1]
    return gpu


def parse_amdsmi_default(text: str) -> SmiSummary:
    """Parse the default ``amd-smi`` boxed summary: versions, platform and, per GPU, BDF, name,
    HIP/OAM ids, partition modes ("SPX/NPS1") and VRAM total/used. Raises ParseError when the
    "AMD-SMI <version>" banner is missing."""
    require_text(text, "amd-smi")
    summary = SmiSummary(tool_version=_search(r"AMD-SMI\s+(\S+)", text))
    if summary.tool_version is None:
        raise ParseError("not the amd-smi summary table: no 'AMD-SMI <version>' banner")
    summary.amdgpu_version = _search(r"amdgpu version:\s*(\S+)", text)
    summary.rocm_version = _search(r"ROCm version:\s*(\S+)", text)
    summary.vbios_version = _search(r"VBIOS version:\s*(\S+)", text)
    platform = _search(r"Platform:\s*([^|]+)", text)
    summary.platform = platform.strip() if platform else None
    rows = [[cell for cell in line.strip().strip("|").split("|")]
            for line in lines_of(text) if line.strip().startswith("|") and line.count("|") >= 3]
    for first_row, second_row in zip(rows, rows[1:]):
        gpu = _summary_gpu(first_row, second_row)
        if gpu is not None:
            summary.gpus.append(gpu)
    return summary


@dataclass
class MonitorRow:
    """One row of ``amd-smi monitor``; ``cells`` maps header name to the cell as printed (every
    column, known or not). ``timestamp`` is the TIMESTAMP column of ``--watch`` output (epoch s)."""

    gpu: int
    xcp: Optional[int] = None
    timestamp: Optional[int] = None
    cells: Dict[str, str] = field(default_factory=dict)

    def value(self, name: str) -> Optional[float]:
        """The number in cell ``name`` ("171 W" -> 171.0); None for N/A or a missing column."""
        quantity = parse_quantity(self.cells.get(name))
        return None if quantity is None else quantity.value

    @property
    def vram_total_mb(self) -> Optional[float]:
        if "VRAM_TOTAL" in self.cells:
            return size_mb(self.cells["VRAM_TOTAL"])
        usage = ratio(self.cells.get("VRAM_USAGE"))
        return size_mb("%s %s" % (usage[1], usage[2])) if usage else None

    @property
    def vram_used_mb(self) -> Optional[float]:
        if "VRAM_USED" in self.cells:
            return size_mb(self.cells["VRAM_USED"])
        usage = ratio(self.cells.get("VRAM_USAGE"))
        return size_mb("%s %s" % (usage[0], usage[2])) if usage else None


WATCH_BANNER = "'CTRL' + 'C' to stop watching output:"  # amd-smi --watch prints it first
# A monitor header name: "GPU", "GPU_TEMP", "GFX%", "VRAM_USAGE", "TIMESTAMP" (markup stripped).
_MONITOR_NAME = re.compile(r"^[A-Z][A-Z0-9_%#]*$")


def _monitor_header(line: str) -> Optional[List[str]]:
    """The column names when ``line`` is a monitor header (upper-case names, one of them GPU)."""
    names = header_names(line)
    if len(names) > 1 and "GPU" in names and all(_MONITOR_NAME.match(name) for name in names):
        return names
    return None


def _monitor_row(names: List[str], line: str) -> Optional[MonitorRow]:
    cells = unit_cells(line)
    if len(cells) != len(names):
        return None
    row = dict(zip(names, cells))
    gpu = parse_int(row["GPU"])
    if gpu is None:
        return None
    return MonitorRow(gpu=gpu, xcp=parse_int(row.get("XCP")), timestamp=parse_int(row.get("TIMESTAMP")),
                      cells=row)


def parse_amdsmi_monitor(text: str) -> List[MonitorRow]:
    """Parse ``amd-smi monitor`` tables: any column selection and order, right-aligned cells with
    units, N/A cells, publisher markup ("**GFX_UTIL**"), and ``--watch`` output (the "'CTRL' + 'C'"
    line, a TIMESTAMP column, the header repeated per sample, the PROCESS INFO table, which is
    skipped). Rows are keyed by the header above them; a row whose cells do not match it is
    skipped. Raises ParseError when no header line names a GPU column."""
    require_text(text, "amd-smi monitor")
    result: List[MonitorRow] = []
    names: Optional[List[str]] = None
    seen = False
    for line in lines_of(text):
        if is_noise(line):
            continue
        header = _monitor_header(line)
        if header is not None:
            seen = True
            names = None if "PID" in header else header  # the process table of `monitor -q`
            continue
        row = _monitor_row(names, line) if names else None
        if row is not None:
            result.append(row)
    if not seen and WATCH_BANNER not in text:  # a watch stopped before its first sample printed nothing else
        raise ParseError("not amd-smi monitor output: no header line with a GPU column")
    return result


def _tables(text: str) -> Dict[str, List[Dict[str, str]]]:
    """Every left-aligned table in ``text`` as {title: rows}; {} when there is none."""
    tables: Dict[str, List[Dict[str, str]]] = {}
    title = ""
    block: List[str] = []
    for line in lines_of(text) + [""]:
        stripped = line.strip()
        if stripped and is_noise(line):
            continue  # a prompt line or '...' between tables
        if block and stripped:
            block.append(line)  # a row, however few cells it fills
        elif block:
            tables[title] = aligned_rows(block[0], block[1:])
            title, block = "", []
        elif stripped.endswith(":") and "  " not in stripped:
            title = stripped[:-1]
        elif "  " in stripped:
            block.append(line)  # a header: two or more names two spaces apart
    return tables


def parse_amdsmi_tables(text: str) -> Dict[str, List[Dict[str, str]]]:
    """Parse left-aligned tables, each optionally titled by a "NAME:" line and separated by blank
    lines (``amd-smi partition``, ``ras --cper``). Returns {title: rows}; an untitled table is
    keyed "". Rows are keyed by header name, so any column subset and order reads the same; cells
    are as printed ("" in continuation rows). Lines before a table without two-space gaps
    (warnings, legends) and shell prompt lines are ignored. Raises ParseError without a table."""
    require_text(text, "amd-smi")
    tables = _tables(text)
    if not tables:
        raise ParseError("no aligned table found in amd-smi output")
    return tables


@dataclass
class AcceleratorProfile:
    """One row of ``amd-smi partition``'s ACCELERATOR_PARTITION_PROFILES ('*' marks the current)."""

    gpu: int
    index: int
    accelerator_type: str
    current: bool = False
    num_partitions: Optional[int] = None
    resources: List[Dict[str, str]] = field(default_factory=list)


@dataclass
class SmiPartitions:
    """``amd-smi partition``: current modes per GPU, the accelerator profiles, and every table.

    ``note`` is "no partition data" when the tool printed no table at all, as the GIM host's
    amd-smi does for ``partition --accelerator`` and ``--memory`` (only an empty line)."""

    current: Dict[int, Dict[str, str]] = field(default_factory=dict)
    profiles: List[AcceleratorProfile] = field(default_factory=list)
    tables: Dict[str, List[Dict[str, str]]] = field(default_factory=dict)
    note: Optional[str] = None

    @property
    def empty(self) -> bool:
        return not self.tables

    def compute_partition(self, gpu: int = 0) -> Optional[str]:
        found = self.current.get(gpu, {}).get("ACCELERATOR_TYPE")
        if not found:  # `partition --accelerator`: the profile marked '*'
            found = next((p.accelerator_type for p in self.profiles if p.gpu == gpu and p.current), None)
        return None if is_na(found) else found

    def memory_partition(self, gpu: int = 0) -> Optional[str]:
        found = self.current.get(gpu, {}).get("MEMORY")
        if not found:  # `partition --memory`
            found = next((row.get("CURRENT_MEMORY_PARTITION") for row in self.tables.get("MEMORY_PARTITION", [])
                          if parse_int(row.get("GPU_ID")) == gpu), None)
        return None if is_na(found) else found


def _profiles(rows: List[Dict[str, str]]) -> List[AcceleratorProfile]:
    profiles: List[AcceleratorProfile] = []
    gpu = 0
    for row in rows:
        listed = parse_int(row.get("GPU_ID"))
        gpu = gpu if listed is None else listed
        index = parse_int(row.get("PROFILE_INDEX"))
        kind = row.get("ACCELERATOR_TYPE", "")
        if index is not None:  # a profile row; rows with an empty index continue its resources
            profiles.append(AcceleratorProfile(gpu=gpu or 0, index=index, accelerator_type=kind.rstrip("*"),
                                               current=kind.endswith("*"),
                                               num_partitions=parse_int(row.get("NUM_PARTITIONS"))))
        if profiles and row.get("RESOURCE_TYPE"):
            keys = ("RESOURCE_INDEX", "RESOURCE_TYPE", "RESOURCE_INSTANCES", "RESOURCES_SHARED")
            profiles[-1].resources.append({key: row.get(key, "") for key in keys})
    return profiles


PARTITION_TABLES = ("CURRENT_PARTITION", "MEMORY_PARTITION", "ACCELERATOR_PARTITION_PROFILES",
                    "ACCELERATOR_PARTITION_RESOURCES")
NO_PARTITION_DATA = "no partition data"


def parse_amdsmi_partition(text: str) -> SmiPartitions:
    """Parse ``amd-smi partition`` and its ``--current``, ``--memory`` and ``--accelerator`` forms
    (any of the CURRENT_PARTITION, MEMORY_PARTITION, ACCELERATOR_PARTITION_PROFILES and _RESOURCES
    tables). Output with no table at all (nothing, or an empty line between prompt lines: the GIM
    host's amd-smi) gives an empty result with ``note`` "no partition data". Raises ParseError
    only for text that holds something else."""
    text = text or ""
    if all(is_noise(line) for line in lines_of(text)):
        return SmiPartitions(note=NO_PARTITION_DATA)
    tables = _tables(text)
    if not any(name in tables for name in PARTITION_TABLES):
        raise ParseError("not amd-smi partition output: no %s table" % " / ".join(PARTITION_TABLES[:3]))
    result = SmiPartitions(tables=tables)
    for row in tables.get("CURRENT_PARTITION", []):
        gpu = parse_int(row.get("GPU_ID"))
        if gpu is not None:
            result.current[gpu] = row
    result.profiles = _profiles(tables.get("ACCELERATOR_PARTITION_PROFILES", []))
    return result


def parse_amdsmi_fragment(text: str) -> Dict[str, Any]:
    """Parse a block fragment that has no "GPU: N" header (a cut ``metric`` or ``process`` record)
    as a dict with lower-case keys (see blocks.to_dict). Raises ParseError when no key is found."""
    data = to_dict(parse_blocks(require_text(text, "amd-smi")))
    if not data:
        raise ParseError("no 'KEY: value' lines found in amd-smi output")
    return data


def clock_mhz(value: Any) -> Optional[float]:
    """MHz from "131 MHz", "1300Mhz" or "2.1 GHz"; None otherwise."""
    quantity = parse_quantity(value)
    if quantity is None:
        return None
    unit = quantity.unit.lower()
    if unit in ("mhz", ""):
        return quantity.value
    return quantity.value * 1000.0 if unit == "ghz" else None
