"""Options every host-facing command shares, and where the host comes from.

A command runs against exactly one host: this machine (default), a simulated host
(``--simulate [MACHINE|FILE]``, persisted in ``--sim-dir`` / $VGPU_SIM_DIR / the user cache), a
captured sysfs tree (``--sysfs-root DIR``), a snapshot archive (``--snapshot FILE``), or a VMware
ESXi 8 host through the vSphere API (``--esxi URL``). Each is a vgpu.platform.Platform.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
from dataclasses import dataclass
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


@dataclass(frozen=True)
class HostChoice:
    """Which host a command works on, as the command line said (see ``host_options``)."""

    simulate: str | None = None
    sim_dir: str | None = None
    sysfs_root: Path | None = None
    snapshot: Path | None = None
    esxi: str | None = None
    esxi_user: str | None = None
    esxi_password_file: Path | None = None
    esxi_thumbprint: str | None = None
    esxi_ca: Path | None = None
    esxi_host: str | None = None
    insecure: bool = False


_ESXI_DETAILS = ("esxi_user", "esxi_password_file", "esxi_thumbprint", "esxi_ca", "esxi_host", "insecure")
_HOST_KEY = "vgpu.host"  # where host_options leaves the HostChoice in click's context (for next_command)


def host_argv(choice: HostChoice | None) -> list[str]:
    """The command-line options that name ``choice``'s host again: --simulate/--sim-dir, a capture, or --esxi
    with its user, password file, trust and host name. Never a password (it comes from a file or the
    environment), so a hint built from these can be shown and pasted safely."""
    if choice is None:
        return []
    argv: list[str] = []
    if choice.sim_dir is not None:
        argv += ["--sim-dir", choice.sim_dir]
    for flag, value in (("--sysfs-root", choice.sysfs_root), ("--snapshot", choice.snapshot),
                        ("--esxi", choice.esxi), ("--esxi-user", choice.esxi_user),
                        ("--esxi-password-file", choice.esxi_password_file),
                        ("--esxi-thumbprint", choice.esxi_thumbprint), ("--esxi-ca", choice.esxi_ca),
                        ("--esxi-host", choice.esxi_host)):
        if value is not None:
            argv += [flag, str(value)]
    if choice.insecure:
        argv.append("--insecure")
    if choice.simulate is not None:  # last: a bare --simulate takes no value
        argv += ["--simulate"] if choice.simulate == SIM_DEFAULT else ["--simulate", choice.simulate]
    return argv


def next_command(*args: str) -> str:
    """``vgpu ARGS`` followed by the host options of the command that is running, quoted for a POSIX shell:
    the one way every "next command" hint is written, so pasting it from a simulated or remote session
    works on the same host instead of this machine's."""
    ctx = click.get_current_context(silent=True)
    choice = ctx.meta.get(_HOST_KEY) if ctx is not None else None
    return shlex.join(["vgpu", *args, *host_argv(choice)])


def host_options(fn: Callable | None = None, *, esxi: bool = True) -> Callable:
    """Add the host options to a click command and hand it one ``host`` (a HostChoice):
    --simulate/--sim-dir/--sysfs-root/--snapshot, and with ``esxi`` the --esxi URL options."""
    if fn is None:
        return functools.partial(host_options, esxi=esxi)
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
    if esxi:
        options += [
            click.option("--esxi", "esxi", default=None, metavar="URL", envvar="VGPU_ESXI_URL",
                         help="Work on a VMware ESXi 8 host through the vSphere API (https://HOST[:PORT]); "
                              "password from $VGPU_ESXI_PASSWORD or --esxi-password-file."),
            click.option("--esxi-user", default=None, metavar="USER",
                         help="vSphere user (default $VGPU_ESXI_USER, else root)."),
            click.option("--esxi-password-file", type=click.Path(path_type=Path, readable=False), default=None,
                         metavar="FILE", help="Read the vSphere password from FILE (one line)."),
            click.option("--esxi-thumbprint", default=None, metavar="SHA256",
                         help="Trust exactly this certificate (SHA-256 fingerprint AA:BB:...) instead of CAs."),
            click.option("--esxi-ca", type=click.Path(path_type=Path, readable=False), default=None, metavar="FILE",
                         help="Verify the host's certificate against these CA certificates (PEM)."),
            click.option("--esxi-host", default=None, metavar="NAME",
                         help="The host to work on when --esxi is a vCenter that manages several."),
            click.option("--insecure", is_flag=True,
                         help="Do not verify the host's TLS certificate (test servers only; warns)."),
        ]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        fields = {f: kwargs.pop(f, None) for f in HostChoice.__dataclass_fields__}
        fields["insecure"] = bool(fields["insecure"])
        choice = HostChoice(**fields)
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            ctx.meta[_HOST_KEY] = choice
        return fn(*args, host=choice, **kwargs)
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


@contextlib.contextmanager
def open_host(choice: HostChoice, *, linux_only: bool = False) -> Iterator:
    """The host the command line chose, as a vgpu.platform.Platform."""
    chosen = [n for n, v in (("--simulate", choice.simulate), ("--sysfs-root", choice.sysfs_root),
                             ("--snapshot", choice.snapshot), ("--esxi", choice.esxi)) if v is not None]
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} cannot be combined: pick one host")
    if choice.sim_dir is not None and choice.simulate is None:
        raise click.UsageError("--sim-dir only makes sense with --simulate")
    given = [f"--{f.replace('_', '-')}" for f in _ESXI_DETAILS if getattr(choice, f)]
    if given and choice.esxi is None:
        raise click.UsageError(f"{', '.join(given)} only make(s) sense with --esxi URL")
    if choice.esxi is not None:
        if linux_only:
            raise click.UsageError("--esxi: this command reads a Linux host's sysfs; use `vgpu discover --esxi URL`")
        with _open_esxi(choice) as target:
            yield target
        return
    if choice.snapshot is not None:
        from vgpu.host.snapshot import open_snapshot
        with open_snapshot(choice.snapshot) as paths:
            yield HostTarget.capture(paths)
        return
    if choice.sysfs_root is not None:
        yield HostTarget.capture(HostPaths.for_sysfs_root(choice.sysfs_root))
        return
    if choice.simulate is not None:  # the one place the simulator enters: a host like any other
        sim = open_sim(None if choice.simulate == SIM_DEFAULT else choice.simulate, sim_dir_of(choice.sim_dir))
        yield sim.target()
        return
    yield HostTarget(HostPaths.system())


@contextlib.contextmanager
def _open_esxi(choice: HostChoice) -> Iterator:
    from vgpu.esxi.connect import connect, endpoint
    from vgpu.esxi.service import EsxiTarget

    ep = endpoint(choice.esxi, user=choice.esxi_user, password_file=choice.esxi_password_file,
                  thumbprint=choice.esxi_thumbprint, ca_file=choice.esxi_ca, insecure=choice.insecure,
                  host_name=choice.esxi_host)
    if ep.insecure:
        click.echo(f"warning: the TLS certificate of {ep.host} is not verified (--insecure): anyone on the path "
                   "can read the password", err=True)
    target = EsxiTarget(connect(ep))
    try:
        yield target
    finally:
        target.close()


def open_sim(machine: str | None, state_dir: Path):
    """The persisted simulated host; built on first use or when another machine is asked for."""
    from vgpu.sim import SimHost

    if not SimHost.exists(state_dir):
        return _build_sim(state_dir, machine or "8xmi300x", new=True)
    host = SimHost.open(state_dir)
    if machine is not None and not host.is_machine(machine):
        from vgpu.cli.render import safe
        click.echo(safe(f"note: rebuilding the simulated host in {state_dir} as {machine}", markup=False), err=True)
        return _build_sim(state_dir, machine, new=False)
    return host


def _build_sim(state_dir: Path, machine: str, *, new: bool):
    """SimHost.create, with a full disk or a read-only file system as one line (exit 5) instead of a traceback;
    a host that was new and is left half-built is removed (only it: it carries the marker this run wrote)."""
    import shutil

    from vgpu.inputs import write_error
    from vgpu.sim import SimHost

    try:
        return SimHost.create(state_dir, machine=machine)
    except OSError as exc:
        if new and SimHost.exists(state_dir):
            shutil.rmtree(state_dir, ignore_errors=True)
        raise write_error(exc, "simulated host", state_dir) from None
