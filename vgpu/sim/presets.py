"""Defaults per ``kind`` of function: ids, class, driver, BARs, link, SR-IOV layout.

Real ids: MI-series ids from the catalog (docs/hardware.md §1); MI300-class PFs report class
0x120000 (processing accelerator); a VF sits at PF routing id + 16 as in the public
PF 85:00.0 / VF 85:02.0 example (docs/hardware.md §1), stride 1. Mellanox ConnectX-7 15b3:1021 (VF
15b3:101e), Samsung PM173x NVMe 144d:a824, ASPEED AST2600 VGA 1a03:2000, AMD Genoa root port
1022:14ab / root complex 1022:14a4 / IOMMU 1022:149e, Broadcom PEX89000 switch 1000:c030.

SIMULATED, not measured: BAR sizes. A PF's VRAM BAR is the next power of two above its HBM
(MI300X: 256 GiB; docs/hardware.md §1 says similar GPUs expose 256 GiB), each VF's VRAM aperture is
1/8 of that; doorbell 2 MiB and register 1 MiB BARs are plausible guesses.
"""

from __future__ import annotations

from vgpu.catalog import DEFAULT as CATALOG
from vgpu.catalog import GpuModel
from vgpu.sim.spec import BarSpec, FunctionSpec, LinkSpec, SriovSpec

GEN5 = LinkSpec(speed="32.0 GT/s PCIe", width=16)
GEN4 = LinkSpec(speed="16.0 GT/s PCIe", width=16)

_GIB = 1 << 30


def _bars(*items: tuple[int, int | str, str]) -> tuple[BarSpec, ...]:
    return tuple(BarSpec(index=i, size=s, type=t) for i, s, t in items)


_PRESETS: dict[str, dict] = {
    "nic": dict(vendor=0x15B3, device=0x1021, class_code=0x020000, driver="mlx5_core",
                bars=_bars((0, "32M", "mem64pref")), link=GEN5),
    "nvme": dict(vendor=0x144D, device=0xA824, class_code=0x010802, driver="nvme",
                 bars=_bars((0, "32K", "mem64")), link=LinkSpec(speed="16.0 GT/s PCIe", width=4)),
    "vga": dict(vendor=0x1A03, device=0x2000, class_code=0x030000, driver="ast",
                bars=_bars((0, "64M", "mem32pref"), (1, "256K", "mem32")),
                link=LinkSpec(speed="5.0 GT/s PCIe", width=1)),
    "audio": dict(class_code=0x040300, driver="snd_hda_intel", bars=_bars((0, "16K", "mem32")), link=GEN4),
    "bridge": dict(vendor=0x1000, device=0xC030, class_code=0x060400, driver="pcieport", link=GEN5),
    "root_port": dict(vendor=0x1022, device=0x14AB, class_code=0x060400, driver="pcieport", link=GEN5),
    "host_bridge": dict(vendor=0x1022, device=0x14A4, class_code=0x060000, driver=None),
    "iommu": dict(vendor=0x1022, device=0x149E, class_code=0x080600, driver=None),
    "other": dict(driver=None),
}

# Per-kind SR-IOV layout defaults (offset, stride, VF device, per-VF BARs).
_NIC_SRIOV = dict(offset=2, stride=1, vf_device=0x101E, vf_bars=_bars((0, "1M", "mem64pref")))
_NVME_SRIOV = dict(offset=1, stride=1, vf_device=0xA824, vf_bars=_bars((0, "32K", "mem64")))


def resolve(spec: FunctionSpec) -> dict:
    """Every field of the function with the kind's defaults filled in (a plain dict)."""
    base = _gpu_defaults(spec) if spec.kind == "gpu" else dict(_PRESETS[spec.kind])
    out = {
        "vendor": spec.vendor if spec.vendor is not None else base.get("vendor"),
        "device": spec.device if spec.device is not None else base.get("device"),
        "class_code": spec.class_code if spec.class_code is not None else base.get("class_code"),
        "driver": None if spec.no_driver else (spec.driver or base.get("driver")),
        "bars": spec.bars if spec.bars is not None else base.get("bars", ()),
        "link": spec.link if spec.link is not None else base.get("link"),
        "model": base.get("model"),
    }
    out["subsystem_vendor"] = spec.subsystem_vendor if spec.subsystem_vendor is not None else out["vendor"]
    out["subsystem_device"] = spec.subsystem_device if spec.subsystem_device is not None else out["device"]
    out["sriov"] = _sriov(spec, base)
    return out


def _gpu_defaults(spec: FunctionSpec) -> dict:
    model = CATALOG.by_name(spec.model) if spec.model else None
    if model is None:  # an AMD GPU given by ids only (the catalog may or may not know it)
        match = CATALOG.match(spec.vendor or 0x1002, spec.device or 0)
        model = match.model if match and not match.is_vf else None
    vram = _vram_bar(model)
    modern = model is not None and model.arch in ("gfx942", "gfx950")
    out = dict(vendor=0x1002, device=model.pf_ids[0] if model else None,
               class_code=0x120000 if modern else 0x038000, driver="amdgpu",
               bars=_bars((0, vram, "mem64pref"), (2, "2M", "mem64pref"), (5, "1M", "mem32")),
               link=GEN5 if modern else GEN4, model=model.name if model else None)
    if model is not None and model.sriov_capable:
        out["sriov"] = dict(total_vfs=1, offset=16, stride=1,
                            vf_device=model.vf_ids[0] if model.vf_ids else None,
                            vf_bars=_bars((0, vram // 8, "mem64pref"), (2, "2M", "mem64pref"),
                                          (5, "512K", "mem32")))
    return out


def _vram_bar(model: GpuModel | None) -> int:
    gib = model.hbm_gb if model and model.hbm_gb else 64
    size = 1
    while size < gib:
        size <<= 1
    return size * _GIB


def _sriov(spec: FunctionSpec, base: dict) -> dict | None:
    """The SR-IOV layout, or None for a function without the capability."""
    preset = base.get("sriov") or {"nic": _NIC_SRIOV, "nvme": _NVME_SRIOV}.get(spec.kind)
    given: SriovSpec | None = spec.sriov
    if given is None:
        return dict(preset) if spec.kind == "gpu" and preset else None
    preset = preset or {}
    out = {
        "total_vfs": given.total_vfs,
        "offset": given.offset or preset.get("offset") or 1,
        "stride": given.stride or preset.get("stride") or 1,
        "vf_device": given.vf_device if given.vf_device is not None else preset.get("vf_device"),
        "vf_bars": given.vf_bars if given.vf_bars is not None else preset.get("vf_bars", ()),
        "initial_vfs": given.initial_vfs,
        "vf_limit": given.vf_limit,
    }
    return out
