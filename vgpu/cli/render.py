"""Human output: tables for inventories and findings (vgpu.cli.term). JSON output never passes through here.

Every string that comes from outside vgpu (a host name, a file's content, a driver or module name read from
sysfs, a VM name from libvirt, a process name, a profile field, a path, a guest's report) reaches the terminal
only through :func:`safe` or :func:`cell`: control characters become visible escapes and markup is shown
literally, so a crafted snapshot or report cannot restyle, move the cursor in, retitle or reorder what an
operator reviews.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING

from vgpu.cli.term import Cell, Console, Table, escape

if TYPE_CHECKING:
    from vgpu.model.inventory import Gpu, Inventory

_STYLE = {"ok": "green", "info": "cyan", "warning": "yellow", "error": "bold red"}  # by Severity value

# C0 controls (ESC, CR, BS, BEL, TAB, LF ...), DEL, C1 controls (CSI U+009B, OSC U+009D ...), bidi embeddings,
# overrides and isolates, directional marks and the Unicode line/paragraph separators; surrogates (a file name's
# bytes that are not UTF-8, which Python keeps as U+DC80-U+DCFF: written back raw, 0x9b is an 8-bit CSI, and a
# strict UTF-8 stdout cannot write them at all); invisible characters (zero-width space, non-joiner and
# joiner, word joiner, byte-order mark), which make "N<U+200B>PS1" look like the NPS1 an operator expects.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069"
                     "\ufeff\ud800-\udfff]")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    if 0xdc80 <= code <= 0xdcff:  # the byte os.fsdecode could not decode
        code -= 0xdc00
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text, markup: bool = True) -> str:
    """``text`` (anything; None becomes "-") made harmless for a terminal: every control character, DEL, C1
    code, bidi override/isolate/mark and line separator becomes a visible escape (ESC -> ``\\x1b``, U+202E ->
    ``\\u202e``).
    With ``markup`` (for strings printed as markup) ``[`` is escaped too, so ``[bold red]X[/]`` prints as
    written; without it (click.echo, table cells) the text is otherwise left as is."""
    text = _UNSAFE.sub(_visible, "-" if text is None else str(text))
    return escape(text) if markup else text


def cell(value, style: str | None = None) -> Cell:
    """A table cell from outside data: the safe text, never parsed as markup."""
    return Cell(safe(value, markup=False), style or "")


def console(err: bool = False) -> Console:
    """Standard output (standard error with ``err``) for styled lines and tables."""
    return Console(stderr=err)


def live_console(err: bool = True):
    """A rich console for what redraws in place (live views); they draw :func:`table` tables too."""
    from rich.console import Console as RichConsole
    return RichConsole(stderr=err, highlight=False, soft_wrap=False)


def table(title: str | None, columns: tuple[str, ...], keep_whole: tuple[str, ...] = (),
          caption: str | None = None) -> Table:
    """A table whose title and caption are plain text (not markup) and whose cells wrap (long words fold)
    instead of ending in "…": nothing is cut off. Columns named in ``keep_whole`` (PCI addresses) are never
    wrapped or shortened."""
    t = Table(title=None if title is None else safe(title, markup=False), caption=caption)
    for name in columns:
        t.add_column(name, no_wrap=name in keep_whole)
    return t


def add_row(t: Table, *values, style: str | None = None) -> None:
    """Add a row of outside values (str, numbers, None, or cells already built by :func:`cell`)."""
    t.add_row(*(v if isinstance(v, Cell) else cell(v) for v in values), style=style)


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _group(gpu_or_vf, compact: bool = False) -> str:
    group = gpu_or_vf.iommu_group
    if group is None:
        return "-"
    extra = len(group.members) - 1
    if extra <= 0:
        return f"{group.number}"
    return f"{group.number} (+{extra})" if compact else f"{group.number} (+{extra} shared)"


def _partition(gpu: Gpu, compact: bool = False) -> str:
    p = gpu.partition
    if not (p.compute or p.memory):
        return "-"
    modes = f"{p.compute or '?'}/{p.memory or '?'}"
    return modes if compact else f"{modes} ({p.source})"


FULL_COLUMNS = ("function", "model", "id", "driver", "NUMA", "IOMMU group", "VFs", "partition", "64-bit BARs",
                "link")
COMPACT_COLUMNS = ("function", "model", "id", "driver", "NUMA", "group", "VFs", "partition")
COMPACT_NOTE = "narrow terminal: 64-bit BARs, link and partition source omitted (wider terminal or --json for all)"


def inventory_table(inv: Inventory, width: int | None = None) -> Table:
    """GPUs and their VFs, one row per function. The PCI address column is never shortened: when the full
    table does not fit ``width``, the compact one (without BARs and link) is used, whose caption says so."""
    full = _inventory_table(inv, compact=False)
    if width is None or full.natural_width() <= width:
        return full
    return _inventory_table(inv, compact=True)


def _inventory_table(inv: Inventory, compact: bool) -> Table:
    t = table(f"AMD Instinct GPUs on {inv.source}", COMPACT_COLUMNS if compact else FULL_COLUMNS,
              keep_whole=("function",), caption=COMPACT_NOTE if compact else None)
    for gpu in inv.gpus:
        vfs = f"{_num(gpu.num_vfs)}/{_num(gpu.total_vfs)}"
        row = [gpu.address, gpu.model, f"{gpu.device_id:04x}", gpu.driver, _num(gpu.numa_node),
               _group(gpu, compact), vfs, _partition(gpu, compact)]
        if not compact:
            link = f"{gpu.link.speed or '?'} x{gpu.link.width or '?'}" if gpu.link.speed or gpu.link.width else "-"
            row += [_size(gpu.bar64_bytes), link]
        add_row(t, *row)
        for vf in gpu.vfs:
            row = [f"└ {vf.address}", f"VF {vf.index}", f"{vf.device_id:04x}", vf.driver, _num(vf.numa_node),
                   _group(vf, compact), "", ""]
            add_row(t, *row, *(() if compact else ("", "")), style="dim")
    return t


def shared_groups_table(inv: Inventory) -> Table | None:
    rows = [(gpu, m) for gpu in inv.gpus if gpu.iommu_group for m in gpu.iommu_group.others(gpu.address)]
    if not rows:
        return None
    t = table("IOMMU groups shared with other devices (all members go to vfio-pci together)",
              ("GPU", "group", "member", "id", "driver"), keep_whole=("GPU", "member", "id"))
    for gpu, m in rows:
        add_row(t, gpu.address, gpu.iommu_group.number, m.address, f"{m.vendor:04x}:{m.device:04x}", m.driver)
    return t


def findings_table(inv: Inventory, verbose: bool = True) -> Table:
    t = table("Host readiness", ("", "check", "finding", "what to do"), keep_whole=("check",))
    for f in inv.findings:
        if f.severity.value == "ok" and not verbose:
            continue
        add_row(t, cell(f.severity.value, _STYLE[f.severity.value]), f.check, f.message, f.fix or "")
    return t


def _num(value) -> str:
    return "-" if value is None else str(value)
