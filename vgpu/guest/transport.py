"""How the fan-out reaches a guest: a local subprocess (simulated guests) or SSH (paramiko).

Both give a ``Session`` with the same five operations, so the fan-out never knows which one it
drives; an SSH session also does the middle four in one command (``run_in_private_dir``), which the
fan-out prefers: one session and one login shell per guest instead of SFTP plus two commands. Failures to reach or trust a guest raise ``TransportFailure`` carrying the typed
``Outcome``; the fan-out turns it into that guest's result instead of stopping the others.

SSH host keys are checked strictly against known_hosts (paramiko ``RejectPolicy`` semantics):
an unknown key is refused with the fingerprint and how to add it; a changed key is refused
loudly; a new key is accepted and recorded only when the caller asked for it
(``accept_new=True``, like OpenSSH's ``StrictHostKeyChecking=accept-new``).
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import paramiko

from vgpu.guest.report.model import Outcome
from vgpu.fsutil import atomic_write
from vgpu.inputs import LIMITS, read_text

# paramiko logs handshake failures with tracebacks; without a handler Python would print them on
# stderr. The typed outcome in the report says it better.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# Bytes of stdout kept from one agent run (a guest can print garbage forever): one byte more than
# the cap is kept, so the fan-out can tell "over the limit" from a result that just fits.
OUTPUT_LIMIT = LIMITS["agent output"]


class TransportFailure(Exception):
    """The guest could not be reached, trusted, or did not answer in time."""

    def __init__(self, outcome: Outcome, detail: str):
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to connect. ``identity`` None means: ssh-agent or the default keys."""

    host: str
    port: int = 22
    user: str | None = None
    identity: Path | None = None

    @property
    def address(self) -> str:
        """``host:port``, an IPv6 literal in brackets (``[::1]:2222``), as OpenSSH writes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0  # TCP connect and SSH banner
    auth: float = 20.0
    run: float = 900.0  # the whole agent run (HIP compile and GEMMs included)


class Session(Protocol):
    def make_private_dir(self) -> str: ...
    def upload(self, local: Path, remote: str) -> None: ...
    def run(self, argv: list[str], *, env: dict[str, str], timeout: float) -> RunResult: ...
    def remove_dir(self, path: str) -> None: ...
    def close(self) -> None: ...


# ---------------------------------------------------------------- local


class LocalSession:
    """A "guest" that is this machine: used for simulated guests and the demo."""

    def __init__(self, base: Path | None = None):
        self._base = base

    def make_private_dir(self) -> str:
        return tempfile.mkdtemp(prefix="vgpu-agent-", dir=self._base)  # mkdtemp creates it 0700

    def upload(self, local: Path, remote: str) -> None:
        shutil.copyfile(local, remote)
        os.chmod(remote, 0o600)

    def run(self, argv: list[str], *, env: dict[str, str], timeout: float) -> RunResult:
        argv = [sys.executable if argv[0] == "python3" else argv[0], *argv[1:]]
        try:
            p = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, timeout=timeout,
                               check=False)
        except subprocess.TimeoutExpired as exc:
            raise TransportFailure(Outcome.TIMEOUT, f"agent did not finish within {timeout:g} s") from exc
        return RunResult(p.returncode, p.stdout[:OUTPUT_LIMIT + 1], p.stderr[-OUTPUT_LIMIT:])

    def remove_dir(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        pass


class LocalTransport:
    def __init__(self, base: Path | None = None):
        self.base = base

    def open(self, endpoint: Endpoint | None, timeouts: Timeouts) -> LocalSession:
        return LocalSession(self.base)


# ---------------------------------------------------------------- known_hosts


class _UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(hostname)
        self.hostname = hostname
        self.key = key


class KnownHosts:
    """One known_hosts file shared by all connections of a run; appends are atomic and serialised.

    The file is read and parsed once per run (not once per connection: paramiko's own
    ``HostKeys.load`` costs O(lines^2), which at a fleet's size is seconds per connection); each
    connection is then given only its own host's keys, so paramiko's checks (preferred key type,
    mismatch, missing key) are exactly those it would make against the whole file. Matching is
    paramiko's: exact host names and hashed ``|1|salt|hmac`` names, the first key of each type
    wins, in file order.
    """

    def __init__(self, path: Path, *, accept_new: bool = False):
        self.path = path
        self.accept_new = accept_new
        self._lock = threading.Lock()
        self.added: list[str] = []
        self.parses = 0  # how many times the file was read and parsed (once per run)
        self._plain: dict[str, list[tuple[int, paramiko.PKey]]] | None = None
        self._hashed: list[tuple[int, bytes, bytes, paramiko.PKey]] = []
        self._lines = 0
        self._failure: Exception | None = None
        self._found: dict[str, list[paramiko.PKey]] = {}

    def install(self, client: paramiko.SSHClient, hostname: str) -> None:
        """Give ``client`` the known keys of ``hostname`` (as paramiko names it: ``host`` on port 22,
        else ``[host]:port``, see ``host_key_name``) and the strict policy."""
        with self._lock:
            self._parse()
            keys = self._keys_for(hostname)
        for key in keys:
            client.get_host_keys().add(hostname, key.get_name(), key)
        client.set_missing_host_key_policy(_Policy(self))

    def _parse(self) -> None:
        """Read the file once (under the lock); a line paramiko would refuse fails every connection alike."""
        if self._failure is not None:
            raise self._failure
        if self._plain is not None:
            return
        self.parses += 1
        plain: dict[str, list[tuple[int, paramiko.PKey]]] = {}
        text = read_text(self.path, "known_hosts") if self.path.exists() else ""
        try:
            for lineno, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
                except paramiko.SSHException:
                    continue
                if entry is None:
                    continue
                for name in entry.hostnames:
                    if name.startswith("|1|"):
                        salt_mac = _hashed_name(name)
                        if salt_mac:
                            self._hashed.append((lineno, *salt_mac, entry.key))
                    else:
                        plain.setdefault(name, []).append((lineno, entry.key))
        except Exception as exc:  # noqa: BLE001 (paramiko's InvalidHostKey: refuse every guest, as before)
            self._failure = exc
            raise
        self._plain, self._lines = plain, len(text.splitlines())

    def _keys_for(self, hostname: str) -> list[paramiko.PKey]:
        """The first key of each type recorded for ``hostname``, in file order (memoised)."""
        found = self._found.get(hostname)
        if found is None:
            matches = list((self._plain or {}).get(hostname, []))
            name = hostname.encode()
            matches += [(i, k) for i, salt, mac, k in self._hashed
                        if hmac.compare_digest(hmac.digest(salt, name, "sha1"), mac)]
            found, seen = [], set()
            for _, key in sorted(matches, key=lambda m: m[0]):
                if key.get_name() not in seen:
                    seen.add(key.get_name())
                    found.append(key)
            self._found[hostname] = found
        return found

    def record(self, hostname: str, key: paramiko.PKey) -> None:
        """Append ``hostname key`` to the file: write a temp copy, fsync, os.replace (0600)."""
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            known = self._keys_for(hostname) if self._plain is not None else []
            same = [k for k in known if k.get_name() == key.get_name()]
            if same and same[0] == key:
                return  # another connection to the same host recorded it a moment ago
            if same:
                raise paramiko.BadHostKeyException(hostname, key, same[0])
            old = read_text(self.path, "known_hosts") if self.path.exists() else ""
            if old and not old.endswith("\n"):
                old += "\n"
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write(self.path, old + line, 0o600)
            self.added.append(hostname)
            if self._plain is not None:
                self._lines += 1
                self._plain.setdefault(hostname, []).append((self._lines, key))
                self._found.pop(hostname, None)


def _hashed_name(name: str) -> tuple[bytes, bytes] | None:
    """(salt, mac) of an OpenSSH hashed host name ``|1|base64(salt)|base64(hmac-sha1)``."""
    import base64
    import binascii

    parts = name.split("|")
    if len(parts) != 4:
        return None
    try:
        return base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return None


def host_key_name(endpoint: "Endpoint") -> str:
    """The name paramiko looks a server's key up by: ``host`` on port 22, else ``[host]:port``."""
    return endpoint.host if endpoint.port == 22 else f"[{endpoint.host}]:{endpoint.port}"


class _Policy(paramiko.MissingHostKeyPolicy):
    def __init__(self, known: KnownHosts):
        self.known = known

    def missing_host_key(self, client, hostname, key):  # noqa: ANN001 (paramiko's signature)
        if not self.known.accept_new:
            raise _UnknownHostKey(hostname, key)
        self.known.record(hostname, key)


def fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as ssh-keygen -l prints it


# ---------------------------------------------------------------- ssh


@dataclass
class SshTransport:
    known_hosts: KnownHosts
    default_user: str | None = None

    def open(self, endpoint: Endpoint, timeouts: Timeouts) -> "SshSession":
        client = paramiko.SSHClient()
        self.known_hosts.install(client, host_key_name(endpoint))
        user = endpoint.user or self.default_user or _local_user()
        where = f"{user}@{endpoint.address}"
        sock = _connect_socket(endpoint, timeouts.connect)
        t0 = time.monotonic()
        try:
            client.connect(endpoint.host, port=endpoint.port, username=user, sock=sock,
                           key_filename=str(endpoint.identity) if endpoint.identity else None,
                           allow_agent=endpoint.identity is None, look_for_keys=endpoint.identity is None,
                           timeout=timeouts.connect, banner_timeout=timeouts.connect,
                           auth_timeout=timeouts.auth, channel_timeout=timeouts.connect,
                           transport_factory=_QuietTransport)
        except Exception as exc:
            transport = client.get_transport()
            greeted = bool(transport is not None and transport.remote_version)
            client.close()
            sock.close()
            if not greeted and not isinstance(exc, paramiko.AuthenticationException):
                raise _no_greeting(exc, where, time.monotonic() - t0, timeouts) from exc
            raise _classify(exc, where, self.known_hosts, timeouts, time.monotonic() - t0) from exc
        return SshSession(client, where, timeouts)


class _QuietTransport(paramiko.Transport):
    """paramiko's Transport with its reader thread polling 2x a second instead of 10x.

    The thread wakes on every packet anyway; the poll only notices a local close() (which also closes the
    socket, waking it at once), keepalives and handshake deadlines. At 10x a second, a fleet's connections
    waiting minutes for their agents cost the controller more CPU than the SSH work itself.
    """

    _active_check_timeout = 0.5


def _local_user() -> str:
    import getpass

    return getpass.getuser()


def _connect_socket(endpoint: Endpoint, timeout: float) -> socket.socket:
    where = endpoint.address
    try:
        return socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except (TimeoutError, socket.timeout) as exc:
        raise TransportFailure(Outcome.UNREACHABLE, f"{where}: no TCP answer within {timeout:g} s") from exc
    except OSError as exc:  # refused, no route, unknown name
        raise TransportFailure(Outcome.UNREACHABLE, f"{where}: {exc.strerror or exc}") from exc


def _no_greeting(exc: Exception, where: str, elapsed: float, timeouts: Timeouts) -> TransportFailure:
    """The TCP connection opened but no SSH server spoke: a hung guest, or something that is not sshd."""
    if elapsed >= timeouts.connect * 0.9:
        return TransportFailure(Outcome.TIMEOUT, f"{where}: no SSH greeting within {timeouts.connect:g} s")
    return TransportFailure(Outcome.UNREACHABLE,
                            f"{where}: the port closed without an SSH greeting ({type(exc).__name__}: {exc})")


def _classify(exc: Exception, where: str, known: KnownHosts, timeouts: Timeouts,
              elapsed: float = 0.0) -> TransportFailure:
    """Map paramiko's exceptions to one typed outcome with an operator-facing sentence."""
    if isinstance(exc, _UnknownHostKey):
        return TransportFailure(Outcome.HOST_KEY_REFUSED, (
            f"{where}: host key {exc.key.get_name()} {fingerprint(exc.key)} for {exc.hostname} is not in "
            f"{known.path}; verify it out of band, then add it with `ssh-keyscan -p PORT HOST >> "
            f"{known.path}` or rerun with --accept-new-host-keys"))
    if isinstance(exc, paramiko.BadHostKeyException):
        return TransportFailure(Outcome.HOST_KEY_REFUSED, (
            f"{where}: HOST KEY MISMATCH: the server offered {fingerprint(exc.key)} but {known.path} "
            f"records {fingerprint(exc.expected_key)}; someone may be intercepting the connection, or the "
            f"guest was reinstalled (then remove the old line with `ssh-keygen -R HOST -f {known.path}`)"))
    if isinstance(exc, paramiko.PasswordRequiredException):
        return TransportFailure(Outcome.AUTH_FAILED,
                                f"{where}: the private key is encrypted; load it into ssh-agent instead")
    if isinstance(exc, paramiko.AuthenticationException):
        if "timeout" in str(exc).lower():
            return TransportFailure(Outcome.TIMEOUT, f"{where}: authentication took over {timeouts.auth:g} s")
        return TransportFailure(Outcome.AUTH_FAILED, f"{where}: authentication refused ({exc})")
    # a server that greeted and then stalled: paramiko gives up after the timeout with a generic
    # SSHException ("No existing session"), which is a time-out, not an unreachable guest
    if isinstance(exc, (TimeoutError, socket.timeout)) or elapsed >= timeouts.connect * 0.9:
        return TransportFailure(Outcome.TIMEOUT,
                                f"{where}: the SSH handshake took over {timeouts.connect:g} s")
    if isinstance(exc, OSError):
        return TransportFailure(Outcome.UNREACHABLE, f"{where}: {exc.strerror or exc}")
    return TransportFailure(Outcome.UNREACHABLE, f"{where}: SSH handshake failed ({exc})")


class SshSession:
    def __init__(self, client: paramiko.SSHClient, where: str, timeouts: Timeouts):
        self._client = client
        self._where = where
        self._timeouts = timeouts
        self._sftp: paramiko.SFTPClient | None = None

    def _sftp_client(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self._client.open_sftp()
            self._sftp.get_channel().settimeout(self._timeouts.connect + self._timeouts.auth)
        return self._sftp

    def make_private_dir(self) -> str:
        """A fresh random directory under /tmp, created 0700 (mkdir fails if the name exists)."""
        path = f"/tmp/vgpu-agent-{secrets.token_hex(8)}"
        sftp = self._guard(self._sftp_client)
        self._guard(lambda: sftp.mkdir(path, 0o700))
        self._guard(lambda: sftp.chmod(path, 0o700))  # the remote umask cannot widen it, but be explicit
        return path

    def upload(self, local: Path, remote: str) -> None:
        sftp = self._sftp_client()
        self._guard(lambda: sftp.put(str(local), remote))
        self._guard(lambda: sftp.chmod(remote, 0o600))

    def run(self, argv: list[str], *, env: dict[str, str], timeout: float) -> RunResult:
        """Run ``argv`` (quoted with shlex.join, never a string built from input) under a deadline.

        The environment goes through ``env K=V ...`` because sshd drops SetEnv requests unless
        configured with AcceptEnv. coreutils ``timeout`` stops the agent on the guest too.
        """
        words = ["timeout", "-k", "5", f"{timeout:g}"]
        if env:
            words += ["env", *(f"{k}={v}" for k, v in sorted(env.items()))]
        command = shlex.join(words + argv)
        chan = self._guard(lambda: self._client.get_transport().open_session(timeout=self._timeouts.connect))
        chan.exec_command(command)
        result = _collect(chan, timeout + 2.0, self._where)
        if result.returncode in (124, 137):  # coreutils timeout: TERM sent (124), or KILL after -k (137)
            raise TransportFailure(Outcome.TIMEOUT,
                                   f"{self._where}: agent did not finish within {timeout:g} s")
        return result

    def run_in_private_dir(self, files: list[tuple[str, bytes]], argv: list[str], *, env: dict[str, str],
                           timeout: float) -> RunResult:
        """Make a private directory, upload ``files`` into it, run ``argv`` there and remove it: one exec.

        The same steps as make_private_dir, upload, run and remove_dir, in one SSH channel instead of
        an SFTP session and two commands: the guest's login shell starts once per guest (a fleet's
        cost is mostly round trips and shell start-ups). The files travel on the command's stdin,
        their sizes given as arguments and checked on arrival; the directory is
        ``/tmp/vgpu-agent-<16 hex>``, created 0700 (mkdir fails if the name exists), its files
        0600 (umask 077), and removed when the command ends, whatever it did. ``WORKDIR`` at the start
        of an argument of ``argv`` stands for the directory. Everything variable is an argument of a
        fixed POSIX sh script (shlex.join), never part of its text.
        """
        path = f"/tmp/vgpu-agent-{secrets.token_hex(8)}"
        words = ["timeout", "-k", "5", f"{timeout:g}"]
        if env:
            words += ["env", *(f"{k}={v}" for k, v in sorted(env.items()))]
        sizes = []
        for name, data in files:
            sizes += [name, str(len(data))]
        command = shlex.join(["sh", "-c", _STAGE_SCRIPT, "vgpu-stage", path, str(len(files)), *sizes,
                              *words, *argv])
        chan = self._guard(lambda: self._client.get_transport().open_session(timeout=self._timeouts.connect))
        self._guard(lambda: chan.exec_command(command))
        try:
            chan.settimeout(self._timeouts.connect + self._timeouts.auth)
            for _, data in files:
                chan.sendall(data)
            chan.shutdown_write()
            chan.settimeout(None)
        except (socket.timeout, TimeoutError) as exc:
            chan.close()
            raise TransportFailure(Outcome.TIMEOUT, f"{self._where}: the guest stopped taking the upload") from exc
        except (paramiko.SSHException, OSError, EOFError):
            pass  # the command ended early (it says why on stderr, read below)
        result = _collect(chan, timeout + 2.0, self._where)
        if result.returncode in (124, 137):  # coreutils timeout: TERM sent (124), or KILL after -k (137)
            raise TransportFailure(Outcome.TIMEOUT,
                                   f"{self._where}: agent did not finish within {timeout:g} s")
        if result.returncode == STAGE_FAILED and b"vgpu-stage: " in result.stderr:
            why = result.stderr.decode("utf-8", errors="replace").rpartition("vgpu-stage: ")[2].strip()
            raise TransportFailure(Outcome.AGENT_ERROR,
                                   f"{self._where}: could not stage the agent: {why.splitlines()[0][:300]}")
        return result

    def remove_dir(self, path: str) -> None:
        try:
            chan = self._client.get_transport().open_session(timeout=self._timeouts.connect)
            chan.exec_command(shlex.join(["rm", "-rf", "--", path]))
            _collect(chan, self._timeouts.connect, self._where)
        except (TransportFailure, paramiko.SSHException, OSError, AttributeError):
            pass  # best effort: the run's result matters more than its litter

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        self._client.close()

    def _guard(self, fn):  # noqa: ANN001, ANN202
        try:
            return fn()
        except (socket.timeout, TimeoutError) as exc:
            raise TransportFailure(Outcome.TIMEOUT, f"{self._where}: the guest stopped answering") from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportFailure(Outcome.AGENT_ERROR,
                                   f"{self._where}: {type(exc).__name__}: {exc}") from exc


# Exit status of _STAGE_SCRIPT when the directory or an upload failed (stderr says which).
STAGE_FAILED = 97
WORKDIR = "@VGPU_WORKDIR@"
# $1 directory, $2 number of files, then NAME SIZE per file (their bytes follow on stdin in that order),
# then the command; WORKDIR at the start of one of its arguments becomes the directory.
_STAGE_SCRIPT = r"""
d=$1 n=$2; shift 2
fail() { echo "vgpu-stage: $*" >&2; exit 97; }
umask 077
mkdir -m 700 -- "$d" || fail "cannot create $d"
trap 'rm -rf -- "$d"' EXIT
trap 'exit 143' HUP INT TERM
while [ "$n" -gt 0 ]; do
  head -c "$2" > "$d/$1" || fail "cannot write $d/$1"
  [ "$(wc -c < "$d/$1")" -eq "$2" ] || fail "the upload of $1 was cut short"
  n=$((n - 1)); shift 2
done
for a do
  shift
  case $a in @VGPU_WORKDIR@*) a=$d${a#@VGPU_WORKDIR@} ;; esac
  set -- "$@" "$a"
done
"$@" < /dev/null
rc=$?
rm -rf -- "$d"
trap - EXIT
exit $rc
"""


def _collect(chan: paramiko.Channel, timeout: float, where: str) -> RunResult:
    """Read stdout and stderr until the command exits or the deadline passes."""
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportFailure(Outcome.TIMEOUT,
                                       f"{where}: agent did not finish within {timeout - 2:g} s")
            select.select([chan], [], [], min(left, 1.0))  # the channel wakes us on output, EOF and close
            while chan.recv_ready():
                chunk = chan.recv(65536)
                if len(out) <= OUTPUT_LIMIT:  # drained either way, kept only up to the cap
                    out += chunk
            while chan.recv_stderr_ready():
                err = (err + chan.recv_stderr(65536))[-65536:]
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                return RunResult(chan.recv_exit_status(), bytes(out[:OUTPUT_LIMIT + 1]), bytes(err))
    finally:
        chan.close()
