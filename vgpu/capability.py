"""Whether a host may run a profile's SR-IOV mode, by AMD's GIM capability matrix (vgpu/matrix.py).

``assess`` picks the matrix row for the host's GIM release, /etc/os-release and kernel, and the GPU,
then says: allowed (the level the row gives it), allowed with a warning (a preview or firmware-gated
mode, a mode the driver accepts that no AMD table lists, a host OS the release page does not name),
or refused (one sentence naming the row and what would work instead). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu import matrix
from vgpu.matrix import Mode, Release, Row

MIN_RELEASE = (8, 4, 0)  # ROCm 7.0 requires GIM 8.4.0.K (docs/hardware.md §3)


@dataclass(frozen=True)
class HostView:
    """What the host said about itself; None where it could not be read."""

    gim: str | None
    os_id: str | None = None
    os_version: str | None = None
    kernel: str | None = None

    def os_label(self) -> str:
        if self.os_id is None:
            return "an unknown host OS"
        return f"{self.os_id} {self.os_version or '?'}" + (f" (kernel {self.kernel})" if self.kernel else "")

    def to_dict(self) -> dict:
        return {"gim": self.gim, "os": self.os_id, "version": self.os_version, "kernel": self.kernel}


@dataclass(frozen=True)
class Verdict:
    row: Row | None  # the row the plan used; None when no row applies (a GPU in no release's table)
    level: str  # supported | preview | firmware-gated | unlisted | refused | unknown
    problems: tuple[tuple[str, str | None], ...] = ()  # (sentence, fix)
    warnings: tuple[str, ...] = ()
    host: HostView | None = None
    rows_considered: tuple[Row, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        return {"level": self.level, "row": self.row.to_dict() if self.row else None,
                "host": self.host.to_dict() if self.host else None}


def assess(gpu: str, vfs: int, compute: str | None, memory: str | None, host: HostView) -> Verdict:
    """The matrix's verdict on ``vfs`` VFs (``compute``/``memory``) of ``gpu`` on ``host``."""
    number = matrix.release_number(host.gim)
    if number is not None and number < MIN_RELEASE:
        first = matrix.releases()[0].name
        return Verdict(None, "refused", ((f"GIM {host.gim} is older than every release in vgpu's capability "
                                          f"matrix (the first is {first}, which ROCm 7.0 guests need)",
                                          f"upgrade gim-dkms to {first} or later"),), host=host)
    release, note = matrix.pick_release(host.gim)
    warnings = [note] if note else []
    if release.unverified:
        warnings.append(f"GIM {release.name}: {release.unverified}")
    rows = release.rows_for(gpu)
    if not rows:
        return _no_rows(gpu, release, host, warnings)
    chosen, more = _host_rows(rows, release, gpu, host)
    if isinstance(chosen, Verdict):
        return chosen
    warnings += more
    return _judge(chosen, vfs, compute, memory, host, warnings, release)


def _no_rows(gpu: str, release: Release, host: HostView, warnings: list[str]) -> Verdict:
    first = matrix.first_release_with(gpu)
    if first is None:
        warnings.append(f"{gpu} is in no GIM release's support table (vgpu's capability matrix, "
                        "docs/hardware.md §9): planned with what GIM's driver accepts, unvalidated by AMD")
        return Verdict(None, "unknown", warnings=tuple(warnings), host=host)
    if first.number > release.number:
        fix = f"upgrade gim-dkms to {first.name} or later"
    else:
        fix = "use a GIM release that lists it (docs/hardware.md §9)"
    return Verdict(None, "refused", ((f"GIM {release.name} lists no SR-IOV support for {gpu} (the capability "
                                      f"matrix has it from GIM {first.name})", fix),),
                   warnings=tuple(warnings), host=host)


def _host_rows(rows: list[Row], release: Release, gpu: str, host: HostView) -> tuple[list[Row] | Verdict, list[str]]:
    """The rows that apply to this host: its own row, or every row of the GPU (with a warning) when the
    host OS is unknown or not named on the release page. A named OS on another kernel is refused."""
    anyhost = [r for r in rows if r.host is None]
    if anyhost:
        return anyhost, []
    if host.os_id is None:
        return rows, [f"the host OS could not be read (no /etc/os-release): checked against every host GIM "
                      f"{release.name} lists for {gpu}"]
    same_os = [r for r in rows if r.host.same_os(host.os_id, host.os_version)]
    if not same_os:
        named = "; ".join(sorted({r.host.label() for r in rows}))
        return rows, [f"{host.os_label()} is not a host OS GIM {release.name} lists for {gpu} (it lists {named}): "
                      "planned against those rows, unvalidated by AMD on this OS"]
    mine = [r for r in same_os if r.host.kernel_matches(host.kernel)]
    if mine:
        return mine, []
    kernels = ", ".join(sorted({r.host.kernel for r in same_os if r.host.kernel}))
    sentence = (f"GIM {release.name} supports {gpu} on {host.os_id} {host.os_version} only with kernel {kernels}, "
                f"and this host runs {host.kernel} (matrix row {same_os[0].label()}, {same_os[0].source})")
    return Verdict(same_os[0], "refused", ((sentence, f"boot a {kernels} kernel and plan again"),),
                   host=host), []


def _judge(rows: list[Row], vfs: int, compute: str | None, memory: str | None, host: HostView,
           warnings: list[str], release: Release) -> Verdict:
    listed = [(r, r.mode(vfs, compute, memory)) for r in rows]
    hits = [(r, m) for r, m in listed if m is not None]
    want = Mode(vfs, compute or "?", memory or "?", "").label()
    if hits:
        row, mode = min(hits, key=lambda h: matrix.LEVELS.index(h[1].level))
        warnings += _unverified(row)
        if mode.level != "supported":
            what = "a preview" if mode.level == "preview" else "firmware-gated (\"*\": it needs AMD's multi-VF " \
                                                               "firmware, a VBIOS not named ..._1VF)"
            warnings.append(f"{mode.label()} on {row.gpu} is {what} in matrix row {row.label()} ({row.source})")
        return Verdict(row, mode.level, warnings=tuple(warnings), host=host, rows_considered=tuple(rows))
    row = rows[0]
    if not any(r.only for r in rows):
        warnings += _unverified(row)
        warnings.append(f"{want} on {row.gpu} is accepted by GIM's driver but not in AMD's validated matrix: row "
                        f"{row.label()} lists {row.modes_text()} ({row.source})")
        return Verdict(row, "unlisted", warnings=tuple(warnings), host=host, rows_considered=tuple(rows))
    sentence = (f"{want} on {row.gpu} is not allowed by matrix row {row.label()}, which allows only "
                f"{row.modes_text()} ({row.source})")
    return Verdict(row, "refused", ((sentence, _instead(row, vfs, compute, memory, release)),),
                   warnings=tuple(warnings), host=host, rows_considered=tuple(rows))


def _instead(row: Row, vfs: int, compute: str | None, memory: str | None, release: Release) -> str:
    """What would work: a mode this row allows, and the hosts (of this release, or a newer one) that allow
    the wanted mode."""
    options = [f"use {row.modes_text()} here"]
    elsewhere = sorted({r.host_label() for r in release.rows_for(row.gpu)
                        if r is not row and r.mode(vfs, compute, memory) is not None})
    if elsewhere:
        options.append(f"or run it on a host GIM {release.name} allows it on: {'; '.join(elsewhere)}")
    else:
        later = next((r for r in matrix.releases() if r.number > release.number
                      and any(x.mode(vfs, compute, memory) for x in r.rows_for(row.gpu))), None)
        if later is not None:
            options.append(f"or upgrade gim-dkms to {later.name}, which lists it")
    return ", ".join(options)


def _unverified(row: Row) -> list[str]:
    return [f"matrix row {row.label()}: UNVERIFIED: {row.unverified}"] if row.unverified else []
