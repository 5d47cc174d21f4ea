"""The hypervisor boundary: which VMs exist, which PCI functions they hold, cold-plug attach.

One small Protocol; ``LibvirtHypervisor`` talks to a real libvirt and
``SimHypervisor`` to libvirt's ``test:///`` driver with state kept on disk. Everything here is
pure data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from vgpu.model.pci import PciAddress

# libvirt's virDomainState values, in order (include/libvirt/libvirt-domain.h).
DOMAIN_STATES = ("nostate", "running", "blocked", "paused", "shutdown", "shutoff", "crashed", "pmsuspended")
# States in which QEMU is alive and so holds its assigned functions open through VFIO.
ACTIVE_STATES = frozenset({"running", "blocked", "paused", "shutdown", "pmsuspended"})


def state_name(code: int) -> str:
    """virDomainState number -> name; unknown numbers (a newer libvirt) become ``state-N``."""
    return DOMAIN_STATES[code] if 0 <= code < len(DOMAIN_STATES) else f"state-{code}"


@dataclass(frozen=True)
class DomainInfo:
    """One VM as the hypervisor knows it.

    ``hostdevs`` are the host PCI functions its configuration references: the persistent
    definition and, while it runs, the live one (a device hot-plugged for this boot only counts).
    """

    name: str
    uuid: str
    state: str
    hostdevs: tuple[PciAddress, ...] = ()
    persistent: bool = True
    assigned: tuple[PciAddress, ...] = ()  # of the persistent hostdevs, those vgpu attached (its <metadata> record)

    @property
    def active(self) -> bool:
        """True when a QEMU process exists (running, paused, ...): it holds its devices open."""
        return self.state in ACTIVE_STATES


def holding(domains: Iterable[DomainInfo], addresses: Iterable[PciAddress]) -> dict[PciAddress, list[DomainInfo]]:
    """For each address asked about, the domains whose configuration references it ([] if none)."""
    found: dict[PciAddress, list[DomainInfo]] = {a: [] for a in dict.fromkeys(addresses)}
    for info in domains:
        for address in info.hostdevs:
            if address in found:
                found[address].append(info)
    return found


@runtime_checkable
class Hypervisor(Protocol):
    def domains(self) -> list[DomainInfo]:
        """Every defined or running VM, sorted by name."""
        ...

    def holders(self, addresses: Iterable[PciAddress]) -> dict[PciAddress, list[DomainInfo]]:
        """For each address asked about, the VMs whose configuration references it ([] if none)."""
        ...

    def attach(self, domain: str, addresses: Sequence[PciAddress], *, numa_node: int | None,
               bar64_bytes: int) -> None:
        """Cold-plug ``addresses`` into the persistent config of a shut-off VM, with the huge-BAR
        settings (docs/hardware.md §5). ``bar64_bytes`` is the sum of their 64-bit BARs. Raises InUseError
        when the VM is active or another VM holds a function, RefusedError for a non-q35 or BIOS VM."""
        ...

    def detach(self, domain: str, addresses: Sequence[PciAddress]) -> None:
        """Remove ``addresses`` from a shut-off VM's persistent config; absent ones are ignored."""
        ...

    def definition(self, domain: str) -> str:
        """The VM's saved (persistent) configuration XML, as it is now."""
        ...

    def restore(self, domain: str, xml: str) -> None:
        """Put back a saved configuration from ``definition`` (rollback); the VM must be shut off."""
        ...
