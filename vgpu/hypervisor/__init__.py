"""The hypervisor boundary (libvirt/KVM): VMs, the PCI functions they hold, cold-plug attach.

``open_hypervisor()`` picks the backend: the host's libvirt, or the simulated one kept in a
state dir for ``--simulate``. Backends import libvirt-python lazily.
"""

from __future__ import annotations

from pathlib import Path

from vgpu.errors import InputError
from vgpu.hypervisor.base import DomainInfo, Hypervisor

__all__ = ["DomainInfo", "Hypervisor", "open_hypervisor"]


def open_hypervisor(uri: str | None = None, *, sim_state: Path | None = None) -> Hypervisor:
    """Connect to libvirt at ``uri`` (default: $LIBVIRT_DEFAULT_URI, else qemu:///system), or to the
    simulated hypervisor whose state lives under ``sim_state``. Raises InputError for a malformed
    URI and HostError when libvirt cannot be reached."""
    if sim_state is not None:
        if uri is not None:
            raise InputError("give either a libvirt URI or a simulated state dir, not both")
        from vgpu.hypervisor.sim import SimHypervisor

        return SimHypervisor(Path(sim_state))
    from vgpu.hypervisor.libvirt import LibvirtHypervisor

    return LibvirtHypervisor(uri)
