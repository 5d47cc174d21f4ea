"""The one interface every command uses to work on a host, whatever runs it.

Two implementations, side by side: :class:`vgpu.host.target.HostTarget` (a Linux/KVM host read
through sysfs and udev: this machine, a simulated host, a capture) and
:class:`vgpu.esxi.service.EsxiTarget` (a VMware ESXi 8 host reached through the vSphere API).
``vgpu.cli.common.open_host`` picks one from the command line; the simulator enters only there, as
one more Linux host. Both return the same result types (vgpu/provision.py) and plans made of
typed steps (vgpu/model/plan.py), so plan, JSON, status and exit codes read the same on both.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from vgpu.model.inventory import Inventory


@runtime_checkable
class Platform(Protocol):
    platform: str  # "linux" | "esxi"
    read_only: bool  # a capture: it can be read, never changed
    step_hook: object  # None, or called around each applied step (a simulated host's test hooks)

    @property
    def label(self) -> str:
        """How the host is named in plans, errors and reports."""
        ...

    def discover(self, source: str = "auto") -> Inventory: ...

    def plan(self, profile):  # -> vgpu.provision.PlanResult; raises Refusal
        ...

    def provision(self, profile, **options):  # -> ProvisionResult
        ...

    def recorded_profile(self):  # -> Profile | None
        ...

    def status(self):  # -> StatusResult
        ...

    def release(self, **options):  # -> ProvisionResult
        ...

    def export(self, name: str, model: str | None, warnings: list[str] | None = None) -> dict:
        """The host as a profile; why its VM assignment could not be read is appended to ``warnings``."""
        ...

    def domains(self, warnings: list[str]):  # -> list[DomainInfo] | None (None: the hypervisor did not answer)
        ...
