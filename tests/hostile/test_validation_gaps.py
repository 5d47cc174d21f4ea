"""Small validation gaps (issue 8, section 9), each through the real CLI: guest hosts that are IPv6
literals (accepted) or option-like junk (refused); ports that are booleans, strings or floats; a GPU
whose ids cannot be read (reported and refused, never silently left out of the plan); an /etc that
cannot be written (one line naming the path, nothing changed); a guest that greets and then stalls
(timed out, not unreachable); a directory where a file is expected ("is a directory").
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .conftest import Watch, assert_refused, copy_sim, planned_sim, vgpu

TIMEOUT = 60
PROFILE = "mi300x-4vf"


def run(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return vgpu(*args, env=env, cwd=cwd, timeout=TIMEOUT)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def guests_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "guests.yaml"
    path.write_text("version: v1\nguests:\n" + body)
    return path


def validate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return run("validate", "--report-dir", str(tmp_path / "reports"), "--known-hosts", str(tmp_path / "kh"),
               "--profile", PROFILE, "--connect-timeout", "1", "-q", *args)


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "reports" / "validation-report.json").read_text())


# --- 1. guest hosts: IPv6 literals are addresses; a leading '-' and other junk stay refused ------------------

# ::1 and the IPv4-mapped form reach this machine's loopback, where nothing listens on the port: the guest
# is accepted and reported unreachable (exit 9), not refused as "not a host name" (exit 5).
IPV6_ACCEPTED = ["::1", "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "::0001"]


@pytest.mark.parametrize("host", IPV6_ACCEPTED)
def test_an_ipv6_literal_guest_is_accepted_and_tried(tmp_path, host):
    port = closed_port()
    gfile = guests_file(tmp_path, f"  - {{name: vm, host: '{host}', port: {port}}}\n")
    watch = Watch(gfile)
    proc = validate(tmp_path, "--guests", str(gfile))
    assert proc.returncode == 9, proc.stderr
    (guest,) = report(tmp_path)["guests"]
    assert guest["outcome"] == "unreachable"
    assert guest["address"] == f"[{host.strip('[]')}]:{port}"
    watch.unchanged()


@pytest.mark.parametrize("host", IPV6_ACCEPTED[:3])
def test_an_ipv6_literal_in_an_inventory_is_accepted(tmp_path, host):
    port = closed_port()
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  hosts:\n    vm:\n      ansible_host: '{host}'\n      ansible_port: {port}\n")
    proc = validate(tmp_path, "--inventory", str(inv))
    assert proc.returncode == 9, proc.stderr
    (guest,) = report(tmp_path)["guests"]
    assert guest["outcome"] == "unreachable" and guest["address"] == f"[{host.strip('[]')}]:{port}"


# refused by the new IPv6 parser too: brackets around junk, a zone that is an option, half brackets. The file
# also holds an IPv6 guest before the junk one: the refusal must name the junk (it named ::1 before the fix)
HOSTS_REFUSED = ["-oProxyCommand=touch /tmp/pwned", "[-oProxyCommand=x]", "fe80::1%-oProxyCommand=x",
                 "::1%", "fe80::1%eth0;id", "[::1", "::1]", "[[::1]]", ":::", "[example.com]",
                 "::1 -p 22", "[::1]:22"]


@pytest.mark.parametrize("host", HOSTS_REFUSED)
def test_junk_guest_hosts_are_refused(tmp_path, host):
    gfile = guests_file(tmp_path, f"  - {{name: ok, host: '::1'}}\n  - {{name: vm, host: {json.dumps(host)}}}\n")
    watch = Watch(tmp_path)
    proc = validate(tmp_path, "--guests", str(gfile))
    assert_refused(proc, 5, f"host {host!r} is not a host name or address")
    watch.unchanged()


@pytest.mark.parametrize("host", ["-oProxyCommand=x", "fe80::1%-x", "[-x]"])
def test_junk_ansible_host_is_refused(tmp_path, host):
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[g]\na6 ansible_host=::1\nvm ansible_host={host}\n")
    watch = Watch(tmp_path)
    assert_refused(validate(tmp_path, "--inventory", str(inv)), 5, f"host {host!r} is not a host name or address")
    watch.unchanged()


# --- 2. ports are whole numbers 1..65535: not booleans, strings or floats -------------------------------------

@pytest.mark.parametrize("port", ["true", "'22'", "'2222'", "22.0", "1.0", "yes", "on", "'65535'"])
def test_guests_file_port_must_be_an_integer_in_range(tmp_path, port):
    gfile = guests_file(tmp_path, f"  - {{name: vm, host: 127.0.0.1, port: {port}}}\n")
    watch = Watch(tmp_path)
    assert_refused(validate(tmp_path, "--guests", str(gfile)), 5, "guests.0.port")
    watch.unchanged()


@pytest.mark.parametrize("port", ["true", "'22'", "22.0", "yes"])
def test_guests_file_default_port_must_be_an_integer(tmp_path, port):
    path = tmp_path / "guests.yaml"
    path.write_text(f"version: v1\ndefaults: {{port: {port}}}\nguests:\n  - {{host: 127.0.0.1}}\n")
    assert_refused(validate(tmp_path, "--guests", str(path)), 5, "defaults.port")


@pytest.mark.parametrize("form,port", [("yaml", "true"), ("yaml", "false"), ("yaml", "22.0"), ("yaml", "22.9"),
                                       ("ini", "true"), ("ini", "yes"), ("ini", "False")])
def test_ansible_port_must_be_a_port_number(tmp_path, form, port):
    inv = tmp_path / ("hosts.yml" if form == "yaml" else "hosts.ini")
    inv.write_text(f"all:\n  hosts:\n    vm:\n      ansible_host: 127.0.0.1\n      ansible_port: {port}\n"
                   if form == "yaml" else f"[g]\nvm ansible_host=127.0.0.1 ansible_port={port}\n")
    watch = Watch(tmp_path)
    assert_refused(validate(tmp_path, "--inventory", str(inv)), 5, "ansible_port", "is not a number")
    watch.unchanged()


# --- 3. a GPU whose ids cannot be read is a finding and a refusal, never silently dropped ---------------------

@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return planned_sim(tmp_path_factory, "gaps", profile=PROFILE)


@pytest.fixture
def sim(base, tmp_path):
    return copy_sim(base, tmp_path)


def watch_host(sim: Path) -> Watch:
    """The simulated host's sysfs, /etc and state; the run's lock files (.lock, var/lib/vgpu/lock) may appear."""
    return Watch(sim / "root/sys", sim / "root/etc", sim / "state.json", sim / "root/var/lib/vgpu/journal.json")


def gpus(sim: Path) -> list[Path]:
    return [d for d in sorted((sim / "root/sys/bus/pci/devices").iterdir())
            if (d / "vendor").read_text().strip() == "0x1002" and (d / "sriov_totalvfs").exists()]


# what the id attribute holds: garbage text, nothing, an empty line, out-of-alphabet hex, or no file at all
# and numbers no 16-bit id can be: 20000 hex digits (one spelling of AMD's 0x1002 among them), 17 bits
GARBLE = {"garbage": b"garbage\n", "empty": b"", "newline": b"\n", "bad-hex": b"0xZZZZ\n", "absent": None,
          "binary": b"\xff\xfe\x00\x01", "huge-hex": b"0x" + b"f" * 20000 + b"\n",
          "padded-amd": b"0x" + b"0" * 19996 + b"1002\n", "wide": b"0x11002\n"}


def garble(gpu: Path, attribute: str, how: str) -> None:
    target = gpu / attribute
    target.unlink()
    if GARBLE[how] is not None:
        target.write_bytes(GARBLE[how])


@pytest.mark.parametrize("attribute", ["device", "vendor"])
@pytest.mark.parametrize("how", sorted(GARBLE))
def test_plan_refuses_a_gpu_whose_id_cannot_be_read(sim, tmp_path, attribute, how):
    victim = gpus(sim)[2]
    garble(victim, attribute, how)
    watch = Watch(tmp_path)
    proc = run("plan", "--profile", PROFILE, "--sysfs-root", str(sim / "root/sys"))
    assert proc.returncode == 4, (proc.stdout, proc.stderr)
    assert f"{victim.name}: its vendor/device id cannot be read" in " ".join((proc.stdout + proc.stderr).split())
    assert "Traceback" not in proc.stderr
    watch.unchanged()


@pytest.mark.parametrize("how", ["garbage", "absent"])
def test_discover_reports_the_unreadable_gpu_as_an_error_finding(sim, how):
    victim = gpus(sim)[0]
    garble(victim, "device", how)
    proc = run("discover", "--sysfs-root", str(sim / "root/sys"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["gpus"]) == 7 and doc["ready"] is False
    (finding,) = [f for f in doc["findings"] if f["check"] == "gpus.unreadable_ids"]
    assert finding["severity"] == "error" and finding["message"].startswith(victim.name)


@pytest.mark.parametrize("profile", ["mi300x-4vf", "mi300x-1vf", "mi300x-8vf"])
def test_provision_refuses_and_changes_nothing(sim, profile):
    victim = gpus(sim)[5]
    garble(victim, "device", "garbage")
    watch = watch_host(sim)
    proc = run("provision", "--profile", profile, "--simulate", "--yes", env={"VGPU_SIM_DIR": str(sim)})
    assert proc.returncode == 4, (proc.stdout, proc.stderr)
    assert f"{victim.name}: its vendor/device id cannot be read" in " ".join((proc.stdout + proc.stderr).split())
    watch.unchanged()


# --- 4. an /etc that cannot be written, even by root: one line naming the path, nothing changed ---------------

def _immutable_works(tmp: Path) -> bool:
    probe = tmp / "probe"
    probe.mkdir()
    ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    if ok:
        ok = subprocess.run(["touch", str(probe / "x")], capture_output=True).returncode != 0
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    return ok


@pytest.fixture
def immutable(tmp_path_factory):
    if shutil.which("chattr") is None or not _immutable_works(tmp_path_factory.mktemp("probe")):
        pytest.skip("chattr +i does not work here (not root, or a file system without the flag)")
    made: list[Path] = []

    def make(path: Path) -> Path:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        made.append(path)
        return path

    yield make
    for path in reversed(made):
        subprocess.run(["chattr", "-i", str(path)], check=False)


# (what is made immutable, what was there before, the path the error line names, the steps truly rolled back:
# the failing write itself changed nothing, so it is not counted, and its undo cannot fail on the same file)
ETC_CASES = {
    "etc dir": ("etc", None, "etc/gim_config", 0),
    "modprobe.d dir": ("etc/modprobe.d", None, "etc/modprobe.d/vgpu.conf", 1),
    "existing gim_config": ("etc/gim_config", "vf_num=1\n", "etc/gim_config", 0),
    "existing vgpu.conf": ("etc/modprobe.d/vgpu.conf", "# old\n", "etc/modprobe.d/vgpu.conf", 1),
}


@pytest.mark.parametrize("case", sorted(ETC_CASES))
def test_an_unwritable_etc_is_one_line_naming_the_path_and_nothing_changes(sim, immutable, case):
    target, before, named, undone = ETC_CASES[case]
    root = sim / "root"
    if before is not None:
        (root / target).write_text(before)
    immutable(root / target)
    watch = watch_host(sim)
    proc = run("provision", "--profile", PROFILE, "--simulate", "--yes", env={"VGPU_SIM_DIR": str(sim)})
    line = assert_refused(proc, 8, f"cannot write {root / named}", "operation not permitted")
    assert "mixed state" not in proc.stderr and "rollback incomplete" not in proc.stderr, proc.stderr
    assert f"rolled back {undone} step(s)" in line
    watch.unchanged()
    status = run("status", "--simulate", env={"VGPU_SIM_DIR": str(sim)})
    assert "interrupted" not in status.stdout.lower() + status.stderr.lower()


# --- 5. a guest that greets and then stalls timed out; it was reached ----------------------------------------

BANNERS = {
    "openssh": b"SSH-2.0-OpenSSH_9.2\r\n",
    "openssh-with-comment": b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n",
    "pre-banner-lines": b"welcome\r\nSSH-2.0-dropbear_2022.83\r\n",
    "half-a-packet": b"SSH-2.0-OpenSSH_9.2\r\n\x00\x00\x01\x2c\x06\x14",
}


class Staller:
    """A TCP server on 127.0.0.1 that sends ``greeting`` to each client and then says nothing."""

    def __init__(self, greeting: bytes):
        self.greeting = greeting
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.clients: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.sendall(self.greeting)
            self.clients.append(conn)  # kept open, never answered

    def close(self) -> None:
        self.stop.set()
        for conn in self.clients:
            conn.close()
        self.sock.close()


@pytest.mark.parametrize("banner", sorted(BANNERS))
def test_a_guest_that_greets_then_stalls_is_timed_out(tmp_path, banner):
    server = Staller(BANNERS[banner])
    try:
        gfile = guests_file(tmp_path, f"  - {{name: vm, host: 127.0.0.1, port: {server.port}}}\n")
        t0 = time.monotonic()
        proc = validate(tmp_path, "--guests", str(gfile))
        assert time.monotonic() - t0 < 30
    finally:
        server.close()
    assert proc.returncode == 9, proc.stderr
    (guest,) = report(tmp_path)["guests"]
    assert guest["outcome"] == "timeout", guest
    assert "took over 1 s" in guest["detail"]


# --- 6. a directory where a file is expected says so ----------------------------------------------------------

def _not_a_file(path: Path, how: str) -> Path:
    if how == "directory":
        path.mkdir()
    elif how == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/null")
    return path


KIND = {"directory": "is a directory, not a regular file", "fifo": "is a FIFO (named pipe), not a regular file",
        "dev-null": "is a character device, not a regular file"}


@pytest.mark.parametrize("how", sorted(KIND))
def test_identity_option_that_is_not_a_file(tmp_path, how):
    key = _not_a_file(tmp_path / "id_ed25519", how)
    gfile = guests_file(tmp_path, "  - {name: vm, host: 127.0.0.1}\n")
    watch = Watch(tmp_path)
    assert_refused(validate(tmp_path, "--guests", str(gfile), "--identity", str(key)), 5,
                   f"identity file {key}", KIND[how])
    watch.unchanged()


@pytest.mark.parametrize("how", sorted(KIND))
def test_guests_file_identity_that_is_not_a_file(tmp_path, how):
    key = _not_a_file(tmp_path / "keys", how)
    gfile = guests_file(tmp_path, "  - {name: vm, host: 127.0.0.1, identity: keys}\n")
    watch = Watch(tmp_path)
    assert_refused(validate(tmp_path, "--guests", str(gfile)), 5, f"identity file {key}", KIND[how])
    watch.unchanged()


@pytest.mark.parametrize("how", sorted(KIND))
def test_inventory_private_key_that_is_not_a_file(tmp_path, how):
    key = _not_a_file(tmp_path / "keys", how)
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[g]\nvm ansible_host=127.0.0.1 ansible_ssh_private_key_file={key}\n")
    watch = Watch(tmp_path)
    assert_refused(validate(tmp_path, "--inventory", str(inv)), 5, f"identity file {key}", KIND[how])
    watch.unchanged()


@pytest.mark.parametrize("how", ["directory", "fifo"])
def test_a_profile_that_extends_a_directory(tmp_path, how):
    _not_a_file(tmp_path / "parent.yaml", how)
    child = tmp_path / "child.yaml"
    child.write_text("version: v1\nextends: ./parent.yaml\n")
    watch = Watch(tmp_path)
    proc = run("plan", "--profile", str(child), "--simulate", "--sim-dir", str(tmp_path / "sim"))
    assert_refused(proc, 5, "parent.yaml", KIND[how])
    watch.unchanged()
