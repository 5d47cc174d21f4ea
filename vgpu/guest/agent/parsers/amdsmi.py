"""Parsers for ``amd-smi`` per-GPU output: text ("GPU: 0" blocks), JSON and CSV, from both the ROCm
amd-smi (guests, bare metal) and the GIM host amd-smi (PF with nested VFs, "GPU 0:" headers,
NUM_OF_COMPUTE_UNITS, VBIOS/FB_INFO/NUM_VF blocks).

Every form becomes a list of ``SmiGpu``: typed accessors for what validation compares (BDF, device
id, market name, compute units, VRAM, partition modes, driver) plus ``fields``, the whole record
as a dict with lower-case keys so that unknown and future keys are kept. ROCm text keys
("NUM_COMPUTE_UNITS") and JSON keys ("num_compute_units") therefore read the same.

Standard library only, Python 3.8. The version and table outputs live in ``amdsmi_misc``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .blocks import Entry, parse_blocks, records, to_dict
from .common import (ParseError, first, is_na, json_payload, lines_of, normalize_bdf, parse_int,
                     require_text, size_mb)


@dataclass
class SmiVf:
    """A VF listed under its GPU by the GIM host amd-smi (``amd-smi list`` on the host)."""

    index: int
    bdf: Optional[str] = None
    uuid: Optional[str] = None
    fields: Dict[str, Any] = field(default_factory=dict)


@dataclass
class SmiGpu:
    """One GPU (or logical partition GPU) as amd-smi reports it. Values are None when absent or N/A."""

    index: int
    bdf: Optional[str] = None
    uuid: Optional[str] = None
    device_id: Optional[int] = None
    subsystem_id: Optional[int] = None
    market_name: Optional[str] = None
    compute_units: Optional[int] = None
    gfx_target: Optional[str] = None
    vram_total_mb: Optional[float] = None
    compute_partition: Optional[str] = None
    memory_partition: Optional[str] = None
    partition_id: Optional[int] = None
    driver_name: Optional[str] = None
    driver_version: Optional[str] = None
    vbios_version: Optional[str] = None
    kfd_id: Optional[int] = None
    node_id: Optional[int] = None
    hip_id: Optional[int] = None
    oam_id: Optional[int] = None
    vfs: List[SmiVf] = field(default_factory=list)
    fields: Dict[str, Any] = field(default_factory=dict)

    @property
    def device_id_hex(self) -> Optional[str]:
        return None if self.device_id is None else "0x%04x" % self.device_id


def _get(data: Any, *path: str) -> Any:
    """data[path[0]][path[1]]... with N/A and missing keys as None."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return None if is_na(data) else data


def _text(value: Any) -> Optional[str]:
    if value is None or isinstance(value, (dict, list)) or is_na(value):
        return None
    return str(value).strip()


def _vram_mb(data: Dict[str, Any]) -> Optional[float]:
    # ROCm `static` VRAM.SIZE, `metric --mem-usage` TOTAL_VRAM, GIM host FB_INFO.TOTAL_FB_SIZE.
    return first(size_mb(value) for value in (
        _get(data, "vram", "size"), _get(data, "mem_usage", "total_vram"),
        _get(data, "vram", "total"), _get(data, "fb_info", "total_fb_size")))


def _identity(gpu: SmiGpu, data: Dict[str, Any]) -> None:
    gpu.bdf = normalize_bdf(first((_get(data, "bdf"), _get(data, "bus", "bdf"))))
    gpu.uuid = _text(first((_get(data, "uuid"), _get(data, "asic", "uuid"))))
    gpu.device_id = parse_int(_get(data, "asic", "device_id"))
    gpu.subsystem_id = parse_int(_get(data, "asic", "subsystem_id"))
    gpu.market_name = _text(_get(data, "asic", "market_name"))
    gpu.compute_units = parse_int(first((_get(data, "asic", "num_compute_units"),
                                         _get(data, "asic", "num_of_compute_units"))))
    gpu.gfx_target = _text(_get(data, "asic", "target_graphics_version"))
    gpu.oam_id = parse_int(_get(data, "asic", "oam_id"))
    gpu.kfd_id = parse_int(_get(data, "kfd_id"))
    gpu.node_id = parse_int(_get(data, "node_id"))
    gpu.hip_id = parse_int(_get(data, "hip_id"))


def _state(gpu: SmiGpu, data: Dict[str, Any]) -> None:
    gpu.vram_total_mb = _vram_mb(data)
    gpu.compute_partition = _text(first((_get(data, "partition", "compute_partition"),
                                         _get(data, "partition", "accelerator_partition"))))
    gpu.memory_partition = _text(_get(data, "partition", "memory_partition"))
    gpu.partition_id = parse_int(first((_get(data, "partition", "partition_id"),
                                        _get(data, "partition_id"))))
    gpu.driver_name = _text(first((_get(data, "driver", "name"), _get(data, "driver", "driver_name"))))
    gpu.driver_version = _text(first((_get(data, "driver", "version"),
                                      _get(data, "driver", "driver_version"))))
    gpu.vbios_version = _text(first((_get(data, "vbios", "version"), _get(data, "ifwi", "version"))))


def gpu_from_dict(index: int, data: Dict[str, Any]) -> SmiGpu:
    """Build an SmiGpu from one record with lower-case keys (JSON object or parsed text block)."""
    gpu = SmiGpu(index=index, fields=data)
    _identity(gpu, data)
    _state(gpu, data)
    for vf_index, vf in enumerate(data.get("vfs") or []):
        if isinstance(vf, dict):
            gpu.vfs.append(_vf_from_dict(parse_int(vf.get("vf")), vf_index, vf))
    return gpu


def _vf_from_dict(index: Optional[int], fallback: int, data: Dict[str, Any]) -> SmiVf:
    return SmiVf(index=fallback if index is None else index, bdf=normalize_bdf(_get(data, "bdf")),
                 uuid=_text(_get(data, "uuid")), fields=data)


def _gpu_from_entry(index: int, entry: Entry) -> SmiGpu:
    vf_entries = records(entry.children, "VF")
    vf_ids = {id(vf) for _, vf in vf_entries}
    data = to_dict([child for child in entry.children if id(child) not in vf_ids])
    gpu = gpu_from_dict(index, data)
    for vf_index, vf in vf_entries:
        gpu.vfs.append(_vf_from_dict(vf_index, vf_index, to_dict(vf.children)))
    return gpu


def parse_amdsmi_text(text: str) -> List[SmiGpu]:
    """Parse text output made of "GPU: N" (or "GPU N:") blocks: ``list``, ``list -e``, ``static``
    (any section), ``metric``, ``process``, and the GIM host ``list``/``static``/``discovery``.

    Returns one SmiGpu per record, in printed order. Raises ParseError for empty text or text
    without any GPU record.
    """
    require_text(text, "amd-smi")
    found = records(parse_blocks(text), "GPU")
    if not found:
        raise ParseError("not amd-smi per-GPU output: no 'GPU: N' record found")
    return [_gpu_from_entry(index, entry) for index, entry in found]


def _gpu_dicts(payload: Any) -> List[Dict[str, Any]]:
    if isinstance(payload, dict) and isinstance(payload.get("gpu_data"), list):
        payload = payload["gpu_data"]  # amd-smi 26.x `static --json`
    if isinstance(payload, dict):
        payload = [payload]  # a single-GPU `metric --json`
    if not isinstance(payload, list):
        return []
    return [item for item in payload if isinstance(item, dict) and "gpu" in item]


def parse_amdsmi_json(text: str) -> List[SmiGpu]:
    """Parse ``--json`` output: {"gpu_data": [...]}, a list of GPU objects, or one GPU object.

    A banner before the JSON (amd-smi run as non-root) is skipped. Raises ParseError when there is
    no JSON or it holds no object with a "gpu" key.
    """
    items = _gpu_dicts(json_payload(text, "amd-smi"))
    if not items:
        raise ParseError("amd-smi JSON holds no GPU object (no 'gpu' key)")
    gpus = []
    for position, item in enumerate(items):
        index = parse_int(item.get("gpu"))
        gpus.append(gpu_from_dict(position if index is None else index, item))
    return gpus


def parse_amdsmi_csv(text: str) -> List[SmiGpu]:
    """Parse ``--csv`` output. The GIM host's ``list --csv`` repeats a GPU row per VF with
    gpu,gpu_bdf,gpu_uuid,vf,vf_bdf,vf_uuid columns; "gpu_" prefixes are dropped and "vf_" columns
    become SmiVf entries. Raises ParseError without a header holding a "gpu" column."""
    require_text(text, "amd-smi")
    rows = [line for line in lines_of(text) if line.strip()]
    reader = csv.DictReader(io.StringIO("\n".join(rows)))
    if not reader.fieldnames or "gpu" not in [name.strip().lower() for name in reader.fieldnames]:
        raise ParseError("not amd-smi CSV output: no 'gpu' column in the header")
    gpus: Dict[int, SmiGpu] = {}
    for row in reader:
        clean = {str(k).strip().lower(): (v or "").strip() for k, v in row.items() if k is not None}
        index = parse_int(clean.get("gpu"))
        if index is None:
            continue
        gpu_part = {k[4:] if k.startswith("gpu_") else k: v for k, v in clean.items()
                    if not k.startswith("vf")}
        gpu = gpus.get(index) or gpu_from_dict(index, gpu_part)
        gpus[index] = gpu
        vf_index = parse_int(clean.get("vf"))
        if vf_index is not None:
            vf_part = {k[3:]: v for k, v in clean.items() if k.startswith("vf_")}
            gpu.vfs.append(_vf_from_dict(vf_index, vf_index, vf_part))
    return [gpus[index] for index in sorted(gpus)]


def parse_amdsmi(text: str) -> List[SmiGpu]:
    """Parse any per-GPU amd-smi output, choosing JSON, CSV or text by its shape."""
    require_text(text, "amd-smi")
    try:
        return parse_amdsmi_json(text)
    except ParseError:
        pass
    lines = [line.strip() for line in lines_of(text) if line.strip()]
    if lines and lines[0].lower().startswith("gpu,"):
        return parse_amdsmi_csv(text)
    return parse_amdsmi_text(text)
