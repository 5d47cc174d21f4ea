"""Options every host-facing command shares, and where the host comes from.

A command runs against exactly one host: this machine (default), a simulated host
(``--simulate [MACHINE|FILE]``, persisted in ``--sim-dir`` / $VGPU_SIM_DIR / the user cache), a
captured sysfs tree (``--sysfs-root DIR``) or a snapshot archive (``--snapshot FILE``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from vgpu.host.paths import HostPaths
from vgpu.host.target import HostTarget

SIM_DEFAULT = "__default__"


def sim_dir_of(option: str | None, *, writable: bool = True) -> Path:
    """The simulator directory: ``--sim-dir``, else $VGPU_SIM_DIR (when set, even to ''), else
    ~/.cache/vgpu/sim. An empty value, ``/``, the home directory or a non-directory is refused
    (exit 5) by :func:`vgpu.sim.host.check_location` before anything reads or deletes it."""
    from vgpu.sim.host import check_location

    if option is None:
        option = os.environ.get("VGPU_SIM_DIR")
    if option is None:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        option = os.path.join(cache, "vgpu", "sim")
    return check_location(option, writable=writable)


def host_options(fn: Callable) -> Callable:
    """Add --simulate/--sim-dir/--sysfs-root/--snapshot to a click command."""
    options = [
        click.option("--simulate", "simulate", is_flag=False, flag_value=SIM_DEFAULT, default=None,
                     metavar="[MACHINE|FILE]",
                     help="Use a simulated host (default machine 8xmi300x, or a machine-spec YAML file)."),
        click.option("--sim-dir", default=None, metavar="DIR",
                     help="State directory of the simulated host (default $VGPU_SIM_DIR or ~/.cache/vgpu/sim)."),
        click.option("--sysfs-root", type=click.Path(path_type=Path), default=None,
                     help="Read a captured sysfs tree: DIR stands for /sys (read-only)."),
        # readable=False: vgpu.inputs checks the file (unreadable is exit 5 naming it, not click's 2)
        click.option("--snapshot", type=click.Path(path_type=Path, readable=False), default=None,
                     help="Read a snapshot from `vgpu host snapshot` (read-only)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@contextlib.contextmanager
def open_host(simulate: str | None, sim_dir: str | None, sysfs_root: Path | None,
              snapshot: Path | None) -> Iterator[HostTarget]:
    chosen = [n for n, v in (("--simulate", simulate), ("--sysfs-root", sysfs_root), ("--snapshot", snapshot))
              if v is not None]
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} cannot be combined: pick one host")
    if sim_dir is not None and simulate is None:
        raise click.UsageError("--sim-dir only makes sense with --simulate")
    if snapshot is not None:
        from vgpu.host.snapshot import open_snapshot
        with open_snapshot(snapshot) as paths:
            yield HostTarget(paths, read_only=True)
        return
    if sysfs_root is not None:
        yield HostTarget(HostPaths.for_sysfs_root(sysfs_root), read_only=True)
        return
    if simulate is not None:
        sim = open_sim(None if simulate == SIM_DEFAULT else simulate, sim_dir_of(sim_dir))
        yield HostTarget(HostPaths.under(sim.root, label=f"simulated {sim.machine.name}"), sim=sim)
        return
    yield HostTarget(HostPaths.system())


def open_sim(machine: str | None, state_dir: Path):
    """The persisted simulated host; built on first use or when another machine is asked for."""
    from vgpu.sim import SimHost

    if not SimHost.exists(state_dir):
        return SimHost.create(state_dir, machine=machine or "8xmi300x")
    host = SimHost.open(state_dir)
    if machine is not None and not host.is_machine(machine):
        from vgpu.cli.render import safe
        click.echo(safe(f"note: rebuilding the simulated host in {state_dir} as {machine}", markup=False), err=True)
        return SimHost.create(state_dir, machine=machine)
    return host
