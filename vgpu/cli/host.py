"""`vgpu host check` and `vgpu host snapshot`."""

from __future__ import annotations

import click

from vgpu.cli.common import host_options, open_host
from vgpu.errors import ExitCode

HOST_CHECK_SCHEMA = "vgpu.host-check/v1"  # vgpu/schemas/host-check-v1.json


@click.group()
def host() -> None:
    """Host readiness and support snapshots."""


@host.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON (schema vgpu.host-check/v1).")
@host_options(esxi=False)
def check(as_json: bool, host) -> int:
    """Check IOMMU, kernel command line, gim/vfio modules, drivers, hugepages. Exit 1 when not ready."""
    with open_host(host) as target:
        inv = target.discover()
    if as_json:
        from vgpu.cli.render import print_json
        doc = inv.to_dict()  # its own schema: this is not an inventory (no gpus, no host), docs/inventory-schema.md
        print_json({"schema": HOST_CHECK_SCHEMA, "source": doc["source"], "ready": doc["ready"],
                    "findings": doc["findings"]})
    else:
        from vgpu.cli.render import console, findings_table
        out = console()
        out.print(findings_table(inv))
        out.print("[green]host is ready[/]" if inv.ready else "[bold red]host is NOT ready[/]: fix the errors above")
    return ExitCode.OK if inv.ready else ExitCode.FAILURE


@host.command()
@click.option("-o", "--output", required=True, metavar="FILE|-",
              help="Where to write the snapshot (.tar.gz); - for standard output.")
@host_options(esxi=False)
def snapshot(output: str, host) -> None:
    """Capture the PCI/IOMMU/module subset of /sys, /proc/cmdline and modprobe.d for offline review."""
    from vgpu.cli.output import write_output
    from vgpu.host.snapshot import capture
    from vgpu.inputs import output_target

    target = output_target(output, "snapshot output")  # checked before the host is read
    with open_host(host) as host_target:
        data, manifest = capture(host_target.paths)
    write_output(target, data, "snapshot output", mode=0o600, text=False)  # it describes the host: owner only
    if target is not None:
        from vgpu.cli.render import safe
        out = safe(target, markup=False)
        click.echo(f"wrote {out} ({safe(manifest['source'], markup=False)}); "
                   f"replay with `vgpu discover --snapshot {out}`", err=True)
