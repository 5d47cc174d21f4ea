"""One Linux/KVM host to work on: its paths, its kernel, its hypervisor, where vgpu keeps state,
whether it may change. This machine by default; a capture (read-only); or a simulated host, which
vgpu.sim builds with the same fields (its kernel, its libvirt) at the one place a host is opened
(vgpu.cli.common.open_host): nothing downstream asks whether the host is simulated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vgpu.errors import InputError
from vgpu.host.files import FileStore
from vgpu.host.paths import HostPaths


@dataclass
class HostTarget:
    paths: HostPaths
    read_only: bool = False
    # where vgpu keeps its lock and journal on this host; None for a capture (nothing is applied to it)
    state: Path | None = Path("/var/lib/vgpu")
    kernel_ops: object | None = None  # a vgpu.host.kernel.KernelOps; None: the real kernel
    hypervisor_factory: Callable[[], object] | None = None  # opens its vgpu.hypervisor.Hypervisor; None: libvirt
    step_hook: Callable | None = None  # called around each applied step (the simulator's test hooks)
    # False where the processes holding /dev/vfio are not this machine's (a simulated host): no root warning
    local_processes: bool = True
    # runs the host's amd-smi (GIM build): args -> (status, stdout, stderr); None: this machine's, if installed
    amdsmi_runner: Callable | None = None

    @classmethod
    def capture(cls, paths: HostPaths) -> "HostTarget":
        return cls(paths, read_only=True, state=None, local_processes=False)

    @property
    def state_dir(self) -> Path | None:
        return None if self.read_only else self.state

    @property
    def kernel(self):
        """The KernelOps for this host: the given one (a simulated kernel), or the real kernel."""
        if self.read_only:
            raise InputError(f"{self.paths.label} is a capture: it can be read, not changed",
                             hint="run provisioning commands on the host itself, or with --simulate")
        if self.kernel_ops is not None:
            return self.kernel_ops
        from vgpu.host.kernel import LinuxKernel
        return LinuxKernel()

    def amdsmi(self):
        """The host amd-smi (vgpu.host.amdsmi.SmiView): the simulator's, this machine's, or, for a capture,
        none (it cannot be asked)."""
        from vgpu.host.amdsmi import SmiView, read_amdsmi, system_runner
        if self.amdsmi_runner is not None:
            return read_amdsmi(self.amdsmi_runner())
        if self.read_only or not self.paths.is_system:
            return SmiView(unavailable=f"{self.paths.label} is a capture: its amd-smi could not be asked")
        return read_amdsmi(system_runner())

    def open_hypervisor(self):
        """Its hypervisor: the given factory's (a simulated libvirt), or the host's libvirt."""
        if self.hypervisor_factory is not None:
            return self.hypervisor_factory()
        from vgpu.hypervisor import open_hypervisor
        return open_hypervisor()

    @property
    def files(self) -> FileStore:
        """The host's /etc, where profiles are persisted. A capture without an etc/ has no config
        files (they read as absent), never this machine's /etc."""
        if self.paths.etc is None:
            return FileStore(None)
        return FileStore(self.paths.etc)

    # -- the platform interface (vgpu/platform.py): what every command does with a host -------------------------

    platform = "linux"

    @property
    def label(self) -> str:
        return self.paths.label

    def discover(self, source: str = "auto"):
        from vgpu.host.discovery import discover
        return discover(self.paths, source=source)

    def plan(self, profile):
        from vgpu.provision import plan_profile
        return plan_profile(self, profile)

    def provision(self, profile, **options):
        from vgpu.provision import provision
        return provision(self, profile, **options)

    def recorded_profile(self):
        from vgpu.provision import recorded_profile
        return recorded_profile(self)

    def status(self, inv=None):
        """The host against its recorded profile; ``inv``: this host's inventory when the caller has just read it."""
        from vgpu.provision import host_status
        return host_status(self, inv)

    def release(self, **options):
        from vgpu.provision import release
        return release(self, **options)

    def export(self, name: str, model: str | None, warnings: list[str] | None = None) -> dict:
        """The host as it is now as a profile, with the VM assignment libvirt has (none from a capture)."""
        from vgpu.export import export_profile
        inv = self.discover()
        said = [] if warnings is None else warnings
        try:
            domains = None if self.read_only else self.domains(said, inv)
        except OSError as exc:  # the (simulated) libvirt could not be read: export the rest, and say so
            said.append(f"could not ask libvirt for the VM assignment ({exc.strerror or exc})")
            domains = None
        return export_profile(inv, name, model, domains)

    def domains(self, warnings: list[str], inv=None):
        """The VMs (DomainInfo) its hypervisor knows, or None (with a warning) when it cannot be asked.
        ``inv``: this host's inventory when the caller has just read it."""
        from vgpu.vms import vm_view
        view = vm_view(self, self.discover() if inv is None else inv, warnings)
        return None if view.domains is None else list(view.domains.values())
