"""Human output: rich tables for inventories and findings. JSON output never passes through here."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from vgpu.model.inventory import Gpu, Inventory, Severity

_STYLE = {Severity.OK: "green", Severity.INFO: "cyan", Severity.WARNING: "yellow", Severity.ERROR: "bold red"}


def console(err: bool = False) -> Console:
    return Console(stderr=err, highlight=False, soft_wrap=False)


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _group(gpu_or_vf) -> str:
    group = gpu_or_vf.iommu_group
    if group is None:
        return "-"
    extra = len(group.members) - 1
    return f"{group.number}" + (f" (+{extra} shared)" if extra > 0 else "")


def _partition(gpu: Gpu) -> str:
    p = gpu.partition
    if not (p.compute or p.memory):
        return "-"
    return f"{p.compute or '?'}/{p.memory or '?'} ({p.source})"


def inventory_table(inv: Inventory) -> Table:
    table = Table(title=f"AMD Instinct GPUs on {inv.source}", title_justify="left")
    for col in ("function", "model", "id", "driver", "NUMA", "IOMMU group", "VFs", "partition", "64-bit BARs",
                "link"):
        table.add_column(col)
    for gpu in inv.gpus:
        vfs = f"{gpu.num_vfs if gpu.num_vfs is not None else '-'}/{gpu.total_vfs if gpu.total_vfs is not None else '-'}"
        link = f"{gpu.link.speed or '?'} x{gpu.link.width or '?'}" if gpu.link.speed or gpu.link.width else "-"
        table.add_row(str(gpu.address), gpu.model, f"{gpu.device_id:04x}", gpu.driver or "-",
                      _num(gpu.numa_node), _group(gpu), vfs, _partition(gpu), _size(gpu.bar64_bytes), link)
        for vf in gpu.vfs:
            table.add_row(f"  └ {vf.address}", f"VF {vf.index}", f"{vf.device_id:04x}", vf.driver or "-",
                          _num(vf.numa_node), _group(vf), "", "", "", "", style="dim")
    return table


def shared_groups_table(inv: Inventory) -> Table | None:
    rows = [(gpu, m) for gpu in inv.gpus if gpu.iommu_group for m in gpu.iommu_group.others(gpu.address)]
    if not rows:
        return None
    table = Table(title="IOMMU groups shared with other devices (all members go to vfio-pci together)",
                  title_justify="left")
    for col in ("GPU", "group", "member", "id", "driver"):
        table.add_column(col)
    for gpu, m in rows:
        table.add_row(str(gpu.address), str(gpu.iommu_group.number), str(m.address),
                      f"{m.vendor:04x}:{m.device:04x}", m.driver or "-")
    return table


def findings_table(inv: Inventory, verbose: bool = True) -> Table:
    table = Table(title="Host readiness", title_justify="left")
    for col in ("", "check", "finding", "what to do"):
        table.add_column(col)
    for f in inv.findings:
        if f.severity is Severity.OK and not verbose:
            continue
        table.add_row(f"[{_STYLE[f.severity]}]{f.severity.value}[/]", f.check, f.message, f.fix or "")
    return table


def _num(value) -> str:
    return "-" if value is None else str(value)
