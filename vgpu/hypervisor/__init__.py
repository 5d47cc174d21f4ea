"""The hypervisor boundary (libvirt/KVM): VMs, the PCI functions they hold, cold-plug attach.

``open_hypervisor()`` connects to the host's libvirt. A simulated host brings its own (libvirt's
test driver with state on disk, vgpu.hypervisor.sim), chosen where the host is opened. Backends
import libvirt-python lazily.
"""

from __future__ import annotations

from vgpu.hypervisor.base import DomainInfo, Hypervisor

__all__ = ["DomainInfo", "Hypervisor", "open_hypervisor"]


def open_hypervisor(uri: str | None = None) -> Hypervisor:
    """Connect to libvirt at ``uri`` (default: $LIBVIRT_DEFAULT_URI, else qemu:///system). Raises
    InputError for a malformed URI and HostError when libvirt cannot be reached."""
    from vgpu.hypervisor.libvirt import LibvirtHypervisor

    return LibvirtHypervisor(uri)
