"""Kernel operations behind one small interface.

``LinuxKernel`` does them on the real host; ``vgpu.sim.kernel.SimKernel`` implements the same
Protocol on a simulated sysfs tree and behaves as docs/hardware.md §3-4 describe. Everything
that changes driver or module state goes through a ``KernelOps``; nothing else writes under /sys.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from vgpu.errors import HostError


@runtime_checkable
class KernelOps(Protocol):
    """What vgpu asks of a kernel. Failures raise HostError with the kernel's reason."""

    def load_module(self, name: str, params: Mapping[str, str] | None = None) -> None:
        """modprobe NAME [key=value ...]; options from <etc>/modprobe.d apply as with modprobe."""

    def unload_module(self, name: str) -> None:
        """modprobe -r NAME. Unloading gim removes every VF on the host."""

    def write_attr(self, path: Path, value: str) -> None:
        """Write one sysfs attribute (driver_override, driver/unbind, drivers_probe, ...)."""

    def settle(self, timeout: float) -> None:
        """Wait until the kernel's and udev's pending events are processed."""

    def stop_unit(self, unit: str) -> None:
        """systemctl stop UNIT: a GPU client that must let go of the GPU for a step (docs/hardware.md §3)."""

    def start_unit(self, unit: str) -> None:
        """systemctl start UNIT."""

    def unit_active(self, unit: str) -> bool:
        """Whether systemd reports UNIT active (`systemctl is-active`)."""


class LinuxKernel:
    """The real thing: modprobe and sysfs writes. Argument lists only, never a shell string."""

    def __init__(self, modprobe: str = "modprobe", udevadm: str = "udevadm", systemctl: str = "systemctl"):
        self._modprobe = modprobe
        self._udevadm = udevadm
        self._systemctl = systemctl

    def load_module(self, name: str, params: Mapping[str, str] | None = None) -> None:
        args = [self._modprobe, "--", name] + [f"{k}={v}" for k, v in (params or {}).items()]
        self._run(args, f"loading module {name}")

    def unload_module(self, name: str) -> None:
        self._run([self._modprobe, "-r", "--", name], f"unloading module {name}")

    def write_attr(self, path: Path, value: str) -> None:
        try:
            with open(path, "w") as fh:
                fh.write(value)
        except OSError as exc:
            raise HostError(f"writing {value!r} to {path} failed: {exc.strerror or exc}") from exc

    def settle(self, timeout: float) -> None:
        try:
            subprocess.run([self._udevadm, "settle", f"--timeout={int(max(timeout, 1))}"],
                           check=False, capture_output=True, timeout=timeout + 5)
        except (OSError, subprocess.TimeoutExpired):
            time.sleep(min(timeout, 1.0))

    def stop_unit(self, unit: str) -> None:
        self._run([self._systemctl, "stop", "--", unit], f"stopping {unit}")

    def start_unit(self, unit: str) -> None:
        self._run([self._systemctl, "start", "--", unit], f"starting {unit}")

    def unit_active(self, unit: str) -> bool:
        try:
            proc = subprocess.run([self._systemctl, "is-active", "--", unit], capture_output=True, text=True,
                                  timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return proc.stdout.strip() == "active"

    @staticmethod
    def _run(args: list[str], what: str) -> None:
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HostError(f"{what} failed: {exc}") from exc
        if proc.returncode != 0:
            reason = (proc.stderr or proc.stdout).strip().splitlines()
            raise HostError(f"{what} failed: {reason[-1] if reason else f'exit {proc.returncode}'}")
