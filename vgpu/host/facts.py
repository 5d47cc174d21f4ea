"""Host-wide facts for readiness: IOMMU, kernel command line, modules, hugepages, modprobe.d."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from vgpu.host.paths import HostPaths
from vgpu.inputs import read_optional
from vgpu.model.inventory import HostFacts, ModuleInfo

# Modules readiness looks at. sysfs names use underscores (vfio-pci -> vfio_pci).
WATCHED_MODULES = ("gim", "vfio", "vfio_pci", "vfio_iommu_type1", "amdgpu")


def read_host_facts(paths: HostPaths) -> HostFacts:
    cmdline = _read(paths.proc / "cmdline", kind="proc file") if paths.proc else None
    modprobe = read_modprobe_d(paths.etc) if paths.etc else _ModprobeD()
    return HostFacts(
        iommu_groups=_count(paths.sys / "kernel" / "iommu_groups"),
        iommu_units=_count(paths.sys / "class" / "iommu"),
        cmdline=cmdline,
        modules={name: _module(paths.sys / "module" / name) for name in WATCHED_MODULES},
        hugepages_1g=_int(_read(paths.sys / "kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages")),
        hugepages_2m=_int(_read(paths.sys / "kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")),
        blacklisted=tuple(sorted(set(cmdline_blacklist(cmdline)) | set(modprobe.blacklist))),
        dev_vfio_groups=_vfio_groups(paths.dev) if paths.dev else None,
        modprobe_options=modprobe.options,
        cpu_vendor=_cpu_vendor(paths.proc) if paths.proc else None,
        **_os_release(paths.etc),
        kernel_release=_one_line(_read(paths.proc / "sys/kernel/osrelease", kind="proc file")) if paths.proc else None,
    )


def _os_release(etc: Path | None) -> dict[str, str | None]:
    """ID and VERSION_ID of <etc>/os-release (os-release(5): KEY=VALUE, shell quoting)."""
    values: dict[str, str] = {}
    text = _read(etc / "os-release", strip=False, kind="config file") if etc else None
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if not sep or key.strip() not in ("ID", "VERSION_ID"):
            continue
        try:
            words = shlex.split(value)
        except ValueError:
            continue
        values[key.strip()] = _one_line(words[0] if words else "")
    return {"os_id": values.get("ID") or None, "os_version": values.get("VERSION_ID") or None}


def _one_line(text: str | None) -> str | None:
    """A short printable token, or None: these values go into messages and JSON."""
    text = (text or "").strip()
    if not text or len(text) > 64 or not all(c.isprintable() and not c.isspace() for c in text):
        return None
    return text


def cmdline_blacklist(cmdline: str | None) -> list[str]:
    """Modules named by ``modprobe.blacklist=a,b`` (possibly repeated) on the kernel command line."""
    out: list[str] = []
    for word in (cmdline or "").split():
        if word.startswith("modprobe.blacklist="):
            out += [m.replace("-", "_") for m in word.split("=", 1)[1].split(",") if m]
    return out


class _ModprobeD:
    def __init__(self) -> None:
        self.blacklist: list[str] = []
        self.options: dict[str, dict[str, str]] = {}


def read_modprobe_d(etc: Path) -> _ModprobeD:
    """``blacklist``, ``install X /bin/false`` and ``options`` lines of <etc>/modprobe.d/*.conf."""
    result = _ModprobeD()
    directory = etc / "modprobe.d"
    try:
        files = sorted(f for f in os.listdir(directory) if f.endswith(".conf"))
    except OSError:
        return result
    for name in files:
        for line in (_read(directory / name, strip=False, kind="config file") or "").splitlines():
            _modprobe_line(line.split("#", 1)[0], result)
    return result


def _modprobe_line(line: str, result: _ModprobeD) -> None:
    try:
        words = shlex.split(line)
    except ValueError:
        return
    if len(words) >= 2 and words[0] == "blacklist":
        result.blacklist.append(words[1].replace("-", "_"))
    elif len(words) >= 3 and words[0] == "install" and words[2] in ("/bin/false", "/bin/true"):
        result.blacklist.append(words[1].replace("-", "_"))
    elif len(words) >= 3 and words[0] == "options":
        opts = result.options.setdefault(words[1].replace("-", "_"), {})
        for word in words[2:]:
            key, _, value = word.partition("=")
            opts[key] = value


def _module(directory: Path) -> ModuleInfo:
    # Built-in modules appear under /sys/module too: existence means available and active.
    if not directory.is_dir():
        return ModuleInfo(name=directory.name, loaded=False)
    params = {}
    try:
        for name in sorted(os.listdir(directory / "parameters")):
            value = _read(directory / "parameters" / name)
            if value is not None:
                params[name] = value
    except OSError:
        pass
    return ModuleInfo(name=directory.name, loaded=True, version=_read(directory / "version"),
                      parameters=params)


def _vfio_groups(dev: Path) -> tuple[int, ...]:
    try:
        return tuple(sorted(int(n) for n in os.listdir(dev / "vfio") if n.isdigit()))
    except OSError:
        return ()


def _cpu_vendor(proc: Path) -> str | None:
    for line in (_read(proc / "cpuinfo", strip=False, kind="proc file") or "").splitlines():
        if line.startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    return None


def _count(directory: Path) -> int:
    try:
        return len(os.listdir(directory))
    except OSError:
        return 0


def _read(path: Path, strip: bool = True, kind: str = "sysfs attribute") -> str | None:
    """The file's text, None when absent or unreadable; through vgpu.inputs, so a FIFO or an
    oversized file in a capture is one InputError, never a hang. Undecodable bytes are replaced:
    these files are only scanned for a few words."""
    raw = read_optional(path, kind)
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    return text.strip() if strip else text


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
