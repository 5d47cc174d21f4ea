"""AMD's GIM capability matrix: which (VFs, compute, memory) modes a GIM release allows on a host OS and GPU.

The facts live in ``vgpu/data/gim-matrix.json`` (each row cites the release page it comes from,
docs/hardware.md §9); this module loads them, resolves each release's inherited rows, and picks the
row a host falls under. Pure: the host's GIM version, /etc/os-release and kernel release come in as
values (vgpu/host/facts.py reads them).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from vgpu.catalog import DEFAULT as CATALOG
from vgpu.catalog import ComputePartition, MemoryPartition

MATRIX_FILE = Path(__file__).resolve().parent / "data" / "gim-matrix.json"
LEVELS = ("supported", "preview", "firmware-gated")


@dataclass(frozen=True)
class HostOs:
    os: str  # /etc/os-release ID, e.g. "ubuntu", "rhel"
    version: str  # VERSION_ID, e.g. "24.04", "9.4"
    kernel: str | None = None  # a release prefix ("6.14"); None: any kernel

    def label(self) -> str:
        return f"{self.os} {self.version}" + (f" (kernel {self.kernel})" if self.kernel else "")

    def same_os(self, os_id: str | None, version: str | None) -> bool:
        return os_id == self.os and version == self.version

    def kernel_matches(self, release: str | None) -> bool:
        if self.kernel is None or release is None:
            return True
        return release == self.kernel or release.startswith((self.kernel + ".", self.kernel + "-"))


@dataclass(frozen=True)
class Mode:
    vfs: int
    compute: str
    memory: str
    level: str

    def label(self) -> str:
        return f"{self.vfs} VF{'s' if self.vfs > 1 else ''} {self.compute}/{self.memory}"


@dataclass(frozen=True)
class Row:
    release: str  # the GIM release this row is part of (it may have been inherited)
    gpu: str
    host: HostOs | None  # None: the release page names no host OS for this GPU
    modes: tuple[Mode, ...]
    only: bool
    source: str  # the release page the row comes from
    unverified: str = ""

    def host_label(self) -> str:
        return self.host.label() if self.host else "any host OS (none named)"

    def label(self) -> str:
        return f"GIM {self.release} / {self.host_label()} / {self.gpu}"

    def mode(self, vfs: int, compute: str | None, memory: str | None) -> Mode | None:
        return next((m for m in self.modes if m.vfs == vfs and compute in (None, m.compute)
                     and memory in (None, m.memory)), None)

    def modes_text(self) -> str:
        return ", ".join(m.label() for m in self.modes)

    def to_dict(self) -> dict:
        return {"gim": self.release, "gpu": self.gpu,
                "host": None if self.host is None else {"os": self.host.os, "version": self.host.version,
                                                        "kernel": self.host.kernel},
                "modes": [{"vfs": m.vfs, "compute": m.compute, "memory": m.memory, "level": m.level}
                          for m in self.modes],
                "only": self.only, "source": self.source, "unverified": self.unverified or None}


@dataclass(frozen=True)
class Release:
    name: str
    rows: tuple[Row, ...]
    unverified: str = ""

    @property
    def number(self) -> tuple[int, int, int]:
        return release_number(self.name)  # type: ignore[return-value]

    def rows_for(self, gpu: str) -> list[Row]:
        return [r for r in self.rows if r.gpu.lower() == gpu.lower()]


def release_number(text: str | None) -> tuple[int, int, int] | None:
    """"9.1.0.K" -> (9, 1, 0); None when it is not a GIM version."""
    parts = (text or "").strip().split(".")
    try:
        nums = tuple(int(p) for p in parts[:3])
    except ValueError:
        return None
    return nums if len(nums) == 3 else None  # type: ignore[return-value]


class MatrixError(ValueError):
    """The shipped data file is malformed: a packaging bug, caught by tests/unit/test_matrix.py."""


@functools.cache
def releases(path: Path = MATRIX_FILE) -> tuple[Release, ...]:
    """Every release in the data file, oldest first, with inherited rows resolved."""
    # JSON, not YAML: `status` checks the matrix too and must run where PyYAML is not installed
    from vgpu.inputs import load_json
    data = load_json(path, "GIM capability matrix", limit=256 * 1024)  # shipped data, about 12 KiB
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("releases"), list):
        raise MatrixError(f"{path}: expected version: 1 and a list of releases")
    out: list[Release] = []
    for entry in data["releases"]:
        out.append(_release(entry, {r.name: r for r in out}))
    if [r.number for r in out] != sorted(r.number for r in out):
        raise MatrixError(f"{path}: releases are not in release order")
    return tuple(out)


def _release(entry: dict, known: dict[str, Release]) -> Release:
    name = str(entry["gim"])
    if release_number(name) is None:
        raise MatrixError(f"release {name!r} is not a GIM version")
    base = known.get(entry["inherits"]) if entry.get("inherits") else None
    if entry.get("inherits") and base is None:
        raise MatrixError(f"release {name} inherits unknown release {entry['inherits']}")
    added = [_row(r, name, str(entry["source"])) for r in entry.get("adds") or ()]
    keys = {(r.gpu, r.host) for r in added}
    inherited = [Row(name, r.gpu, r.host, r.modes, r.only, r.source, r.unverified)
                 for r in (base.rows if base else ()) if (r.gpu, r.host) not in keys]
    return Release(name, tuple(inherited + added), str(entry.get("unverified") or ""))


def _row(raw: dict, release: str, source: str) -> Row:
    gpu = str(raw["gpu"])
    if CATALOG.by_name(gpu) is None:
        raise MatrixError(f"release {release}: GPU {gpu} is not in the catalog")
    host = raw.get("host")
    host_os = None if host is None else HostOs(str(host["os"]), str(host["version"]),
                                               None if host.get("kernel") is None else str(host["kernel"]))
    modes = []
    for vfs, compute, memory, level in raw["modes"]:
        ComputePartition(compute), MemoryPartition(memory)  # noqa: B018 - raises on a typo
        if level not in LEVELS:
            raise MatrixError(f"release {release}, {gpu}: level {level!r} is not one of {', '.join(LEVELS)}")
        modes.append(Mode(int(vfs), compute, memory, level))
    return Row(release, gpu, host_os, tuple(modes), bool(raw.get("only", False)), source,
               str(raw.get("unverified") or ""))


def pick_release(version: str | None) -> tuple[Release, str | None]:
    """The release whose rows apply to a host running GIM ``version``, and a warning when it is not
    that exact release: a newer, unknown or unreadable version takes the newest known release at or
    below it (the newest of all for an unreadable one), never a crash."""
    known = releases()
    number = release_number(version)
    if number is None:
        newest = known[-1]
        return newest, (f"gim's version {version!r} cannot be read as a GIM release: checked against the newest "
                        f"row vgpu knows, GIM {newest.name}")
    exact = next((r for r in known if r.number == number), None)
    if exact is not None:
        return exact, None
    below = [r for r in known if r.number < number]
    if not below:
        return known[0], None  # older than the matrix: the caller refuses (ROCm 7.0 needs 8.4.0.K)
    return below[-1], (f"GIM {version} is not in vgpu's capability matrix: planned with the rows of the newest "
                       f"release before it, GIM {below[-1].name} (docs/hardware.md §9)")


def first_release_with(gpu: str) -> Release | None:
    return next((r for r in releases() if r.rows_for(gpu)), None)


def in_any_release(gpu: str) -> bool:
    return first_release_with(gpu) is not None


TABLE_BEGIN = "<!-- gim-matrix table: generated by `python -m vgpu.matrix` from vgpu/data/gim-matrix.json -->"
TABLE_END = "<!-- end of gim-matrix table -->"
_MARK = {"supported": "", "preview": " (preview)", "firmware-gated": " *"}


def markdown_table() -> str:
    """The matrix as the Markdown table docs/hardware.md §9 carries (every release with its resolved rows)."""
    lines = [TABLE_BEGIN, "", "| GIM | host OS | kernel | GPU | modes (VFs compute/memory) | other modes | source | UNVERIFIED |",
             "|---|---|---|---|---|---|---|---|"]
    for release in releases():
        for row in release.rows:
            host = "any (none named)" if row.host is None else f"{row.host.os} {row.host.version}"
            kernel = (row.host.kernel if row.host and row.host.kernel else "any")
            modes = "; ".join(f"{m.vfs} {m.compute}/{m.memory}{_MARK[m.level]}" for m in row.modes)
            tag = row.source.split("mainline%2F")[-1].split(" ")[0]
            note = "; ".join(n for n in (row.unverified, release.unverified) if n)
            lines.append(f"| {release.name} | {host} | {kernel} | {row.gpu} | {modes} | "
                         f"{'refused' if row.only else 'warning'} | [{tag}]({row.source.split(' ')[0]}) | "
                         f"{note.replace('|', '/')} |")
    lines += ["", TABLE_END]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
