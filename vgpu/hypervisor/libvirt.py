"""The libvirt (KVM) backend of the Hypervisor protocol, through libvirt-python.

libvirt-python is imported lazily, so that commands which never ask libvirt anything start fast
and work where it is not installed. libvirt's own stderr printing is silenced: every failure
becomes one VgpuError sentence instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vgpu.errors import HostError, InputError, InUseError
from vgpu.hypervisor.base import DomainInfo, holding, state_name
from vgpu.hypervisor.domain import DomainXml, attach_functions, detach_functions
from vgpu.hypervisor.xml import check_domain_name, parse, referenced_functions
from vgpu.model.pci import PciAddress

DEFAULT_URI = "qemu:///system"
_URI = re.compile(r"^[a-z][a-z0-9+.-]*:(//[^\s]*)?$")  # driver[+transport]://[host]/path[?query]


def import_libvirt() -> Any:
    """The libvirt module with its error printing silenced. Raises HostError when absent."""
    try:
        import libvirt
    except ImportError as exc:
        raise HostError("libvirt-python is not installed, so vgpu cannot ask libvirt about VMs",
                        hint="pip install libvirt-python (it builds against libvirt-dev)") from exc
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def check_uri(uri: object) -> str:
    """A libvirt URI that can be tried, or InputError saying why not."""
    if not isinstance(uri, str) or not _URI.match(uri):
        raise InputError(f"not a libvirt URI: {uri!r}", hint="e.g. qemu:///system or test:///default")
    if uri.startswith("test:///") and uri != "test:///default":
        node = Path(uri[len("test://"):])
        if not node.is_file():
            raise InputError(f"libvirt test driver file {node} does not exist")
    return uri


def libvirt_message(exc: Exception) -> str:
    """The one-line text of a libvirtError."""
    get = getattr(exc, "get_error_message", None)
    text = (get() if get else None) or str(exc)
    return " ".join(text.split())


class LibvirtHypervisor:
    """Domains, holders and cold-plug attach/detach on one libvirt connection."""

    def __init__(self, uri: str | None = None):
        if uri is None:
            uri = os.environ.get("LIBVIRT_DEFAULT_URI") or DEFAULT_URI
        self.uri = check_uri(uri)
        self._lv = import_libvirt()
        self._conn = self._open(self.uri)

    def _open(self, uri: str) -> Any:
        try:
            return self._lv.open(uri)
        except self._lv.libvirtError as exc:
            hint = "is libvirtd running, and may this user use it? Else give another URI"
            raise HostError(f"cannot connect to libvirt at {uri}: {libvirt_message(exc)}", hint=hint) from exc

    def _connection(self) -> Any:
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> LibvirtHypervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    def domains(self) -> list[DomainInfo]:
        try:
            listed = self._connection().listAllDomains(0)
        except self._lv.libvirtError as exc:
            raise HostError(f"libvirt at {self.uri} could not list VMs: {libvirt_message(exc)}") from exc
        infos = [info for info in map(self._info, listed) if info is not None]
        return sorted(infos, key=lambda d: d.name)

    def _info(self, dom: Any) -> DomainInfo | None:
        """One domain, or None when it vanished while we looked (undefined meanwhile)."""
        try:
            state = state_name(dom.state()[0])
            persistent = bool(dom.isPersistent())
            texts = [self._persistent_xml(dom)] if persistent else []
            if dom.isActive():
                texts.append(dom.XMLDesc(0))
            name, uuid = dom.name(), dom.UUIDString()
        except self._lv.libvirtError as exc:
            if exc.get_error_code() == self._lv.VIR_ERR_NO_DOMAIN:
                return None
            raise HostError(f"libvirt at {self.uri} could not read a VM: {libvirt_message(exc)}") from exc
        roots = [parse(text, f"VM {name}'s XML") for text in texts]
        functions: list[PciAddress] = []
        for root in roots:
            functions += [a for a in referenced_functions(root) if a not in functions]
        assigned = tuple(sorted(DomainXml(roots[0]).recorded_bars())) if persistent else ()
        return DomainInfo(name, uuid, state, tuple(functions), persistent, assigned)

    def holders(self, addresses: Iterable[PciAddress]) -> dict[PciAddress, list[DomainInfo]]:
        return holding(self.domains(), addresses)

    # -- changing --------------------------------------------------------------------------

    def attach(self, domain: str, addresses: Sequence[PciAddress], *, numa_node: int | None,
               bar64_bytes: int) -> None:
        functions = _checked_functions(addresses)
        if not _count(bar64_bytes):
            raise InputError(f"bar64_bytes must be a byte count >= 0, not {bar64_bytes!r}")
        if numa_node is not None and not _count(numa_node):
            raise InputError(f"numa_node must be a node number >= 0 or None, not {numa_node!r}")
        dom = self._shut_off(domain, "attach GPUs to")
        self._refuse_taken(domain, functions)
        doc = DomainXml.parse(self._persistent_xml(dom), f"VM {domain}'s XML")
        if attach_functions(doc, functions, numa_node=numa_node, bar64_bytes=bar64_bytes,
                            node_cpus=self._node_cpus() if numa_node is not None else None):
            self._define(doc.to_xml(), domain)

    def detach(self, domain: str, addresses: Sequence[PciAddress]) -> None:
        functions = _checked_functions(addresses)
        dom = self._shut_off(domain, "detach GPUs from")
        doc = DomainXml.parse(self._persistent_xml(dom), f"VM {domain}'s XML")
        if detach_functions(doc, functions):
            self._define(doc.to_xml(), domain)

    def definition(self, domain: str) -> str:
        return self._persistent_xml(self._lookup(domain))

    def restore(self, domain: str, xml: str) -> None:
        self._shut_off(domain, "restore the configuration of")
        self._define(xml, domain)

    def _lookup(self, domain: str) -> Any:
        check_domain_name(domain)
        try:
            return self._connection().lookupByName(domain)
        except self._lv.libvirtError as exc:
            if exc.get_error_code() == self._lv.VIR_ERR_NO_DOMAIN:
                raise InputError(f"no VM named {domain} in libvirt at {self.uri}",
                                 hint="`virsh list --all` shows the defined VMs") from exc
            raise HostError(f"libvirt at {self.uri} could not look up VM {domain}: "
                            f"{libvirt_message(exc)}") from exc

    def _shut_off(self, domain: str, verb: str) -> Any:
        """The domain, if persistent and shut off. GPUs with huge BARs are cold-plugged only:
        hot-plug fails with "BAR n: no space" (docs/hardware.md §5)."""
        dom = self._lookup(domain)
        if dom.isActive():
            raise InUseError(f"cannot {verb} VM {domain} while it is {state_name(dom.state()[0])}; GPUs are "
                             "cold-plugged into its saved configuration",
                             hint=f"shut it down first (virsh shutdown {domain})")
        if not dom.isPersistent():
            raise HostError(f"VM {domain} is transient (no saved configuration to change)",
                            hint="define it persistently (virsh define) first")
        return dom

    def _refuse_taken(self, domain: str, functions: Sequence[PciAddress]) -> None:
        """One function, one VM: refuse a function another VM's configuration already references."""
        for address, doms in self.holders(functions).items():
            others = [d.name for d in doms if d.name != domain]
            if others:
                raise InUseError(f"{address} is already assigned to VM {', '.join(others)}",
                                 hint="detach it there first; a function can serve only one VM")

    # -- hooks the simulated hypervisor overrides -----------------------------------------

    def _persistent_xml(self, dom: Any) -> str:
        # SECURE: with it libvirt includes passwords (VNC/SPICE passwd=...), which a definition written
        # back without them would silently drop
        try:
            return dom.XMLDesc(self._lv.VIR_DOMAIN_XML_INACTIVE | self._lv.VIR_DOMAIN_XML_SECURE)
        except self._lv.libvirtError as exc:
            raise HostError(f"libvirt at {self.uri} could not read VM {dom.name()}'s configuration: "
                            f"{libvirt_message(exc)}") from exc

    def _define(self, xml: str, domain: str) -> Any:
        """Define (replace) a persistent domain; libvirt validates it against its schema first."""
        try:
            return self._connection().defineXMLFlags(xml, self._lv.VIR_DOMAIN_DEFINE_VALIDATE)
        except self._lv.libvirtError as exc:
            raise HostError(f"libvirt refused the new configuration of VM {domain}: {libvirt_message(exc)}; "
                            "nothing was changed") from exc

    def _node_cpus(self) -> dict[int, tuple[int, ...]]:
        """{NUMA node: host CPU ids} from libvirt's capabilities ({} where it lists none)."""
        try:
            caps = parse(self._connection().getCapabilities(), "libvirt capabilities")
        except self._lv.libvirtError:
            return {}
        out = {}
        for cell in caps.findall("host/topology/cells/cell"):
            ids = [c.get("id") or "" for c in cell.findall("cpus/cpu")]
            cpus = tuple(sorted(int(i) for i in ids if i.isdigit()))
            if (cell.get("id") or "").isdigit() and cpus:
                out[int(cell.get("id"))] = cpus
        return out


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checked_functions(addresses: Sequence[PciAddress]) -> list[PciAddress]:
    if isinstance(addresses, (str, bytes)) or not all(isinstance(a, PciAddress) for a in addresses):
        raise InputError(f"expected PciAddress values, got {addresses!r}")
    functions = list(dict.fromkeys(addresses))
    if not functions:
        raise InputError("no PCI functions given")
    return functions


__all__ = ["LibvirtHypervisor", "DEFAULT_URI", "check_uri", "import_libvirt"]
