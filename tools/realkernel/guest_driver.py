"""Tier-4 driver: run vgpu's production discovery and vfio binding against a real Linux kernel.

Runs INSIDE the QEMU guest (guest-init.sh starts it with the repository on PYTHONPATH over 9p).
QEMU 7.2 emulates an SR-IOV NVMe controller (PF 1b36:0010) that stands in for an MI300 PF: the
"not gim" case of docs/hardware.md §3, so VFs come from ``sriov_numvfs``. Every step goes
through the production code (vgpu.host.discovery.discover, vgpu.host.binding.bind/unbind with
vgpu.host.kernel.LinuxKernel); after each step the driver also reads the kernel's state itself
(``observe``), so the host-side test can check vgpu's claims against the kernel, not against vgpu.

Writes one JSON document (schema ``vgpu-realkernel/1``) to ``--out``: ordered steps, each with
``ok``, ``error`` and what was observed. A failing step stops the run; later steps are absent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from vgpu.catalog import DEFAULT, Catalog, GpuModel
from vgpu.errors import HostError
from vgpu.host import binding
from vgpu.host.discovery import discover
from vgpu.host.kernel import LinuxKernel
from vgpu.host.paths import HostPaths
from vgpu.model.pci import PciAddress

SCHEMA = "vgpu-realkernel/1"
VFIO = binding.VFIO
MISSING_DRIVER = "vgpu-no-such-driver"
WANT_VFS = 2

# QEMU's NVMe controller: vendor 0x1b36 (Red Hat/QEMU), device 0x0010 (QEMU hw/nvme/ctrl.c). Its VFs
# report the SAME device id (the PF's sriov_vf_device reads 0x10), so the stand-in lists the id as a
# PF id only: a catalog maps one (vendor, device) pair to one role. AMD's parts differ (74a1/74b5).
STANDIN = GpuModel(name="QEMU-NVMe-standin", arch="none", pf_ids=(0x0010,), vendor=0x1B36,
                   gim_vf_counts=frozenset({1, 2}), target=False,
                   notes=("tier-4 test stand-in for an SR-IOV GPU; not a GPU",))
CATALOG = Catalog(DEFAULT.models + (STANDIN,))


def observe(paths: HostPaths, address: PciAddress) -> dict:
    """The kernel's view of one function, read directly (not through vgpu)."""
    dev = paths.pci_devices() / str(address)

    def link(name: str) -> str | None:
        try:
            return os.path.basename(os.readlink(dev / name))
        except OSError:
            return None

    group = link("iommu_group")
    override = (dev / "driver_override").read_text().strip()
    return {"address": str(address), "driver": link("driver"), "physfn": link("physfn"),
            "driver_override": None if override == "(null)" else override,
            "iommu_group": None if group is None else int(group),
            "vfio_node": group is not None and (paths.dev / "vfio" / group).exists(),
            "vendor": (dev / "vendor").read_text().strip(), "device": (dev / "device").read_text().strip()}


class Run:
    """Ordered steps; the first failure stops the run and is recorded with its traceback."""

    def __init__(self):
        self.paths = HostPaths.system()
        self.kernel = LinuxKernel()
        self.steps: list[dict] = []
        self.pf: PciAddress | None = None
        self.vfs: list[PciAddress] = []
        self.previous: dict[str, str | None] = {}

    def step(self, name: str, fn) -> bool:
        start = time.monotonic()
        record = {"name": name, "ok": True, "error": None}
        try:
            record["observed"] = fn()
        except Exception as exc:  # record everything: the host-side test shows it
            record.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        record["seconds"] = round(time.monotonic() - start, 3)
        self.steps.append(record)
        return record["ok"]

    def inventory(self, source: str = "sysfs"):
        return discover(self.paths, catalog=CATALOG, source=source)

    def standin(self, inv):
        """The stand-in PF: a catalog match that is not itself a VF (VFs share its device id)."""
        pfs = [g for g in inv.gpus if g.model == STANDIN.name and g.total_vfs]
        if len(pfs) != 1:
            raise AssertionError(f"expected one stand-in PF with SR-IOV, discovery found {len(pfs)}")
        return pfs[0]


def discover_initial(run: Run) -> dict:
    inv = run.inventory()
    pf = run.standin(inv)
    run.pf = pf.address
    try:
        udev = run.inventory("udev").to_dict()
    except ImportError as exc:
        udev = {"unavailable": str(exc)}
    return {"pf": str(pf.address), "total_vfs": pf.total_vfs, "num_vfs": pf.num_vfs, "driver": pf.driver,
            "iommu_units": inv.facts.iommu_units, "iommu_groups": inv.facts.iommu_groups,
            "sriov_vf_device": _attr(run, run.pf, "sriov_vf_device"),
            "inventory": inv.to_dict(), "inventory_udev": udev, "kernel": observe(run.paths, pf.address)}


def pf_roundtrip(run: Run) -> dict:
    """Whole-function passthrough path (docs/hardware.md §4): PF from nvme to vfio-pci and back."""
    previous = binding.bind(run.paths, run.kernel, run.pf, VFIO)
    bound = observe(run.paths, run.pf)
    binding.unbind(run.paths, run.kernel, run.pf, restore=previous)
    return {"previous": previous, "bound": bound, "restored": observe(run.paths, run.pf)}


def enable_vfs(run: Run) -> dict:
    """The stand-in is not gim, so VFs come from sriov_numvfs (through the production KernelOps)."""
    pf_dir = run.paths.pci_devices() / str(run.pf)
    # Without this the nvme driver probes each new VF and fails after a few seconds ("Device not
    # ready", the VF is offline until NVMe virt-mgmt assigns resources), racing with our bind.
    run.kernel.write_attr(pf_dir / "sriov_drivers_autoprobe", "0")
    run.kernel.write_attr(pf_dir / "sriov_numvfs", str(WANT_VFS))
    run.kernel.settle(10)
    pf = run.inventory().gpu(run.pf)
    run.vfs = [vf.address for vf in pf.vfs]
    kernel_links = sorted(os.path.basename(os.readlink(pf_dir / n)) for n in os.listdir(pf_dir)
                          if n.startswith("virtfn"))
    return {"num_vfs": pf.num_vfs, "vfs": [str(a) for a in run.vfs], "kernel_virtfns": kernel_links,
            "vf_groups": [vf.iommu_group.number if vf.iommu_group else None for vf in pf.vfs],
            "kernel": [observe(run.paths, a) for a in run.vfs]}


def bind_vfs(run: Run) -> dict:
    out = []
    for address in run.vfs:
        run.previous[str(address)] = binding.bind(run.paths, run.kernel, address, VFIO)
        out.append(observe(run.paths, address))
    return {"previous": run.previous, "kernel": out}


def rediscover_bound(run: Run) -> dict:
    inv = run.inventory()
    pf = inv.gpu(run.pf)
    # Reported, not asserted: QEMU's VFs share the PF's device id, so they also match the stand-in
    # entry and appear as GPUs of their own; AMD's VF ids (74b5, ...) differ from the PF's.
    return {"vf_drivers": {str(vf.address): vf.driver for vf in pf.vfs},
            "gpus": [str(g.address) for g in inv.gpus if g.model == STANDIN.name],
            "dev_vfio_groups": list(inv.facts.dev_vfio_groups or ())}


def unbind_vfs(run: Run) -> dict:
    for address in run.vfs:
        binding.unbind(run.paths, run.kernel, address, restore=run.previous[str(address)])
    return {"kernel": [observe(run.paths, a) for a in run.vfs]}


def bind_missing_driver(run: Run) -> dict:
    """Read-back must catch a bind that the kernel silently does not perform."""
    address = run.vfs[0]
    try:
        binding.bind(run.paths, run.kernel, address, MISSING_DRIVER, timeout=2.0)
    except HostError as exc:
        raised = {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    else:
        raised = None
    during = observe(run.paths, address)
    binding.unbind(run.paths, run.kernel, address)
    return {"raised": raised, "during": during, "after": observe(run.paths, address)}


def disable_vfs(run: Run) -> dict:
    pf_dir = run.paths.pci_devices() / str(run.pf)
    run.kernel.write_attr(pf_dir / "sriov_numvfs", "0")
    run.kernel.write_attr(pf_dir / "sriov_drivers_autoprobe", "1")
    run.kernel.settle(10)
    pf = run.inventory().gpu(run.pf)
    return {"num_vfs": pf.num_vfs, "vfs": [str(vf.address) for vf in pf.vfs],
            "gone": [not (run.paths.pci_devices() / str(a)).exists() for a in run.vfs]}


def _attr(run: Run, address: PciAddress, name: str) -> str | None:
    try:
        return (run.paths.pci_devices() / str(address) / name).read_text().strip()
    except OSError:
        return None


STEPS = (("discover", discover_initial), ("pf_roundtrip", pf_roundtrip), ("enable_vfs", enable_vfs),
         ("bind_vfs", bind_vfs), ("rediscover_bound", rediscover_bound), ("unbind_vfs", unbind_vfs),
         ("bind_missing_driver", bind_missing_driver), ("disable_vfs", disable_vfs))


def write_json_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    args = parser.parse_args(argv)
    run = Run()
    for name, fn in STEPS:
        if not run.step(name, lambda fn=fn: fn(run)):
            break
    doc = {"schema": SCHEMA, "kernel": os.uname().release, "steps": run.steps,
           "completed": len(run.steps) == len(STEPS) and all(s["ok"] for s in run.steps)}
    write_json_atomic(args.out, doc)
    return 0 if doc["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
