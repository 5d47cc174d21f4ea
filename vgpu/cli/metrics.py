"""`vgpu metrics`: the host and its guests' last validation as Prometheus metrics."""

from __future__ import annotations

from pathlib import Path

import click

from vgpu.cli.common import host_options, open_host


@click.command()
@click.option("--report", "reports", multiple=True, type=click.Path(path_type=Path, readable=False),
              metavar="FILE|DIR", help="A validation report (JSON, a --report-dir, or a roll-out's --state-dir: "
                                       "every wave's); the newest per guest counts. Repeat for several.")
@click.option("--textfile", default="-", metavar="FILE|-", show_default=True,
              help="Write here atomically (node_exporter's --collector.textfile.directory, a *.prom file); "
                   "- for standard output.")
@host_options
def metrics(reports: tuple[Path, ...], textfile: str, host) -> None:
    """Per GPU its mode and VFs, per function the VM holding it, drift from the recorded profile, and
    per guest its last validation (verdict, time, FP8 TFLOPS), in the Prometheus text format (docs/metrics.md)."""
    from vgpu.cli.output import write_output
    from vgpu.cli.render import safe
    from vgpu.inputs import output_target
    from vgpu.metrics import registry, render, report_files
    from vgpu.planner import Refusal

    target_path = output_target(textfile, "metrics output")  # checked before anything is read
    if target_path is not None and not target_path.name.endswith(".prom"):
        click.echo(f"warning: {safe(target_path.name, markup=False)}: node_exporter's textfile collector reads "
                   "only *.prom files", err=True)
    loaded = []
    warnings: list[str] = []
    if reports:  # the report model and its readers only when there are reports to read
        from vgpu.guest.report.json import load
        for given in reports:
            files, warning = report_files(given)
            loaded += [load(p) for p in files]
            warnings += [warning] if warning else []
    with open_host(host) as target:
        inv = target.discover()
        domains = None if target.read_only else target.domains(warnings, inv)
        try:
            status = target.status(inv)  # the host read once: metrics describe one moment
        except Refusal as exc:  # the recorded profile no longer fits the host: that is drift too
            from vgpu.provision import StatusResult
            from vgpu.status import Item
            status = StatusResult(exc.profile, [Item("host", "recorded profile applies", "yes", "no")])
    for w in warnings:
        click.echo(f"warning: {safe(w, markup=False)}", err=True)
    write_output(target_path, render(registry(inv, domains, status, loaded)), "metrics output", mode=0o644)
