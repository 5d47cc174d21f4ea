#!/usr/bin/env python3
"""Real Debian 12 hosts for the Molecule scenarios: systemd-nspawn containers booted from the cached
root (tools/molecule/build-root.sh) through an overlay, each in its own network namespace on a bridge
on 10.77.0.0/24, reached over SSH with a generated key and strict host-key checking.

    hosts.py up   DIR NAME...   boot the hosts; print one JSON object per host (molecule instance config)
    hosts.py down DIR           stop them and remove every trace (netns, veths, bridge, mounts)

DIR holds everything of one scenario run: the SSH key, known_hosts, each host's overlay and logs. A reboot
inside a host (systemctl reboot, ansible.builtin.reboot) makes nspawn exit with 133; the loop that runs it
boots the host again, as a machine would.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BRIDGE = "vgpumol0"
GATEWAY = "10.77.0.1"
FIRST = 11  # host N gets 10.77.0.(FIRST + N)
ROOT = Path(os.environ.get("VGPU_MOLECULE_CACHE", "/var/cache/vgpu-molecule")) / "root"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def bridge_up() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")


def host_up(base: Path, index: int, name: str, pubkey: str) -> dict:
    ns, veth = f"vgpumol-{name}"[:15], f"vmol{index}{os.getpid() % 1000}"[:15]
    address = f"10.77.0.{FIRST + index}"
    hdir = base / name
    for d in ("upper", "work", "merged"):
        (hdir / d).mkdir(parents=True, exist_ok=True)
    if sh("ip", "netns", "pid", ns, check=False).returncode == 0 or Path(f"/run/netns/{ns}").exists():
        raise SystemExit(f"hosts.py: network namespace {ns} exists: another Molecule run holds 10.77.0.0/24")
    # recorded before anything is set up, so `down` removes a half-made host too
    (hdir / "netns").write_text(ns + "\n" + veth + "\n")
    sh("mount", "-t", "overlay", "overlay", "-o",
       f"lowerdir={ROOT},upperdir={hdir / 'upper'},workdir={hdir / 'work'}", str(hdir / "merged"))
    merged = hdir / "merged"
    (merged / "etc/hostname").write_text(name + "\n")
    ssh_dir = merged / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(pubkey)
    os.chmod(ssh_dir / "authorized_keys", 0o600)
    key = merged / "etc/ssh/ssh_host_ed25519_key"
    if not key.exists():
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key))
    # no distribution mirror is reachable from the test network: apt sees only the local repositories
    (merged / "etc/apt/sources.list").write_text("")
    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh("ip", "link", "set", veth, "master", BRIDGE, "up")
    sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", ns, "route", "add", "default", "via", GATEWAY)
    log = open(hdir / "console.log", "ab")
    loop = (f"while systemd-nspawn -q -b --keep-unit --register=no --network-namespace-path=/run/netns/{ns} "
            f"-M {name} -D {merged}; [ $? -eq 133 ]; do :; done; exit 0")
    proc = subprocess.Popen(["setsid", "sh", "-c", loop], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    (hdir / "pid").write_text(str(proc.pid))
    hostkey = (Path(str(key) + ".pub")).read_text().split()
    with open(base / "known_hosts", "a") as fh:
        fh.write(f"{address} {hostkey[0]} {hostkey[1]}\n")
    return {"instance": name, "address": address, "user": "root", "port": 22,
            "identity_file": str(base / "id_ed25519")}


def wait_ssh(address: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, 22), timeout=2) as s:
                if s.recv(4).startswith(b"SSH"):
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"hosts.py: {address} did not answer on port 22 within {timeout:.0f} s")


def up(base: Path, names: list[str]) -> None:
    if not (ROOT / "etc/os-release").exists():
        raise SystemExit(f"hosts.py: no root at {ROOT}: run tools/molecule/build-root.sh")
    base.mkdir(parents=True, exist_ok=True)
    if not (base / "id_ed25519").exists():
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vgpu-molecule", "-f", str(base / "id_ed25519"))
    pubkey = (base / "id_ed25519.pub").read_text()
    bridge_up()
    hosts = [host_up(base, i, n, pubkey) for i, n in enumerate(names)]
    for h in hosts:
        wait_ssh(h["address"])
    json.dump(hosts, sys.stdout)
    sys.stdout.write("\n")


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _rooted_in(root: Path) -> list[int]:
    pids = []
    for link in Path("/proc").glob("[0-9]*/root"):
        try:
            if os.readlink(link) == str(root):
                pids.append(int(link.parent.name))
        except OSError:
            continue
    return pids


def _wait(done, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        time.sleep(0.2)


def down(base: Path) -> None:
    failed: list[str] = []
    for hdir in sorted(p for p in base.iterdir() if (p / "netns").exists()) if base.is_dir() else []:
        name = hdir.name
        pid = int((hdir / "pid").read_text()) if (hdir / "pid").exists() else None
        if pid:
            # The loop's shell dies at once on SIGTERM; nspawn, in the same process group, powers the container
            # off and exits when it is down. Wait for the whole group, not the shell, or the SIGKILL below would
            # hit nspawn mid-shutdown and orphan the container (it keeps the overlay busy).
            _signal_group(pid, signal.SIGTERM)
            _wait(lambda: not _group_alive(pid), 30)
            _signal_group(pid, signal.SIGKILL)
        # Anything still running in the host's root (an orphaned container) is killed by its root directory.
        merged = hdir / "merged"
        for _ in range(2):
            for proc in _rooted_in(merged):
                try:
                    os.kill(proc, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _wait(lambda: not _rooted_in(merged), 10)
        ns, veth = (hdir / "netns").read_text().split()
        sh("ip", "link", "del", veth, check=False)
        sh("ip", "netns", "del", ns, check=False)
        for _ in range(50):
            if not os.path.ismount(merged) or sh("umount", str(merged), check=False).returncode == 0:
                break
            time.sleep(0.2)
        if os.path.ismount(merged):
            failed.append(str(merged))
            continue  # never delete through a mounted overlay
        (hdir / "netns").unlink()
        shutil.rmtree(hdir, ignore_errors=True)
    remaining = [p for p in Path("/sys/class/net").glob("vmol*")]
    if not remaining and sh("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        sh("ip", "link", "del", BRIDGE, check=False)
    if failed:
        raise SystemExit(f"hosts.py: still mounted after stopping the hosts: {' '.join(failed)}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("up", "down"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "up":
        up(Path(sys.argv[2]), sys.argv[3:])
    else:
        down(Path(sys.argv[2]))
