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
