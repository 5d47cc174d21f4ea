"""`vgpu profiles list|show|validate|schema`: the shipped profiles, a resolved profile, checks, JSON schema."""

from __future__ import annotations

import json

import click

from vgpu.errors import ExitCode


@click.group()
def profiles() -> None:
    """Profiles: the desired state of a host's GPUs and VMs (docs/profiles.md)."""


@profiles.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="Print the shipped profiles, resolved, as JSON (schema vgpu.profile-list/v1).")
def list_cmd(as_json: bool) -> None:
    """The shipped profiles: model, mode, VFs, partitions, hypervisor and AMD's support level."""
    from vgpu.profiles import list_profiles

    found = list_profiles()
    if as_json:
        from vgpu.cli.render import print_json
        print_json({"schema": "vgpu.profile-list/v1",  # vgpu/schemas/profile-list-v1.json
                    "profiles": [{**p.to_dict(), "support": p.support.value, "warnings": p.warnings()}
                                 for p in found]})
        return
    from vgpu.cli.render import add_row, console, table

    rows = table("Shipped profiles", ("name", "model", "mode", "VFs/GPU", "partitions", "hypervisor", "support"))
    for p in found:
        combo = p.combo
        parts = f"{combo.compute.value}/{combo.memory.value}" if combo else "-"
        add_row(rows, p.name, p.gpu.model, p.gpu.mode.value, p.gpu.vfs_per_gpu or "-", parts, p.hypervisor.value,
                p.support.value)
    out = console()
    if not out.is_terminal:
        out.width = 120  # piped or captured: do not squeeze the table to the 80-column fallback
    out.print(rows)


@profiles.command()
@click.argument("ref", metavar="NAME|FILE")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def show(ref: str, as_json: bool) -> None:
    """Print a profile with `extends` resolved and defaults filled in; warnings go to stderr."""
    from vgpu.cli.render import safe
    from vgpu.profiles import dump_profile, load_profile

    profile = load_profile(ref)
    if as_json:
        click.echo(json.dumps(profile.to_dict(), indent=2))
    else:
        click.echo(safe(f"# {profile.name}: resolved from {' <- '.join(profile.lineage)}", markup=False))
        click.echo(dump_profile(profile), nl=False)  # YAML with allow_unicode=False: controls are escaped
        _print_thresholds(profile)
    for warning in profile.warnings():
        click.echo(safe(f"warning: {profile.name}: {warning}", markup=False), err=True)


def _print_thresholds(profile) -> None:  # noqa: ANN001
    """The guest-validation thresholds that apply, as YAML comments (the output still loads back)."""
    from vgpu.cli.render import safe
    from vgpu.guest.thresholds import describe, for_profile

    click.echo("# guest validation thresholds (vgpu/guest/data/gemm-thresholds.yaml, docs/agent.md):")
    for line in describe(for_profile(profile)):
        click.echo(safe(f"#   {line}", markup=False))


@profiles.command()
@click.argument("refs", nargs=-1, required=True, metavar="FILE...")
@click.pass_context
def validate(ctx: click.Context, refs: tuple[str, ...]) -> None:
    """Check profile files (or shipped names): one line per problem; exit 5 when any is invalid."""
    from vgpu.cli.render import safe
    from vgpu.profiles import ProfileError, load_profile

    failed = False
    for ref in refs:
        try:
            profile = load_profile(ref)
        except ProfileError as exc:
            failed = True
            for line in exc.problems:
                click.echo(safe(f"invalid: {line}", markup=False))
            continue
        click.echo(safe(f"ok: {ref} ({profile.name}, {profile.support.value})", markup=False))
        for warning in profile.warnings():
            click.echo(safe(f"warning: {ref}: {warning}", markup=False))
    if failed:
        ctx.exit(ExitCode.BAD_INPUT)


@profiles.command()
def schema() -> None:
    """Print the JSON schema of profile files, for editors (also in vgpu/schemas/profile-v1.json)."""
    from vgpu.profiles import schema_text

    click.echo(schema_text(), nl=False)
