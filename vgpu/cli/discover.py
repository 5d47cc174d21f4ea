"""`vgpu discover`: what AMD Instinct GPUs this host has, and whether it is ready."""

from __future__ import annotations

import click

from vgpu.cli.common import host_options, open_host


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the inventory as JSON (schema vgpu.inventory/v2).")
@click.option("--source", type=click.Choice(["auto", "udev", "sysfs"]), default="auto", show_default=True,
              help="Enumerate through libudev or by reading sysfs directly.")
@host_options
def discover(as_json: bool, source: str, host) -> None:
    """List MI300-family PFs and VFs: drivers, NUMA, IOMMU groups, BARs, partitions, readiness."""
    with open_host(host) as target:
        inv = target.discover(source)
    if as_json:
        from vgpu.cli.render import print_json
        print_json(inv.to_dict())
        return
    from vgpu.cli.render import console, findings_table, inventory_table, shared_groups_table
    out = console()
    out.print(inventory_table(inv, width=out.width))
    shared = shared_groups_table(inv)
    if shared is not None:
        out.print(shared)
    problems = findings_table(inv, verbose=False)
    # nothing to fix (an ESXi host often): the passed checks then, never an empty table
    out.print(problems if problems.row_count else findings_table(inv))
