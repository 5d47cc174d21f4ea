"""Reaching an ESXi host (standalone, or one host of a vCenter) through the vSphere API with pyVmomi.

Credentials never come from the command line: the password is read from ``--esxi-password-file``
or ``$VGPU_ESXI_PASSWORD``, and a URL carrying ``user:password@`` is refused. TLS is verified
against the system's CAs (or ``--esxi-ca FILE``); a pinned SHA-256 certificate thumbprint is the
explicit alternative; ``--insecure`` turns verification off and says so on every run. Every failure
to connect is one sentence: wrong credentials, unreachable, certificate not trusted or not the
pinned one, an API older than 8.0, a host that is not connected (docs/esxi.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from vgpu.errors import HostError, InputError, RefusedError, RemoteError, VgpuError
from vgpu.esxi.transport import AnswerRefused, bounded, bounded_discovery

PASSWORD_ENV = "VGPU_ESXI_PASSWORD"
USER_ENV = "VGPU_ESXI_USER"
MIN_API = (8, 0)  # ROCm 7.0 supports MI300X on ESXi 8 (docs/hardware.md §6)
CONNECT_TIMEOUT = 30.0  # seconds for TCP + TLS + each SOAP exchange (docs/esxi.md: exit 9 after 30 s)
TIMEOUT_ENV = "VGPU_ESXI_TIMEOUT"  # another deadline in seconds (a slow WAN link to a vCenter; tests)
_THUMBPRINT = re.compile(r"^(?:[0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$")
_MAX_PASSWORD = 4096
_MAX_CA = 1 << 20  # a CA bundle is ~200 KiB


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to connect. ``password`` never appears in repr, logs or reports."""

    url: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    thumbprint: str | None = None  # SHA-256, "AA:BB:..." (32 pairs)
    ca_file: Path | None = None
    insecure: bool = False
    host_name: str | None = None  # which host, when the URL is a vCenter with several

    @property
    def label(self) -> str:
        return f"ESXi {self.host_name or self.host}"


def endpoint(url: str, *, user: str | None = None, password_file: Path | None = None,
             thumbprint: str | None = None, ca_file: Path | None = None, insecure: bool = False,
             host_name: str | None = None) -> Endpoint:
    """Check the connection options (nothing is contacted yet). Raises InputError."""
    try:
        parts = urlsplit(url if "//" in url else f"https://{url}")
        parts.port  # noqa: B018 - an out-of-range port raises here
    except ValueError as exc:  # "Invalid IPv6 URL", a port that is not a number or above 65535
        raise InputError(f"--esxi {url!r}: not a URL ({exc}); it must be https://HOST[:PORT]",
                         hint="an IPv6 address goes in brackets: https://[fd00::5]:443") from None
    if parts.scheme not in ("https", "http"):
        raise InputError(f"--esxi {url!r}: the URL must be https://HOST[:PORT]",
                         hint="for example --esxi https://esxi01.example.com")
    if parts.username is not None or parts.password is not None:
        raise InputError("--esxi: the URL carries credentials; they must not be on the command line",
                         hint=f"set {USER_ENV} or --esxi-user, and {PASSWORD_ENV} or --esxi-password-file")
    if parts.scheme == "http" and not insecure:
        raise InputError("--esxi: plain http sends the password in clear text",
                         hint="use https://, or --insecure for a test server")
    if not parts.hostname:
        raise InputError(f"--esxi {url!r}: no host name in the URL")
    port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    if not 1 <= port <= 65535:  # ":0" is no port, not "the default one"
        raise InputError(f"--esxi {url!r}: the port is not a number from 1 to 65535")
    if thumbprint is not None and not _THUMBPRINT.fullmatch(thumbprint):  # fullmatch: "$" allows a newline
        raise InputError("--esxi-thumbprint must be the certificate's SHA-256 fingerprint, 32 hex pairs "
                         "separated by colons",
                         hint="openssl s_client -connect HOST:443 </dev/null | openssl x509 -noout "
                              "-fingerprint -sha256")
    if thumbprint is not None and insecure:
        raise InputError("--esxi-thumbprint and --insecure contradict each other: pin the certificate, or do not "
                         "check it")
    if ca_file is not None and (thumbprint is not None or insecure):
        raise InputError("--esxi-ca cannot be combined with --esxi-thumbprint or --insecure")
    return Endpoint(url=f"{parts.scheme}://{parts.hostname}:{port}{parts.path or '/sdk'}", host=parts.hostname,
                    port=port, user=user or os.environ.get(USER_ENV) or "root",
                    password=_password(password_file), thumbprint=thumbprint.upper() if thumbprint else None,
                    ca_file=ca_file, insecure=insecure or parts.scheme == "http", host_name=host_name)


def timeout() -> float:
    """The deadline of each network exchange with the host, in seconds ($VGPU_ESXI_TIMEOUT, else 30)."""
    return seconds_from_env(TIMEOUT_ENV, CONNECT_TIMEOUT, 3600, "to wait for the host")


def seconds_from_env(name: str, default: float, most: float, what: str) -> float:
    """A number of seconds from $NAME (``default`` when unset), 0.1 to ``most``; InputError otherwise."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.1 <= value <= most:
        raise InputError(f"${name}={text[:40]!r}: give the seconds {what}, from 0.1 to {most:g}")
    return value


@contextlib.contextmanager
def _socket_deadline(seconds: float):
    """pyVmomi's version discovery (vimServiceVersions.xml) opens its connection without a timeout: a host
    that accepts and never answers would block for ever. The default timeout covers every socket opened
    meanwhile (TCP connect, the TLS handshake and each read)."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def _password(password_file: Path | None) -> str:
    if password_file is not None:
        from vgpu.inputs import read_text
        text = read_text(password_file, "password file", limit=_MAX_PASSWORD)
        password = text[:-1] if text.endswith("\n") else text
        if not password or "\n" in password:
            raise InputError(f"password file {password_file}: it must hold the password on one line")
        return password
    password = os.environ.get(PASSWORD_ENV)
    if not password:
        raise InputError("no password for the ESXi host",
                         hint=f"set {PASSWORD_ENV}, or give --esxi-password-file FILE (mode 0600)")
    return password


def _ssl_context(ep: Endpoint) -> ssl.SSLContext | None:
    if ep.url.startswith("http:"):
        return None
    if ep.thumbprint:
        return _pinned_context(ep)
    if ep.insecure:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if ep.ca_file is None:
        return ssl.create_default_context()
    from vgpu.inputs import read_text
    pem = read_text(ep.ca_file, "certificate file", limit=_MAX_CA)  # no FIFO, device or huge file
    try:
        return ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise InputError(f"--esxi-ca {ep.ca_file}: no PEM certificate in it ({exc})") from None


def _pinned_context(ep: Endpoint) -> ssl.SSLContext:
    """Trust exactly the certificate whose SHA-256 fingerprint was pinned: fetch it, compare, and make
    it the only trust anchor of every connection that follows (so a different certificate later fails
    verification, whatever CA signed it)."""
    import hashlib

    where, deadline = f"{ep.host}:{ep.port}", timeout()
    try:
        pem = ssl.get_server_certificate((ep.host, ep.port), timeout=deadline)
    except (socket.timeout, TimeoutError):
        raise _no_answer(where, deadline) from None
    except (OSError, ssl.SSLError) as exc:
        raise RemoteError(f"{where}: cannot connect ({getattr(exc, 'strerror', None) or exc})",
                          hint="check the URL, the port and that the host is up") from None
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest().upper()
    actual = ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))
    if actual != ep.thumbprint:
        raise RemoteError(f"{where}: the server's certificate is not the pinned one (--esxi-thumbprint); it presents "
                          f"{actual}",
                          hint="if the host's certificate was renewed, check the new fingerprint out of band and pin "
                               "it")
    ctx = ssl.create_default_context(cadata=pem)
    ctx.check_hostname = False  # the pin names the certificate, not a host name
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is the anchor, CA-signed or not
    return ctx


@dataclass
class Session:
    """A logged-in service instance, the API version and the one host vgpu works on."""

    si: object
    content: object
    host: object  # vim.HostSystem
    endpoint: Endpoint
    api_version: str  # the host's own (config.product), not a vCenter's

    def close(self) -> None:
        from pyVim.connect import Disconnect
        try:
            Disconnect(self.si)
        except Exception:  # the session may be gone already; closing is best effort
            pass


def connect(ep: Endpoint) -> Session:
    """Log in and find the host. Raises RemoteError (exit 9), RefusedError (exit 4)."""
    from pyVim.connect import SmartConnect
    from pyVmomi import vim, vmodl

    deadline = timeout()
    kwargs = dict(host=ep.host, port=ep.port, user=ep.user, pwd=ep.password, httpConnectionTimeout=deadline,
                  protocol="http" if ep.url.startswith("http:") else "https", path=urlsplit(ep.url).path or "/sdk")
    if kwargs["protocol"] == "https":
        kwargs["sslContext"] = _ssl_context(ep)
    where = f"{ep.host}:{ep.port}"
    try:
        with _socket_deadline(deadline), bounded_discovery(deadline):
            si = SmartConnect(**kwargs)
        _bound_stub(si._stub, deadline)
    except vim.fault.InvalidLogin:
        raise RemoteError(f"{where}: the user name or password was not accepted (user {ep.user})",
                          hint=f"check {USER_ENV}/--esxi-user and the password; the account needs the vgpu role "
                               "(docs/esxi.md)") from None
    except ssl.SSLCertVerificationError as exc:
        if ep.thumbprint:
            raise RemoteError(f"{where}: the server's certificate changed after it matched the pinned one",
                              hint="check the host; rerun") from None
        raise RemoteError(f"{where}: the server's TLS certificate is not trusted ({exc.verify_message})",
                          hint="install the host's CA (--esxi-ca FILE), or pin its certificate with "
                               "--esxi-thumbprint SHA256") from None
    except ssl.SSLError as exc:
        raise RemoteError(f"{where}: TLS failed ({exc.reason or exc})") from None
    except (socket.timeout, TimeoutError):
        raise _no_answer(where, deadline) from None
    except AnswerRefused as exc:
        raise RemoteError(f"{where}: refused {exc} (vgpu/esxi/transport.py)",
                          hint="check that HOST:PORT is the vSphere API of an ESXi host or vCenter") from None
    except OSError as exc:
        raise RemoteError(f"{where}: cannot connect ({exc.strerror or exc})",
                          hint="check the URL, the port and that the host is up") from None
    except vim.fault.HostConnectFault as exc:
        raise RemoteError(f"{where}: {exc.msg}") from None
    except Exception as exc:  # pyVmomi raises plain Exceptions for protocol trouble (not a vSphere endpoint)
        raise RemoteError(f"{where}: not a vSphere API endpoint ({type(exc).__name__}: {exc})") from None
    try:
        content = si.RetrieveContent()
        host = _find_host(content, ep)
        version = _check_host(host, ep, where)
    except vmodl.MethodFault as exc:  # NoPermission for System.View, say
        Session(si, None, None, ep, "").close()
        raise fault_error(exc, where, ep.user) from None
    except BaseException:
        Session(si, None, None, ep, "").close()
        raise
    return Session(si, content, host, ep, version)


def _check_host(host, ep: Endpoint, where: str) -> str:
    """The host's own product and state, not the endpoint's: through vCenter, ``content.about`` is the
    vCenter's (an ESXi 7 host behind vCenter 8 would pass an 8.0 gate), and a host vCenter lost contact with
    answers with stale data. Returns the host's API version."""
    product = host.summary.config.product or host.config.product
    version, name = str(product.apiVersion), str(host.name)
    if _version(version) < MIN_API:
        raise RefusedError(f"{where}: host {name} runs vSphere API {version} ({product.fullName}); vgpu needs ESXi 8.0 "
                           "or later (ROCm 7.0 supports MI300X on ESXi 8)",
                           hint="upgrade the host to ESXi 8")
    state = str(host.runtime.connectionState)
    if state != "connected":
        raise RemoteError(f"{where}: host {name} is {state} (runtime.connectionState): its configuration cannot be "
                          "read or changed now", hint="reconnect the host in the vSphere client, then run vgpu again")
    return version


def _bound_stub(stub, deadline: float) -> None:
    """Every later answer of this session within the deadline and bounded in size (vgpu/esxi/transport.py);
    the pooled connections (the login's) are dropped so that none keeps the unbounded answer class."""
    import http.client

    if isinstance(stub.scheme, type) and issubclass(stub.scheme, http.client.HTTPConnection):
        stub.scheme = bounded(stub.scheme, deadline)
        stub.DropConnections()


def _no_answer(where: str, seconds: float) -> RemoteError:
    return RemoteError(f"{where}: no answer within {seconds:g} s",
                       hint=f"check that HOST:PORT is the vSphere API of an ESXi host or vCenter; ${TIMEOUT_ENV} "
                            "sets another deadline")


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return (0,)


def _find_host(content, ep: Endpoint):
    from pyVmomi import vim

    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
    try:
        hosts = list(view.view)
    finally:
        view.Destroy()
    if ep.host_name is not None:
        chosen = [h for h in hosts if h.name == ep.host_name]
        if not chosen:
            raise InputError(f"{ep.host}: no host named {ep.host_name!r}",
                             hint="hosts there: " + ", ".join(sorted(h.name for h in hosts)[:20]))
        return chosen[0]
    if len(hosts) != 1:
        raise InputError(f"{ep.host} manages {len(hosts)} hosts: say which one with --esxi-host NAME",
                         hint="hosts there: " + ", ".join(sorted(h.name for h in hosts)[:20]))
    return hosts[0]


def task_error(exc) -> str:
    """One sentence from a vSphere fault (its message, or the reason a GenericVmConfigFault carries)."""
    parts = [getattr(exc, "msg", None) or "", getattr(exc, "reason", None) or ""]
    for m in getattr(exc, "faultMessage", None) or ():
        parts.append(getattr(m, "message", "") or "")
    text = "; ".join(dict.fromkeys(p for p in parts if p and not p.startswith("*types.")))
    return text or type(exc).__name__


def fault_error(exc, where: str, user: str) -> VgpuError:
    """One line for a vSphere fault that is not a VimFault (a RuntimeFault or SecurityError: pyVmomi's str()
    of it is a 10-line dump), naming what the administrator needs: the privilege id and the object for
    NoPermission (exit 9, docs/exit-codes.md), the object for ManagedObjectNotFound (exit 1)."""
    from pyVmomi import vim, vmodl

    obj = getattr(exc, "object", None) or getattr(exc, "obj", None)
    named = f"{obj._wsdlName} {obj._moId}" if obj is not None and hasattr(obj, "_moId") else "the object"
    if isinstance(exc, vim.fault.NoPermission):
        return RemoteError(f"{where}: user {user} lacks the privilege {exc.privilegeId} on {named}",
                           hint=f"add {exc.privilegeId} to the role of {user} on that object (docs/esxi.md, "
                                "The vSphere role)")
    if isinstance(exc, vim.fault.NotAuthenticated):
        return RemoteError(f"{where}: the session of user {user} is not authenticated any more",
                           hint="check the account and rerun")
    if isinstance(exc, vmodl.fault.ManagedObjectNotFound):
        return HostError(f"{where}: {named} no longer exists (removed while vgpu was working)",
                         hint="run vgpu again: it reads the host afresh")
    if isinstance(exc, vmodl.fault.HostNotConnected):
        return RemoteError(f"{where}: the host is not connected to its vCenter",
                           hint="reconnect it in the vSphere client, then run vgpu again")
    return HostError(f"{where}: {type(exc).__name__}: {task_error(exc)}")


def host_error(what: str, exc) -> HostError:
    return HostError(f"{what}: {task_error(exc)}")
