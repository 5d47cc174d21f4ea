"""Parser for ``hipblaslt-bench`` output: the banner (version, device) and every result block.

A result block is a CSV header line ("[0]:transA,transB,..." or, in older builds, "transA,transB,...")
followed by one values line (printed indented), optionally followed by "--Solution index:",
"--Solution name:" and "--kernel name:" lines with --print_kernel_info. Columns vary with flags
(-v adds CPU-Gflops,CPU-us,norm_error,atol,rtol; HIPBLASLT_BENCH_FREQ adds frequency columns), so
rows are dicts keyed by the header. Source: ROCm/hipBLASLt README ("hipblaslt-bench"). Standard
library only, Python 3.8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .common import ParseError, first, is_noise, lines_of, parse_float, parse_int, parse_scalar, require_text

# A result header: "[0]:" (newer builds) and comma-separated column names, among them transA or
# hipblaslt-Gflops (the columns present and their order vary with the flags and the build).
_HEADER = re.compile(r"^\s*(?:\[(\d+)\]:)?([A-Za-z][\w\-/%.]*(?:,[A-Za-z][\w\-/%.]*)+)$")
_HEADER_NAMES = ("transA", "hipblaslt-Gflops")
_INFO = re.compile(r"^\s*--(Solution index|Solution name|kernel name):\s*(.*)$")
_DEVICE = re.compile(r"^Device ID (\d+)\s*:\s*(.*?)\s+(gfx[0-9a-fA-F]+)(\S*)\s*$")
# "Query device success: there are 8 devices. (Target device ID is 0)"
_QUERY = re.compile(r"^Query device success: there (?:are|is) (\d+) devices?\.?\s*"
                    r"(?:\(Target device ID is (\d+)\))?", re.I)
# "with 270.6 GB memory, max. SCLK 2200 MHz, max. MCLK 1900 MHz, compute capability 9.5"
_MEMORY = re.compile(r"^with ([\d.]+) GB memory")
_CLOCK = re.compile(r"max\. (SCLK|MCLK) (\d+(?:\.\d+)?) MHz")
_CAPABILITY = re.compile(r"compute capability (\d+\.\d+)")


@dataclass
class GemmRow:
    """One result row. ``values`` maps each header column to an int, float, str or None (N/A)."""

    index: int
    values: Dict[str, Any] = field(default_factory=dict)
    solution_index: Optional[int] = None
    solution_name: Optional[str] = None
    kernel_name: Optional[str] = None

    def number(self, column: str) -> Optional[float]:
        return parse_float(self.values.get(column))

    @property
    def gflops(self) -> Optional[float]:
        return self.number("hipblaslt-Gflops")

    @property
    def tflops(self) -> Optional[float]:
        gflops = self.gflops
        return None if gflops is None else gflops / 1000.0

    @property
    def gbps(self) -> Optional[float]:
        return self.number("hipblaslt-GB/s")

    @property
    def us(self) -> Optional[float]:
        return self.number("us")

    @property
    def norm_error(self) -> Optional[float]:
        """hipBLASLt's norm error against its CPU reference (only with -v)."""
        return self.number("norm_error")

    @property
    def atol(self) -> Optional[float]:
        return self.number("atol")

    @property
    def rtol(self) -> Optional[float]:
        return self.number("rtol")

    @property
    def shape(self) -> Optional[tuple]:
        """(m, n, k) or None."""
        dims = tuple(parse_int(self.values.get(key)) for key in ("m", "n", "k"))
        return None if None in dims else dims


@dataclass
class HipblasltRun:
    """A hipblaslt-bench run. ``rows`` is empty when it printed its banner but no result."""

    version: Optional[str] = None
    git_version: Optional[str] = None
    device_count: Optional[int] = None  # "there are 8 devices"
    target_device: Optional[int] = None  # "(Target device ID is 0)": the device the bench ran on
    device_id: Optional[int] = None  # "Device ID 0 : ..."
    device_name: Optional[str] = None
    gfx_target: Optional[str] = None
    memory_gb: Optional[float] = None
    max_sclk_mhz: Optional[float] = None
    max_mclk_mhz: Optional[float] = None
    compute_capability: Optional[str] = None
    banner: List[str] = field(default_factory=list)  # the banner lines as printed
    rows: List[GemmRow] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)

    @property
    def device_summary(self) -> str:
        """What the banner says about where the bench ran, for a report ("" without a banner):
        "device 0 of 8: AMD Instinct MI300X gfx942, max SCLK 2100 MHz, max MCLK 1300 MHz"."""
        parts = []
        device = first((self.target_device, self.device_id))
        if device is not None or self.device_count is not None:
            parts.append("device %s of %s" % ("?" if device is None else device,
                                              "?" if self.device_count is None else self.device_count))
        name = " ".join(v for v in (self.device_name, self.gfx_target) if v)
        clocks = ["max %s %g MHz" % (label, value) for label, value in
                  (("SCLK", self.max_sclk_mhz), ("MCLK", self.max_mclk_mhz)) if value is not None]
        head = ": ".join(p for p in (", ".join(parts), name) if p)
        return ", ".join(p for p in [head] + clocks if p)

    @property
    def best(self) -> Optional[GemmRow]:
        """The row with the highest hipblaslt-Gflops, or None."""
        rated = [row for row in self.rows if row.gflops is not None]
        return max(rated, key=lambda row: row.gflops) if rated else None


def _device_line(run: HipblasltRun, stripped: str) -> bool:
    query = _QUERY.match(stripped)
    device = _DEVICE.match(stripped)
    if query:
        run.device_count = int(query.group(1))
        run.target_device = int(query.group(2)) if query.group(2) else run.target_device
    elif device:
        run.device_id, run.device_name, run.gfx_target = int(device.group(1)), device.group(2), device.group(3)
    elif _MEMORY.match(stripped):
        run.memory_gb = parse_float(_MEMORY.match(stripped).group(1))
        clocks = {name: parse_float(value) for name, value in _CLOCK.findall(stripped)}
        run.max_sclk_mhz, run.max_mclk_mhz = clocks.get("SCLK"), clocks.get("MCLK")
        capability = _CAPABILITY.search(stripped)
        run.compute_capability = capability.group(1) if capability else None
    else:
        return stripped.startswith("maxGridDimX")
    return True


def _banner(run: HipblasltRun, line: str) -> bool:
    """Read one banner line into ``run``; False for any other line."""
    stripped = line.strip()
    if stripped.startswith("hipBLASLt version:"):
        run.version = stripped.split(":", 1)[1].strip()
    elif stripped.startswith("hipBLASLt git version:"):
        run.git_version = stripped.split(":", 1)[1].strip()
    elif not _device_line(run, stripped):
        return False
    run.banner.append(stripped)
    return True


def _row(index: int, header: List[str], line: str) -> Optional[GemmRow]:
    cells = line.strip().split(",")
    if len(cells) != len(header):
        return None
    return GemmRow(index=index, values={name: parse_scalar(cell) for name, cell in zip(header, cells)})


def parse_hipblaslt_bench(text: str) -> HipblasltRun:
    """Parse hipblaslt-bench stdout into a HipblasltRun: the banner (version, device count, the
    device the bench ran on, its name, gfx target, memory, max SCLK/MCLK) and one GemmRow per
    result block. Shell prompt lines and other lines around them are ignored.

    A values line whose cell count differs from its header (a cut output) is kept in ``skipped``.
    Raises ParseError for empty text or text with neither the hipBLASLt banner nor a result header.
    """
    require_text(text, "hipblaslt-bench")
    run = HipblasltRun()
    header: Optional[List[str]] = None
    index = 0
    recognised = False
    for line in lines_of(text):
        if is_noise(line):
            continue
        if _banner(run, line):
            recognised = True
            continue
        match = _HEADER.match(line)
        if match and any(name in match.group(2).split(",") for name in _HEADER_NAMES):
            recognised = True
            header = [name.strip() for name in match.group(2).split(",")]
            index = int(match.group(1) or len(run.rows))
            continue
        info = _INFO.match(line)
        if info and run.rows:
            _kernel_info(run.rows[-1], info.group(1), info.group(2).strip())
        elif header is not None and "," in line:
            row = _row(index, header, line)
            if row is None:
                run.skipped.append(line.strip())
            else:
                run.rows.append(row)
            header = None
    if not recognised:
        raise ParseError("not hipblaslt-bench output: no 'hipBLASLt version' banner or result header")
    return run


def _kernel_info(row: GemmRow, key: str, value: str) -> None:
    if key == "Solution index":
        row.solution_index = parse_int(value)
    elif key == "Solution name":
        row.solution_name = value
    else:
        row.kernel_name = value
