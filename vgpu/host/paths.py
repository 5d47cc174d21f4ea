"""Where a host's /sys, /proc, /etc and /dev are.

A real host uses the system paths; a simulated host, a captured snapshot or a test tree puts
all four under one prefix (``root/sys``, ``root/proc``, ...). Production code takes a HostPaths
and never spells ``/sys`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
import os
from pathlib import Path

from vgpu.errors import InputError


@dataclass(frozen=True)
class HostPaths:
    sys: Path
    proc: Path | None = None  # None: unknown (a bare sysfs capture); readiness says so
    etc: Path | None = None
    dev: Path | None = None
    label: str = "/sys"  # what the operator passed, for messages and reports

    @classmethod
    def system(cls) -> "HostPaths":
        """This machine. $VGPU_ETC_DIR moves the config root (default /etc), e.g. to prepare an
        image or a chroot: every file vgpu reads or writes under /etc is then under it."""
        etc = Path(os.environ.get("VGPU_ETC_DIR") or "/etc")
        return cls(Path("/sys"), Path("/proc"), etc, Path("/dev"), label="this host")

    @classmethod
    def under(cls, root: Path, label: str | None = None) -> "HostPaths":
        """A tree holding sys/, proc/, etc/, dev/ (a simulated host or an unpacked snapshot)."""
        root = Path(root)
        return cls(root / "sys", root / "proc", root / "etc", root / "dev", label=label or str(root))

    @classmethod
    def for_sysfs_root(cls, sys_dir: Path) -> "HostPaths":
        """``--sysfs-root DIR``: DIR stands for /sys. Siblings proc/etc/dev are used when present.

        Raises InputError when DIR is missing or does not look like a sysfs tree.
        """
        sys_dir = Path(sys_dir)
        if not sys_dir.is_dir():
            raise InputError(f"sysfs root {sys_dir} does not exist or is not a directory",
                             hint="pass the directory that stands for /sys (it holds bus/pci/devices)")
        if not (sys_dir / "bus" / "pci" / "devices").is_dir():  # /proc has bus/pci, its devices is a file
            raise InputError(f"{sys_dir} is not a sysfs tree: it has no bus/pci/devices directory",
                             hint="pass the directory that stands for /sys, e.g. ROOT/sys of a capture")
        parent = sys_dir.parent
        sibling = lambda name: (parent / name) if (parent / name).is_dir() else None  # noqa: E731
        return cls(sys_dir, sibling("proc"), sibling("etc"), sibling("dev"), label=str(sys_dir))

    @property
    def is_system(self) -> bool:
        return self.sys == Path("/sys")

    def pci_devices(self) -> Path:
        return self.sys / "bus" / "pci" / "devices"
