"""AMD's GIM host driver as docs/hardware.md §3 describes it (sources: amd/MxGPU-Virtualization
``gim_shim/gim_config.c``, ``gim_drv.c``, ``libgv/core/hw/AI/mi300/mi300_nbio.c``):

- vf_num is one value per GPU in probe (address) order; as ``gim_handle_array_token`` and
  ``set_array_value`` in gim_config.c do, the last value given repeats for the GPUs after it
  (``vf_num=8`` means 8 everywhere); a value outside 1..31 becomes the default, 1;
- module parameters override /etc/gim_config; the config may hold vf_num and the two partition
  modes, which are single values for the whole hive (module parameters cannot set them); any
  other key makes GIM truncate the file and use defaults (docs/hardware.md §3);
- VFs are enabled at probe from vf_num; a count outside the model's allowed set or above
  TotalVFs (or the lower limit the firmware allows, the spec's ``vf_limit``) leaves the PF
  without VFs and logs why in GIM's kernel-log format (vgpu/host/kmsg.py reads it back);
- vf_num sets the compute partition (1 SPX, 2 DPX, 4 QPX, 8 CPX); an invalid (vf_num, compute,
  memory) combination falls back silently to NPS1 and the default compute mode; a new vf_num
  resets the partition modes GIM saved.
"""

from __future__ import annotations

from vgpu.catalog import DEFAULT as CATALOG
from vgpu.catalog import ComputePartition, MemoryPartition
from vgpu.errors import HostError
from vgpu.model.pci import PciAddress
from vgpu.sim.pcicore import Ctx, create_vfs, ensure_not_held, gim_log, gim_takes
from vgpu.sim.state import Function, GimSaved

CONFIG_KEYS = ("vf_num", "accelerator_partition_mode", "memory_partition_mode")
DEFAULT_COMPUTE = {1: "SPX", 2: "DPX", 4: "QPX", 8: "CPX"}
_MEMORY_NUMBERS = {"1": "NPS1", "2": "NPS2", "4": "NPS4"}
_COMPUTE_NUMBERS = {"1": "SPX", "2": "DPX", "4": "QPX", "8": "CPX"}


def read_config(ctx: Ctx, text: str | None) -> tuple[dict[str, list[str]], bool]:
    """Parse /etc/gim_config. Returns (settings, truncate): an unknown key empties the file."""
    settings: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or key not in CONFIG_KEYS:
            ctx.log(f"gim warning libgv: invalid entry {line[:60]!r} in /etc/gim_config: "
                    "clearing the file and using defaults")
            return {}, True
        values = [v.strip() for v in value.split(",")]
        if key != "vf_num" and len(values) != 1:  # hive-wide scalars: kstrtoint fails, ignored
            ctx.log(f"gim warning libgv: Failed to transfer str: {value.strip()[:40]}")
            continue
        settings[key] = values
    return settings, False


def effective_settings(ctx: Ctx, params: dict[str, str],
                       config: dict[str, list[str]]) -> dict[str, list[str]]:
    """Module parameters override the config file, key by key."""
    out = dict(config)
    if params.get("vf_num"):
        out["vf_num"] = [v.strip() for v in params["vf_num"].split(",")]
    enabled = []
    for entry in (params.get("enabled_devices") or "").split(";"):
        if entry.strip():
            try:
                enabled.append(str(PciAddress.parse(entry.strip())))
            except Exception:
                ctx.log(f"gim warning libgv: ignoring malformed enabled_devices entry {entry.strip()!r}")
    if enabled:
        out["enabled_devices"] = enabled
    return out


def gpu_index(ctx: Ctx, pf: Function) -> int:
    """The PF's position among the GPUs gim drives, in address order (GIM's probe order)."""
    eligible = [f.address for f in ctx.state.sorted_functions() if gim_takes(ctx.state, f)]
    return eligible.index(pf.address)


def _pick(values: list[str] | None, index: int) -> str | None:
    """One value per GPU; GPUs past the end of the list repeat the last value (gim_config.c)."""
    if not values:
        return None
    value = values[min(index, len(values) - 1)]
    return value or None


def _vf_num(ctx: Ctx, pf: Function, raw: str) -> int:
    """GIM's range check (VF_NUMBER 1..31): anything else is replaced by the default, 1."""
    if raw.isdigit() and 1 <= int(raw) <= 31:
        return int(raw)
    gim_log(ctx, pf, "gim_conf_init:700", f"invalid token(vf_num) value: {raw}; change to default value: 1",
            "warning")
    return 1


def probe(ctx: Ctx, pf: Function) -> None:
    """gim's probe: bind, choose partitions, enable vf_num VFs when firmware and model allow."""
    model = CATALOG.match(pf.vendor, pf.device).model
    index = gpu_index(ctx, pf)
    settings = ctx.state.gim_config
    vf_num = _vf_num(ctx, pf, _pick(settings.get("vf_num"), index) or "1")
    pf.driver = "gim"
    ctx.dirty.add(pf.address)
    gim_log(ctx, pf, "amdgv_device_init:1187", f"GPU {index}: {model.name} [{pf.vendor:04x}:{pf.device:04x}]")
    allowed = sorted(model.gim_vf_counts)
    if vf_num not in model.gim_vf_counts:
        gim_log(ctx, pf, "amdgv_gpuiov_set_vf_num:402",
                f"VF number {vf_num} is not supported, valid values: {', '.join(map(str, allowed))}", "error")
        _set_modes(pf, 1, "SPX", "NPS1")
        return
    if pf.sriov is None or not pf.sriov.total_vfs:  # a spec refuses this for GIM's GPUs; belt and braces
        gim_log(ctx, pf, "amdgv_gpuiov_init:211", "SR-IOV capability not found", "error")
        _set_modes(pf, 1, "SPX", "NPS1")
        return
    limit = pf.sriov.total_vfs if pf.sriov.vf_limit is None else min(pf.sriov.vf_limit, pf.sriov.total_vfs)
    if vf_num > limit:
        # the line a user of 8.4.0.K reported (amd/MxGPU-Virtualization issue 13, docs/hardware.md §3)
        gim_log(ctx, pf, "amdgv_parse_config_opt:1020",
                f"VF number {vf_num} to be enabled exceeds the vf limit {limit}.", "error")
        _set_modes(pf, 1, "SPX", "NPS1")
        return
    needed = _min_gim(model, vf_num)
    version = ctx.state.module_versions.get("gim", "")
    if needed and _version(version) < _version(needed):
        # release notes: MI350X/MI355X 1 VF from GIM 8.5, 2 and 8 VFs from 9.1 (docs/hardware.md §3)
        gim_log(ctx, pf, "amdgv_gpuiov_set_vf_num:409",
                f"VF number {vf_num} is not supported on {model.name} by GIM {version} (needs {needed})",
                "error")
        _set_modes(pf, 1, "SPX", "NPS1")
        return
    compute, memory = _partition(ctx, pf, model, vf_num, index)
    _set_modes(pf, vf_num, compute, memory)
    ctx.state.gim_saved[pf.address] = GimSaved(vf_num=vf_num, compute=compute, memory=memory)
    gim_log(ctx, pf, "mi300_gpuiov_enable_sriov:233", f"enable {vf_num} VF(s), {compute}/{memory}")
    create_vfs(ctx, pf, vf_num)


def _min_gim(model, vf_num: int) -> str | None:
    combo = model.default_combo(vf_num)
    return combo.min_gim if combo else None


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def _set_modes(pf: Function, vf_num: int, compute: str, memory: str) -> None:
    pf.compute_partition, pf.memory_partition = compute, memory


def _partition(ctx: Ctx, pf: Function, model, vf_num: int, index: int) -> tuple[str, str]:
    settings = ctx.state.gim_config
    want_c = _mode(_pick(settings.get("accelerator_partition_mode"), index), _COMPUTE_NUMBERS)
    want_m = _mode(_pick(settings.get("memory_partition_mode"), index), _MEMORY_NUMBERS)
    saved = ctx.state.gim_saved.get(pf.address)
    if saved is not None and saved.vf_num != vf_num:  # a new vf_num resets the saved modes
        saved = None
    default_c = DEFAULT_COMPUTE[vf_num]
    default_m = model.gim_default_memory(vf_num).value  # NPS1, or NPS2 on MI350-series multi-VF
    compute = want_c or (saved.compute if saved else default_c)
    memory = want_m or (saved.memory if saved else default_m)
    if not _valid(model, vf_num, compute, memory):  # GIM falls back silently
        return default_c, default_m
    return compute, memory


def _mode(value: str | None, numbers: dict[str, str]) -> str | None:
    if value is None:
        return None
    return numbers.get(value, value.upper())


def _valid(model, vf_num: int, compute: str, memory: str) -> bool:
    try:
        return model.combo(vf_num, ComputePartition(compute), MemoryPartition(memory)) is not None
    except ValueError:
        return False


def write_partition(ctx: Ctx, pf: Function, attr: str, value: str) -> None:
    """Runtime writes of memory_partition_mode / accelerator_partition_profile on a gim PF:
    accepted only for a valid (vf_num, compute, memory) combination, else EINVAL."""
    model = CATALOG.match(pf.vendor, pf.device).model
    vf_num = pf.sriov.num_vfs if pf.sriov else 0
    text = value.strip().upper()
    compute, memory = pf.compute_partition, pf.memory_partition
    if attr == "memory_partition_mode":
        memory = _MEMORY_NUMBERS.get(text, text)
    else:
        compute = _COMPUTE_NUMBERS.get(text, text)
    if vf_num == 0 or not _valid(model, vf_num, compute, memory):
        gim_log(ctx, pf, "amdgv_set_partition_mode:655",
                f"invalid partition {compute}/{memory} for {vf_num} VF(s)", "error")
        raise HostError(f"writing {value.strip()!r} to {pf.address}/{attr} failed: Invalid argument "
                        f"(EINVAL): {compute}/{memory} is not valid with {vf_num} VF(s) on {model.name}")
    ensure_not_held(ctx, ctx.state.vfs_of(pf), f"changing the partition of {pf.address}")
    pf.compute_partition, pf.memory_partition = compute, memory
    ctx.state.gim_saved[pf.address] = GimSaved(vf_num=vf_num, compute=compute, memory=memory)
    ctx.dirty.add(pf.address)
    gim_log(ctx, pf, "amdgv_set_partition_mode:671", f"partition mode set to {compute}/{memory}")
