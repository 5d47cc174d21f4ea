"""One host to work on: its paths, its kernel, where vgpu keeps state, whether it may change."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vgpu.errors import InputError
from vgpu.host.files import FileStore
from vgpu.host.paths import HostPaths


@dataclass
class HostTarget:
    paths: HostPaths
    sim: object | None = None  # vgpu.sim.SimHost when simulated
    read_only: bool = False

    @property
    def state_dir(self) -> Path | None:
        """Where vgpu keeps its lock and journal on this host (/var/lib/vgpu); None for a capture,
        which has neither (nothing is ever applied to it)."""
        if self.sim is not None:
            return Path(self.sim.root) / "var" / "lib" / "vgpu"
        if self.read_only:
            return None
        return Path("/var/lib/vgpu")

    @property
    def kernel(self):
        """The KernelOps for this host: the simulator's, or the real kernel."""
        if self.read_only:
            raise InputError(f"{self.paths.label} is a capture: it can be read, not changed",
                             hint="run provisioning commands on the host itself, or with --simulate")
        if self.sim is not None:
            return self.sim.kernel
        from vgpu.host.kernel import LinuxKernel
        return LinuxKernel()

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

    def status(self):
        from vgpu.provision import host_status
        return host_status(self)

    def release(self, **options):
        from vgpu.provision import release
        return release(self, **options)

    def export(self, name: str, model: str | None) -> dict:
        from vgpu.export import export_profile
        return export_profile(self.discover(), name, model)
