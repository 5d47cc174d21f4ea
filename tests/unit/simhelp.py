"""Helpers for the simulated-host tests: fast fresh hosts (copied from a built template) and
small readers. Not a test module."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from vgpu.sim import SimHost

_TEMPLATES: dict[str, Path] = {}
_SCRATCH: list[Path] = []


def scratch() -> Path:
    """A per-session scratch directory, on tmpfs when there is one: creating thousands of small
    sysfs files is ~10x faster there than on a disk-backed /tmp. Removed at exit."""
    if not _SCRATCH:
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="vgpu-sim-tests-", dir=base)))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return _SCRATCH[0]


def fresh_host(tmp_path: Path, machine: str = "8xmi300x") -> SimHost:
    """A new host: built once per machine per session, then copied (``cp -a``, fast)."""
    if machine not in _TEMPLATES:
        _TEMPLATES[machine] = scratch() / f"template-{machine}"
        SimHost.create(_TEMPLATES[machine], machine)
    dest = place(tmp_path)
    subprocess.run(["cp", "-a", "--", str(_TEMPLATES[machine]), str(dest)], check=True)
    return SimHost.open(dest)


def place(tmp_path: Path) -> Path:
    """A fresh state directory for SimHost.create, on the scratch tmpfs."""
    return Path(tempfile.mkdtemp(prefix=f"{tmp_path.name[:40]}-", dir=scratch())) / "h"


def dev(host: SimHost, address: str) -> Path:
    return host.sys_root / "bus" / "pci" / "devices" / address


def read(path: Path) -> str:
    return Path(path).read_text().strip()


def driver(host: SimHost, address: str) -> str | None:
    link = dev(host, address) / "driver"
    return os.path.basename(os.readlink(link)) if os.path.lexists(link) else None


def vfs(host: SimHost, pf: str) -> list[str]:
    d = dev(host, pf)
    links = sorted((n for n in os.listdir(d) if n.startswith("virtfn")), key=lambda n: int(n[6:]))
    return [os.path.basename(os.readlink(d / n)) for n in links]


def group(host: SimHost, address: str) -> int | None:
    link = dev(host, address) / "iommu_group"
    return int(os.path.basename(os.readlink(link))) if os.path.lexists(link) else None


def gim_pfs(host: SimHost) -> list[str]:
    return sorted(a for a in os.listdir(host.sys_root / "bus/pci/devices")
                  if read(dev(host, a) / "vendor") == "0x1002" and read(dev(host, a) / "device") == "0x74a1")


def bind_vfio(host: SimHost, address: str) -> None:
    """The kernel's sequence: driver_override, unbind from the current driver, drivers_probe."""
    host.kernel.write_attr(dev(host, address) / "driver_override", "vfio-pci")
    if driver(host, address):
        host.kernel.write_attr(dev(host, address) / "driver" / "unbind", address)
    host.kernel.write_attr(host.sys_root / "bus/pci/drivers_probe", address)


def snapshot(root: Path) -> dict[str, str]:
    """Every file's content and every link's target under root/sys, root/proc, root/dev."""
    out = {}
    for top in ("sys", "proc", "dev"):
        for dirpath, dirnames, filenames in os.walk(root / top):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                rel = str(p.relative_to(root))
                if p.is_symlink():
                    out[rel] = "-> " + os.readlink(p)
                elif p.is_file():
                    out[rel] = p.read_text()
                else:
                    out[rel] = "<dir>"
    return out
