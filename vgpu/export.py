"""Export: describe the host as it is now as a profile that `plan` reports in sync (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from vgpu.errors import InputError
from vgpu.model.inventory import Gpu, Inventory
from vgpu.planner import VFIO


def export_profile(inv: Inventory, name: str, model: str | None = None, domains: Sequence | None = None) -> dict:
    """A v1 profile dict for the GPUs of ``model`` (default: the only model on the host). ``domains``: the VMs
    the hypervisor knows (DomainInfo, any platform), whose configured functions become the profile's
    ``vms.assign``; None when the hypervisor was not asked (the profile then has no ``vms`` section)."""
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
    section, chosen = _gpu_section(gpus, len(gpus) == len([g for g in inv.gpus if g.model == gpus[0].model]))
    data = {"version": "v1", "name": _safe(name),
            "description": f"exported from {inv.source}"[:300].replace("\n", " "),
            "hypervisor": "esxi" if inv.platform == "esxi" else "kvm", "gpu": section}
    vms = _vm_section(chosen, section["mode"], domains)
    if vms is not None:
        data["vms"] = vms
    return data


def _vm_section(chosen: list[Gpu], mode: str, domains: Sequence | None) -> dict | None:
    """The VMs that have the exported functions in their configuration now, as an explicit assignment (so a
    plan of the export attaches nothing and names no VM that does not exist). None when the hypervisor was not
    asked or no VM has any of them: the profile's default assignment then applies, as it did."""
    if not domains:
        return None
    functions = {fn.address for g in chosen for fn in (g.vfs if mode == "sriov" else (g,))}
    assign = {d.name: sorted(str(a) for a in d.hostdevs if a in functions)
              for d in sorted(domains, key=lambda d: d.name)}
    assign = {vm: addresses for vm, addresses in assign.items() if addresses}
    return {"assign": assign} if assign else None


ESXI_PASSTHRU = "pciPassthru"  # vgpu/esxi/planner.py: an ESXi GPU whose passthrough is active


def _gpu_section(gpus: list[Gpu], whole_model: bool) -> tuple[dict, list[Gpu]]:
    passthrough = [g for g in gpus if g.driver in (VFIO, ESXI_PASSTHRU)]
    sriov = [g for g in gpus if g.driver == "gim" and g.vfs]
    if passthrough and not sriov:
        chosen, section = passthrough, {"model": gpus[0].model, "mode": "passthrough"}
    elif sriov:
        chosen = _one_setup(sriov)
        first = chosen[0]
        counts = {len(first.vfs)}
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
    return section, chosen


def _setup(g: Gpu) -> tuple:
    return (len(g.vfs), g.partition.compute, g.partition.memory)


def _one_setup(sriov: list[Gpu]) -> list[Gpu]:
    """The gim GPUs one profile can describe: all of them when they share VF count and partitions;
    otherwise those whose VFs are all on vfio-pci (what a provision with a GPU selection leaves: the
    others keep gim's default), when they agree. Raises InputError naming the setups found."""
    if len({_setup(g) for g in sriov}) == 1:
        return sriov
    bound = [g for g in sriov if all(vf.driver == VFIO for vf in g.vfs)]
    if bound and len({_setup(g) for g in bound}) == 1:
        return bound
    found = ", ".join(f"{g.address}: {len(g.vfs)} VF(s) {g.partition.compute or '?'}/{g.partition.memory or '?'}"
                      for g in sriov)
    raise InputError(f"the GPUs are set up differently ({found}); a profile describes one setup",
                     hint="provision the host with one profile first, or write the profile by hand")


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return cleaned[:60] or "exported"
