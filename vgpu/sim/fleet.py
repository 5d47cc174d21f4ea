"""A simulated fleet for `vgpu rollout` on one machine: KVM hosts and their guests, reached as a real fleet is.

``vgpu sim fleet create --dir D --hosts N`` builds, under D:

- ``hosts/kvm-K``: a simulated host each (the 8x MI300X machine by default), provisioned by the provision role's
  module over Ansible's local connection (``provision_simulate`` with the host's ``provision_sim_dir``);
- ``guests/vm-K``: one simulated guest per host (vgpu.sim.guests: stand-in rocminfo, amd-smi, hipblaslt-bench...),
  each behind a real OpenSSH server on 127.0.0.1 with its own host key, key-only login and strict host-key
  checking (``known_hosts``); the guests share that sshd, told apart by their name and ``vgpu_guest_env``;
- ``inventory.yml``: hosts in ``gim_hosts``, guests in ``gpu_guests`` naming their host in ``vgpu_host``, and the
  variables the playbooks need, so `vgpu rollout run -i D/inventory.yml --profile mi300x-1vf --state-dir ...`
  runs with no ``-e``.

``vgpu sim fleet guest --dir D vm-2 slow`` gives a guest another scenario (a wave that fails); ``stop`` ends the
sshd. The simulated guests present one whole MI300X as a VF (SPX/NPS1): profile ``mi300x-1vf``.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from vgpu.errors import HostError, InputError
from vgpu.fsutil import absolute

MARKER = ".vgpu-fleet"
SSHD = "/usr/sbin/sshd"
MAX_HOSTS = 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vgpu-sim-fleet", "-f", str(path)],
                   check=True, capture_output=True)


def check_dir(d: Path, *, existing: bool) -> Path:
    """A fleet directory: one vgpu made (its marker), or for ``create`` a new or empty one; returned absolute
    (vgpu.fsutil.absolute): every path the fleet writes into its inventory, sshd_config and the guests'
    environment names the same file from any directory (sshd works from /, Ansible from its own)."""
    d = Path(d)
    if not str(d).strip() or d.resolve() in (Path("/"), Path.home().resolve(), Path.cwd().resolve()):
        raise InputError(f"fleet directory {str(d)!r}: give a directory of its own (e.g. .sim/fleet)")
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise InputError(f"fleet directory {d} is not a directory")
    if existing or (d.exists() and any(d.iterdir())):
        if not (d / MARKER).is_file():
            raise InputError(f"{d} is not a simulated fleet (no {MARKER}): vgpu will not "
                             + ("use" if existing else "replace") + " it",
                             hint="vgpu sim fleet create --dir NEW-DIR")
    return absolute(d)


def create(d: Path, *, hosts: int = 3, machine: str = "8xmi300x", scenarios: dict[str, str] | None = None) -> Path:
    """Build the fleet in ``d`` (replacing one vgpu built there) and start its sshd; returns the inventory."""
    import yaml

    from vgpu.sim import SimHost, load_spec
    from vgpu.sim.guests import SCENARIOS

    if not 1 <= hosts <= MAX_HOSTS:
        raise InputError(f"--hosts {hosts}: between 1 and {MAX_HOSTS}")
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        raise HostError("a simulated fleet needs OpenSSH's server (/usr/sbin/sshd) and ssh-keygen",
                        hint="apt-get install openssh-server openssh-client")
    names = [f"kvm-{i}" for i in range(1, hosts + 1)]
    guests = {f"vm-{i}": f"kvm-{i}" for i in range(1, hosts + 1)}
    scenarios = dict(scenarios or {})
    for guest, scenario in scenarios.items():
        if guest not in guests:
            raise InputError(f"--scenario {guest}: the fleet's guests are {', '.join(guests)}")
        if scenario not in SCENARIOS:
            raise InputError(f"--scenario {guest}={scenario}: known scenarios: {', '.join(SCENARIOS)}")
    load_spec(machine)
    d = check_dir(d, existing=False)
    if d.exists():
        stop(d)
        shutil.rmtree(d)
    d.mkdir(parents=True, mode=0o700)
    (d / MARKER).write_text("a simulated fleet made by vgpu sim fleet; vgpu replaces it\n")
    for name in names:
        SimHost.create(d / "hosts" / name, machine=machine)
    envs = {g: guest_env(d, g, scenarios.get(g, "healthy")) for g in guests}
    port = _start_sshd(d)
    vgpu = str(Path(sys.executable).parent / "vgpu")
    inventory = {"all": {
        "vars": {"ansible_become": False, "ansible_python_interpreter": sys.executable,
                 "provision_simulate": True, "provision_install": "none", "provision_executable": vgpu,
                 "validate_executable": vgpu, "validate_known_hosts": str(d / "known_hosts")},
        "children": {
            "gim_hosts": {"hosts": {h: {"ansible_connection": "local", "provision_sim_dir": str(d / "hosts" / h)}
                                    for h in names}},
            "gpu_guests": {
                "vars": {"ansible_user": getpass.getuser(), "ansible_ssh_private_key_file": str(d / "ssh" / "client"),
                         "ansible_host": "127.0.0.1", "ansible_port": port},
                "hosts": {g: {"vgpu_host": h, "vgpu_guest_env": envs[g]} for g, h in guests.items()}}}}}
    path = d / "inventory.yml"
    path.write_text("# vgpu sim fleet: simulated KVM hosts (local connection) and guests behind a real sshd\n"
                    + yaml.safe_dump(inventory, sort_keys=False, width=200))
    return path


def guest_env(d: Path, guest: str, scenario: str) -> dict[str, str]:
    from vgpu.sim.guests import sim_guest_env

    return sim_guest_env(d / "guests" / guest, scenario=scenario, hostname=guest)


def set_scenario(d: Path, guest: str, scenario: str) -> None:
    """Give one guest of the fleet another scenario (same paths: the inventory stays as it is)."""
    from vgpu.sim.guests import SCENARIOS

    d = check_dir(d, existing=True)
    if not (d / "guests" / guest).is_dir() or "/" in guest or guest.startswith("."):
        raise InputError(f"no guest {guest!r} in the fleet {d}")
    if scenario not in SCENARIOS:
        raise InputError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    guest_env(d, guest, scenario)


def _start_sshd(d: Path) -> int:
    ssh = d / "ssh"
    ssh.mkdir(mode=0o700)
    _keygen(ssh / "client")
    _keygen(ssh / "host_ed25519")
    (ssh / "authorized_keys").write_text((ssh / "client.pub").read_text())
    port = _free_port()
    (ssh / "sshd_config").write_text("\n".join([
        "ListenAddress 127.0.0.1", f"Port {port}", f"HostKey {ssh / 'host_ed25519'}", f"PidFile {ssh / 'sshd.pid'}",
        f"AuthorizedKeysFile {ssh / 'authorized_keys'}", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "PermitRootLogin prohibit-password",
        "UsePAM no", "StrictModes no", "MaxStartups 100:30:200", "MaxSessions 50", "LogLevel ERROR", ""]))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
    proc = subprocess.run([SSHD, "-f", str(ssh / "sshd_config"), "-E", str(ssh / "sshd.log")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise HostError(f"the fleet's sshd did not start: {(proc.stderr or proc.stdout).strip()[:300]}")
    deadline = time.monotonic() + 10
    while not (ssh / "sshd.pid").exists():
        if time.monotonic() > deadline:
            raise HostError(f"the fleet's sshd did not start (log: {ssh / 'sshd.log'})")
        time.sleep(0.02)
    key = (ssh / "host_ed25519.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {key[0]} {key[1]}\n")
    return port


def stop(d: Path) -> bool:
    """Stop the fleet's sshd; True when one was running."""
    d = absolute(d)  # as create() wrote it into the sshd's command line
    pidfile = d / "ssh" / "sshd.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if str(d / "ssh" / "sshd_config").encode() not in cmdline:  # a recycled pid: not ours
        return False
    os.kill(pid, signal.SIGTERM)
    pidfile.unlink(missing_ok=True)
    return True
