"""Export: describe the host as it is now as a profile that `plan` reports in sync (pure)."""

from __future__ import annotations

import re

from vgpu.errors import InputError
from vgpu.model.inventory import Gpu, Inventory
from vgpu.planner import VFIO


def export_profile(inv: Inventory, name: str, model: str | None = None) -> dict:
    """A v1 profile dict for the GPUs of ``model`` (default: the only model on the host)."""
    models = sorted({g.model for g in inv.gpus})
    if not models:
        raise InputError(f"{inv.source} has no AMD Instinct GPU to export")
    if model is None:
        if len(models) > 1:
            raise InputError(f"{inv.source} has {', '.join(models)}: choose one with --model")
        model = models[0]
    gpus = [g for g in inv.gpus if g.model.lower() == model.lower()]
    if not gpus:
        raise InputError(f"{inv.source} has no {model} (it has {', '.join(models)})")
    return {"version": "v1", "name": _safe(name),
            "description": f"exported from {inv.source}"[:300].replace("\n", " "),
            "hypervisor": "kvm", "gpu": _gpu_section(gpus, len(gpus) == len([g for g in inv.gpus
                                                                              if g.model == gpus[0].model]))}


def _gpu_section(gpus: list[Gpu], whole_model: bool) -> dict:
    passthrough = [g for g in gpus if g.driver == VFIO]
    sriov = [g for g in gpus if g.driver == "gim" and g.vfs]
    if passthrough and not sriov:
        chosen, section = passthrough, {"model": gpus[0].model, "mode": "passthrough"}
    elif sriov:
        counts = {len(g.vfs) for g in sriov}
        if len(counts) > 1:
            raise InputError("the GPUs have different VF counts "
                             f"({', '.join(f'{g.address}: {len(g.vfs)}' for g in sriov)}); a profile has one")
        first = sriov[0]
        chosen = sriov
        section = {"model": first.model, "mode": "sriov", "vfs_per_gpu": counts.pop()}
        if first.partition.compute:
            section["compute_partition"] = first.partition.compute
        if first.partition.memory:
            section["memory_partition"] = first.partition.memory
    else:
        raise InputError("no GPU is provisioned (none on gim with VFs, none on vfio-pci): nothing to export")
    if whole_model and len(chosen) == len(gpus):
        section["select"] = "all"
    else:
        section["select"] = {"addresses": [str(g.address) for g in chosen]}
    return section


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return cleaned[:60] or "exported"
