"""`vgpu sim`: manage the persisted simulated host used by --simulate."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from vgpu.cli.common import SIM_DEFAULT, open_sim, sim_dir_of


@click.group()
def sim() -> None:
    """The simulated host that --simulate commands share (state persists between commands)."""


@sim.command("machines")
def machines() -> None:
    """List the simulated machines shipped with vgpu."""
    from vgpu.cli.render import add_row, console, table
    from vgpu.sim import list_machines

    rows = table("Simulated machines (vgpu ... --simulate NAME)", ("name", "description"))
    for name, description in list_machines():
        add_row(rows, name, description)
    console().print(rows)


@sim.command("reset")
@click.option("--machine", default="8xmi300x", show_default=True, metavar="NAME|FILE",
              help="Machine to build: a shipped name or a machine-spec YAML file.")
@click.option("--sim-dir", default=None, metavar="DIR",
              help="State directory (default $VGPU_SIM_DIR or ~/.cache/vgpu/sim).")
def reset(machine: str, sim_dir: str | None) -> None:
    """Rebuild the simulated host from scratch (forgets everything provisioned on it)."""
    from vgpu.sim import SimHost, load_spec

    state = sim_dir_of(sim_dir)
    load_spec(machine)  # validate before deleting anything
    host = SimHost.create(state, machine=machine)
    from vgpu.cli.render import safe
    click.echo(safe(f"simulated host {host.machine.name} ready in {state}", markup=False))


@sim.command("path")
@click.option("--sim-dir", default=None, metavar="DIR")
def path(sim_dir: str | None) -> None:
    """Print where the simulated host lives (its sysfs is under ROOT/sys)."""
    click.echo(str(sim_dir_of(sim_dir, writable=False)))


@sim.command("remove")
@click.option("--sim-dir", default=None, metavar="DIR")
def remove(sim_dir: str | None) -> None:
    """Delete the simulated host's state directory."""
    from vgpu.errors import InputError
    from vgpu.sim import SimHost
    from vgpu.sim.host import MARKER

    state = sim_dir_of(sim_dir)
    if not state.exists():
        click.echo(f"nothing to remove at {state}")
        return
    if not SimHost.exists(state):  # never rmtree a directory without vgpu's marker
        raise InputError(f"refusing to delete {state}: it has no {MARKER} marker, so it is not a simulated "
                         "host vgpu made")
    shutil.rmtree(state)
    click.echo(f"removed {state}")


@sim.command("vm")
@click.argument("names", nargs=-1, required=True)
@click.option("--running", is_flag=True, help="Start them (a running VM holds its devices).")
@click.option("--simulate", "machine", is_flag=False, flag_value=SIM_DEFAULT, default=None, metavar="[MACHINE|FILE]",
              help="As with every host command: the simulated host (built on first use, default machine "
                   "8xmi300x); without it the host must exist already.")
@click.option("--sim-dir", default=None, metavar="DIR",
              help="State directory of the simulated host (default $VGPU_SIM_DIR or ~/.cache/vgpu/sim).")
def vm(names: tuple[str, ...], running: bool, machine: str | None, sim_dir: str | None) -> None:
    """Define VMs (q35, UEFI, no GPU yet) in the simulated host's libvirt, as `virsh define` would;
    `vgpu provision` then attaches the profile's functions to those that are shut off."""
    from vgpu.errors import InputError
    from vgpu.hypervisor.sim import SimHypervisor
    from vgpu.model.profile_assign import safe_name
    from vgpu.sim import SimHost
    from vgpu.vms import sim_hypervisor_dir

    state = sim_dir_of(sim_dir)
    if machine is not None:  # the same host `provision --simulate [MACHINE]` works on
        host = open_sim(None if machine == SIM_DEFAULT else machine, state)
    elif not SimHost.exists(state):
        from vgpu.sim.host import MARKER
        raise InputError(f"no simulated host in {state} (no {MARKER} marker)",
                         hint="create one with `vgpu sim reset`, or give --simulate")
    else:
        host = SimHost.open(state)
    hv = SimHypervisor(sim_hypervisor_dir(host.root))
    existing = {d.name for d in hv.domains()}
    for name in names:
        try:
            safe_name(name, "VM name")
        except ValueError as exc:
            raise InputError(str(exc)) from None
        if name in existing:
            raise InputError(f"VM {name} is already defined on the simulated host")
    for name in names:
        hv.define_domain(name, running=running)
        click.echo(f"defined VM {name} ({'running' if running else 'shut off'})")



@sim.command("esxi")
@click.option("--dir", "workdir", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Where to write how to reach it: esxi.env, ca.pem, password (0600), the log.")
@click.option("--machine", default="8xmi300x", show_default=True, metavar="NAME|FILE",
              help="The machine spec whose PCI devices the host has (the same specs as --simulate).")
@click.option("--vm", "vms", multiple=True, metavar="NAME", help="A powered-off VM to create (repeat).")
def esxi(workdir: str, machine: str, vms: tuple[str, ...]) -> None:
    """Serve a simulated ESXi 8 host (the vSphere API over HTTPS) until interrupted.

    It is govmomi's vSphere simulator extended for DirectPath I/O (tools/vcsim/main.go), so it runs from a
    vgpu checkout with Go and golang-github-vmware-govmomi-dev installed. Point vgpu at it with
    `--esxi URL --esxi-ca DIR/ca.pem --esxi-password-file DIR/password` (DIR/esxi.env has the values).
    """
    import os
    import secrets
    import signal
    import threading

    from vgpu.fsutil import absolute, atomic_write
    from vgpu.sim.vcsim import EsxiSpec, Vcsim, VmSpec

    work = absolute(workdir)  # the "reach it with" paths work when pasted in another directory
    work.mkdir(parents=True, exist_ok=True)
    spec = EsxiSpec(machine=machine, vms=[VmSpec(v) for v in vms], password=secrets.token_urlsafe(18))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with Vcsim(spec, work) as server:
        atomic_write(work / "password", spec.password + "\n", 0o600)
        atomic_write(work / "ca.pem", server.ca_file.read_bytes(), 0o644)
        atomic_write(work / "esxi.env", f"VGPU_ESXI_URL={server.url}\nVGPU_ESXI_USER={spec.user}\n"
                     f"VGPU_ESXI_THUMBPRINT={server.thumbprint}\n", 0o644)
        click.echo(f"simulated ESXi 8 host {spec.name} at {server.url} (pid {os.getpid()}); "
                   f"reach it with --esxi {server.url} --esxi-user {spec.user} --esxi-ca {work / 'ca.pem'} "
                   f"--esxi-password-file {work / 'password'}", err=True)
        stop.wait()


@sim.group("fleet")
def fleet() -> None:
    """A simulated fleet for `vgpu rollout`: KVM hosts and one guest each behind a real sshd (docs/rollout.md)."""


@fleet.command("create")
@click.option("--dir", "workdir", required=True, type=click.Path(path_type=Path), metavar="DIR",
              help="The fleet's directory (replaced when vgpu made it, refused otherwise).")
@click.option("--hosts", default=3, show_default=True, type=int, help="How many KVM hosts (one guest each).")
@click.option("--machine", default="8xmi300x", show_default=True, metavar="NAME|FILE", help="Each host's machine.")
@click.option("--scenario", "scenarios", multiple=True, metavar="GUEST=SCENARIO",
              help="A guest's scenario (repeat; default healthy; e.g. vm-2=slow for a wave that fails).")
def fleet_create(workdir: Path, hosts: int, machine: str, scenarios: tuple[str, ...]) -> None:
    """Build the hosts and guests, start the guests' sshd, write DIR/inventory.yml."""
    from vgpu.cli.render import safe
    from vgpu.errors import InputError
    from vgpu.sim.fleet import create

    pairs = {}
    for item in scenarios:
        guest, sep, scenario = item.partition("=")
        if not sep:
            raise InputError(f"--scenario {item[:60]!r}: expected GUEST=SCENARIO, e.g. vm-2=slow")
        pairs[guest] = scenario
    inventory = create(workdir, hosts=hosts, machine=machine, scenarios=pairs)
    click.echo(safe(f"simulated fleet of {hosts} hosts ready: inventory {inventory}; stop its sshd with "
                    f"vgpu sim fleet stop --dir {workdir}", markup=False))


@fleet.command("guest")
@click.option("--dir", "workdir", required=True, type=click.Path(path_type=Path), metavar="DIR")
@click.argument("guest")
@click.argument("scenario")
def fleet_guest(workdir: Path, guest: str, scenario: str) -> None:
    """Give GUEST another SCENARIO (healthy, slow, ...: vgpu validate --help)."""
    from vgpu.sim.fleet import set_scenario

    set_scenario(workdir, guest, scenario)
    click.echo(f"{guest}: {scenario}")


@fleet.command("stop")
@click.option("--dir", "workdir", required=True, type=click.Path(path_type=Path), metavar="DIR")
def fleet_stop(workdir: Path) -> None:
    """Stop the fleet's sshd (the files stay)."""
    from vgpu.sim.fleet import check_dir, stop

    stopped = stop(check_dir(workdir, existing=True))
    click.echo("stopped" if stopped else "not running")
