"""`vgpu host check` and `vgpu host snapshot`."""

from __future__ import annotations

from pathlib import Path

import click

from vgpu.cli.common import host_options, open_host
from vgpu.errors import ExitCode


@click.group()
def host() -> None:
    """Host readiness and support snapshots."""


@host.command()
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
@host_options
def check(as_json: bool, simulate, sim_dir, sysfs_root, snapshot) -> int:
    """Check IOMMU, kernel command line, gim/vfio modules, drivers, hugepages. Exit 1 when not ready."""
    from vgpu.host.discovery import discover

    with open_host(simulate, sim_dir, sysfs_root, snapshot) as target:
        inv = discover(target.paths)
    if as_json:
        from vgpu.cli.render import print_json
        doc = inv.to_dict()
        print_json({"schema": doc["schema"], "source": doc["source"], "ready": doc["ready"],
                    "findings": doc["findings"]})
    else:
        from vgpu.cli.render import console, findings_table
        out = console()
        out.print(findings_table(inv))
        out.print("[green]host is ready[/]" if inv.ready else "[bold red]host is NOT ready[/]: fix the errors above")
    return ExitCode.OK if inv.ready else ExitCode.FAILURE


@host.command()
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="Where to write the snapshot (.tar.gz).")
@host_options
def snapshot(output: Path, simulate, sim_dir, sysfs_root, snapshot) -> None:
    """Capture the PCI/IOMMU/module subset of /sys, /proc/cmdline and modprobe.d for offline review."""
    from vgpu.host.snapshot import capture

    with open_host(simulate, sim_dir, sysfs_root, snapshot) as target:
        manifest = capture(target.paths, output)
    from vgpu.cli.render import safe
    out = safe(output, markup=False)
    click.echo(f"wrote {out} ({safe(manifest['source'], markup=False)}); replay with `vgpu discover --snapshot {out}`")
