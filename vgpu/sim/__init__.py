"""Simulated hosts: a Linux-shaped sysfs tree for a named machine plus a kernel model (GIM,
vfio-pci, driver binding) behind ``vgpu.host.kernel.KernelOps``. See docs/sim-machine-spec.md.

Names are imported lazily so that ``import vgpu.sim`` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["SimHost", "SimKernel", "MachineSpec", "list_machines", "load_spec", "DEFAULT_MACHINE"]

_WHERE = {"SimHost": "vgpu.sim.host", "SimKernel": "vgpu.sim.kernel", "MachineSpec": "vgpu.sim.spec",
          "list_machines": "vgpu.sim.spec", "load_spec": "vgpu.sim.spec", "DEFAULT_MACHINE": "vgpu.sim.spec"}

if TYPE_CHECKING:
    from vgpu.sim.host import SimHost
    from vgpu.sim.kernel import SimKernel
    from vgpu.sim.spec import DEFAULT_MACHINE, MachineSpec, list_machines, load_spec


def __getattr__(name: str):
    if name in _WHERE:
        import importlib
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'vgpu.sim' has no attribute {name!r}")
