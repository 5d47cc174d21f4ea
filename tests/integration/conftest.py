"""Real OpenSSH servers for the validation fan-out tests.

``sshd_factory`` starts ``/usr/sbin/sshd`` with its own ed25519 host key, a PidFile and
key-only auth on 127.0.0.1 (or inside a network namespace); every server is stopped in the
fixture's finalizer. ``client_key`` is the key the servers accept; ``stranger_key`` one they do not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vgpu-test", "-f", str(path)],
                   check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sshd:
    address: str
    port: int
    host_key: Path
    pidfile: Path
    log: Path
    netns: str | None = None

    @property
    def host_key_line(self) -> str:
        """The known_hosts line for this server (``[addr]:port`` unless on 22, as OpenSSH writes it)."""
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        kind, b64 = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"{name} {kind} {b64}\n"

    def stop(self) -> None:
        try:
            os.kill(int(self.pidfile.read_text().split()[0]), signal.SIGTERM)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            pass


@pytest.fixture(scope="session")
def ssh_dir(tmp_path_factory) -> Path:
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (make deps-test installs it)")
    d = tmp_path_factory.mktemp("ssh")
    _keygen(d / "client")
    _keygen(d / "stranger")
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
    return d


@pytest.fixture(scope="session")
def client_key(ssh_dir) -> Path:
    return ssh_dir / "client"


@pytest.fixture(scope="session")
def stranger_key(ssh_dir) -> Path:
    return ssh_dir / "stranger"


def _config(d: Path, address: str, port: int, host_key: Path, authorized: Path, extra: tuple[str, ...] = ()) -> Path:
    cfg = d / "sshd_config"
    cfg.write_text("\n".join([
        f"ListenAddress {address}", f"Port {port}", f"HostKey {host_key}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized}", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no",
        "Subsystem sftp internal-sftp", "MaxStartups 100:30:200", "MaxSessions 50", "LogLevel ERROR", *extra, "",
    ]))
    return cfg


def start_sshd(d: Path, authorized: Path, *, address: str = "127.0.0.1", port: int | None = None,
               netns: str | None = None, extra: tuple[str, ...] = ()) -> Sshd:
    """Start one sshd (it daemonizes and writes its PidFile); wait until it accepts connections.
    ``extra``: more sshd_config lines (e.g. a ForceCommand)."""
    d.mkdir(parents=True, exist_ok=True)
    host_key = _keygen(d / "host_ed25519")
    port = port or free_port()
    cfg = _config(d, address, port, host_key, authorized, extra)
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run(prefix + [SSHD, "-f", str(cfg), "-E", str(d / "sshd.log")], check=True)
    server = Sshd(address, port, host_key, d / "sshd.pid", d / "sshd.log", netns)
    deadline = time.monotonic() + 5
    while not server.pidfile.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd did not start: {server.log.read_text() if server.log.exists() else ''}")
        time.sleep(0.01)
    return server


@pytest.fixture(scope="session")
def sshd_starter():
    """``start_sshd`` itself, for tests that place servers themselves (e.g. in namespaces)."""
    return start_sshd


@pytest.fixture
def sshd_factory(ssh_dir, tmp_path):
    started: list[Sshd] = []

    def make(name: str = "guest", **kw) -> Sshd:
        server = start_sshd(tmp_path / f"sshd-{name}", ssh_dir / "authorized_keys", **kw)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def sshd(sshd_factory) -> Sshd:
    return sshd_factory()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nobody listens on (an unreachable guest)."""
    return free_port()


@pytest.fixture
def silent_listener():
    """A TCP port that accepts connections and never says a word (a hung guest)."""
    import threading

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@pytest.fixture
def sshd_namespaces(ssh_dir):
    """``with sshd_namespaces(names, letter=, first=, base_dir=) as (client, servers)``: an sshd (port 22) in its
    own network namespace per name, at 10.77.0.(first + i), each on a bridge (10.77.0.1) in a client namespace
    from which vgpu runs; nothing is added to the machine's own namespace, so nothing can collide with its routes.
    ``servers`` maps each name to its Sshd. ``letter`` keeps namespace and link names of different tests apart.
    Skips where namespaces cannot be made; servers and namespaces (veths, bridge) go when the block ends."""

    @contextlib.contextmanager
    def make(names: list[str], *, letter: str, first: int, base_dir: Path):
        tag = str(os.getpid() % 100000)
        client = f"vgpu-{letter}c-{tag}"
        try:
            _ip("netns", "add", client)
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            pytest.skip(f"cannot create network namespaces here ({getattr(exc, 'stderr', exc)!s}".strip() + ")")
        made, servers = [client], {}
        try:
            _ip("link", "set", "lo", "up", ns=client)
            _ip("link", "add", "br0", "type", "bridge", ns=client)
            _ip("addr", "add", "10.77.0.1/24", "dev", "br0", ns=client)
            _ip("link", "set", "br0", "up", ns=client)
            for i, name in enumerate(names, start=1):
                ns, address = f"vgpu-{letter}{i}-{tag}", f"10.77.0.{first + i}"
                _ip("netns", "add", ns)
                made.append(ns)
                outer, inner = f"v{letter}{tag}{i}h", f"v{letter}{tag}{i}g"
                _ip("link", "add", outer, "netns", client, "type", "veth", "peer", "name", inner, "netns", ns)
                _ip("link", "set", outer, "master", "br0", "up", ns=client)
                _ip("link", "set", "lo", "up", ns=ns)
                _ip("link", "set", inner, "name", "eth0", ns=ns)
                _ip("addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
                _ip("link", "set", "eth0", "up", ns=ns)
                servers[name] = start_sshd(base_dir / name, ssh_dir / "authorized_keys", address=address, port=22,
                                           netns=ns)
            yield client, servers
        finally:
            for server in servers.values():
                server.stop()
            for ns in reversed(made):  # deleting a namespace deletes its veth ends and the bridge
                subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)

    return make
