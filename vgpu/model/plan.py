"""A Plan: the ordered, typed steps that carry a host from its actual state to a profile.

Pure data. ``vgpu plan`` prints it, ``provision --dry-run`` prints it, ``status`` reports it as
drift; ``vgpu/host/steps.py`` holds each step type's apply() and undo(). Every step says what it
changes and what it disrupts (VFs, GPUs, VMs, processes), so an SRE can read the plan before a
maintenance window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from vgpu.model.pci import PciAddress

PLAN_SCHEMA = "vgpu.plan/v1"


@dataclass(frozen=True)
class Disruption:
    """Who loses a device when a step runs."""

    functions: tuple[PciAddress, ...] = ()  # VFs / PFs that disappear or change driver
    vms: tuple[str, ...] = ()  # libvirt domains referencing them
    processes: tuple[str, ...] = ()  # "pid 4242 (qemu-system-x86)" holding /dev/vfio/<group>
    host_wide: bool = False  # e.g. a gim reload: every VF on the host goes away
    # GPU clients (vgpu/host/holders.py gpu_clients): systemd services provision stops before the step and
    # starts and verifies after it (also when it fails), and processes outside any service, which it cannot
    # restart: "pid 5012 (amd-smi) holding /dev/gim-smi0"; those refuse the run unless --force
    units: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.functions or self.vms or self.processes or self.host_wide or self.units or self.clients)

    @property
    def holders(self) -> tuple[str, ...]:
        return tuple(f"VM {v}" for v in self.vms) + self.processes + self.clients


@dataclass(frozen=True)
class Step:
    """Base of every step. ``kind`` names the type in JSON and in the journal."""

    kind = "step"

    def describe(self) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict:
        data = {"kind": self.kind, "description": self.describe()}
        data.update(_plain(asdict(self)))
        return data


@dataclass(frozen=True)
class WriteFile(Step):
    """Write one config file under the host's /etc atomically (``content`` None: remove it)."""

    kind = "write-file"
    path: str  # relative to the host's /etc, e.g. "gim_config", "modprobe.d/vgpu.conf"
    content: str | None
    mode: int = 0o644
    why: str = ""

    def describe(self) -> str:
        verb = "remove" if self.content is None else "write"
        return f"{verb} /etc/{self.path}" + (f" ({self.why})" if self.why else "")


@dataclass(frozen=True)
class ReloadGim(Step):
    """Unload and load gim so it re-reads /etc/gim_config: vf_num cannot change at runtime."""

    kind = "reload-gim"
    vf_num: tuple[int, ...]  # one per gim PF, in address (probe) order
    pfs: tuple[PciAddress, ...]
    disruption: Disruption = field(default_factory=Disruption)

    def describe(self) -> str:
        counts = ",".join(str(n) for n in self.vf_num)
        return f"reload gim with vf_num={counts} (removes and recreates every VF on this host)"


@dataclass(frozen=True)
class SetMemoryPartition(Step):
    kind = "set-memory-partition"
    pf: PciAddress
    mode: str  # "NPS1" | "NPS4" ...
    disruption: Disruption = field(default_factory=Disruption)

    def describe(self) -> str:
        return f"set memory partition of {self.pf} to {self.mode}"


@dataclass(frozen=True)
class BindVfs(Step):
    """Bind every VF of ``pf`` to ``driver`` (their addresses are known only after gim made them)."""

    kind = "bind-vfs"
    pf: PciAddress
    count: int
    driver: str = "vfio-pci"

    def describe(self) -> str:
        return f"bind the {self.count} VF(s) of {self.pf} to {self.driver}"


@dataclass(frozen=True)
class BindDevice(Step):
    """Bind one function to a driver (a passthrough PF and the rest of its IOMMU group)."""

    kind = "bind-device"
    address: PciAddress
    driver: str
    previous: str | None = None
    disruption: Disruption = field(default_factory=Disruption)

    def describe(self) -> str:
        was = f" (now {self.previous})" if self.previous else ""
        return f"bind {self.address} to {self.driver}{was}"


@dataclass(frozen=True)
class UnbindDevice(Step):
    """Clear the override and unbind (release), optionally handing the device back to ``restore``."""

    kind = "unbind-device"
    address: PciAddress
    current: str | None
    restore: str | None = None
    disruption: Disruption = field(default_factory=Disruption)

    def describe(self) -> str:
        then = f" and give it back to {self.restore}" if self.restore else ""
        return f"unbind {self.address} from {self.current or 'no driver'}{then}"


@dataclass(frozen=True)
class InstallPersistence(Step):
    """Record the profile and enable the boot unit that re-applies and verifies it."""

    kind = "install-persistence"
    profile: str
    record: str | None  # the state record JSON; None removes persistence (release)
    unit: str | None = None  # the systemd unit text

    def describe(self) -> str:
        if self.record is None:
            return "remove boot persistence (vgpu-reapply.service and the recorded profile)"
        return f"record profile {self.profile} and enable vgpu-reapply.service to re-apply it at boot"


@dataclass(frozen=True)
class AttachFunctions(Step):
    """Cold-plug functions into a shut-off VM's saved libvirt configuration, with the huge-BAR
    settings (docs/hardware.md §5; docs/hypervisor.md). The VM sees them at its next start."""

    kind = "attach-functions"
    vm: str
    functions: tuple[PciAddress, ...]
    numa_node: int | None = None

    def describe(self) -> str:
        where = f", pinned to NUMA node {self.numa_node}" if self.numa_node is not None else ""
        return f"attach {', '.join(str(a) for a in self.functions)} to VM {self.vm} (cold-plug{where})"


@dataclass(frozen=True)
class DetachFunctions(Step):
    """Take functions vgpu attached out of a shut-off VM's saved configuration (release)."""

    kind = "detach-functions"
    vm: str
    functions: tuple[PciAddress, ...]

    def describe(self) -> str:
        return f"detach {', '.join(str(a) for a in self.functions)} from VM {self.vm}"


# -- ESXi (vgpu/esxi): whole GPUs by DirectPath I/O through the vSphere API ------------------------------------


@dataclass(frozen=True)
class SetPassthrough(Step):
    """Enable (or disable) DirectPath I/O on one host PCI device (HostPciPassthruSystem, applyNow)."""

    kind = "set-passthrough"
    address: PciAddress
    enabled: bool = True
    disruption: Disruption = field(default_factory=Disruption)  # disabling: running VMs that have the GPU

    def describe(self) -> str:
        return f"{'enable' if self.enabled else 'disable'} passthrough (DirectPath I/O) on {self.address}"


@dataclass(frozen=True)
class AttachPassthrough(Step):
    """Add GPUs to a powered-off VM as VirtualPCIPassthrough devices, with EFI firmware, all memory
    reserved and a 64-bit MMIO window that holds their BARs (docs/esxi.md)."""

    kind = "attach-passthrough"
    vm: str
    functions: tuple[PciAddress, ...]
    mmio_gb: int
    firmware_was: str = "efi"  # "bios": the step switches the VM to EFI

    def describe(self) -> str:
        efi = "EFI firmware" + (" (now BIOS)" if self.firmware_was != "efi" else "")
        settings = f"{efi}, all memory reserved, 64-bit MMIO {self.mmio_gb} GB"
        if not self.functions:  # it has its GPUs, but not what starting with them needs
            return f"set {settings} on VM {self.vm} (its GPUs cannot start without them)"
        return f"attach {', '.join(str(a) for a in self.functions)} to VM {self.vm} (DirectPath I/O; {settings})"


@dataclass(frozen=True)
class DetachPassthrough(Step):
    """Remove the GPUs vgpu attached from a powered-off VM (release)."""

    kind = "detach-passthrough"
    vm: str
    functions: tuple[PciAddress, ...]

    def describe(self) -> str:
        return f"detach {', '.join(str(a) for a in self.functions)} from VM {self.vm}"


@dataclass(frozen=True)
class RecordProfile(Step):
    """Record (``record`` None: forget) the applied profile for a host vgpu reaches remotely, in the
    controller's state directory: ESXi keeps passthrough and VM settings across reboots by itself."""

    kind = "record-profile"
    profile: str
    record: str | None
    where: str = ""

    def describe(self) -> str:
        if self.record is None:
            return f"forget the recorded profile ({self.where})"
        return f"record profile {self.profile} ({self.where})"


STEP_TYPES: dict[str, type[Step]] = {cls.kind: cls for cls in (
    WriteFile, ReloadGim, SetMemoryPartition, BindVfs, BindDevice, UnbindDevice, InstallPersistence,
    AttachFunctions, DetachFunctions, SetPassthrough, AttachPassthrough, DetachPassthrough, RecordProfile)}


@dataclass(frozen=True)
class Plan:
    profile: str
    host: str
    steps: tuple[Step, ...] = ()
    warnings: tuple[str, ...] = ()
    # "apply" (provision a profile), "release" (back to the default state), or "rollback" (undo, in this
    # order, the steps an interrupted run had started)
    action: str = "apply"
    # which VM gets which functions once the plan is applied (the profile's `vms`); None when it cannot be
    # known yet (a PF that does not report where its VFs will appear)
    vms: tuple[tuple[str, tuple[PciAddress, ...]], ...] | None = ()
    # what must happen outside vgpu before the rest can be applied (an ESXi host that activates
    # passthrough only at its next reboot); the host is not in sync while any is left
    pending: tuple[str, ...] = ()
    # the capability-matrix row the plan was checked against (vgpu/capability.py Verdict.to_dict): level,
    # row, and what the host said (GIM, OS, kernel); None where it does not apply (passthrough, ESXi)
    matrix: dict | None = None

    @property
    def in_sync(self) -> bool:
        return not self.steps and not self.pending

    @property
    def disruptive(self) -> bool:
        return any(getattr(s, "disruption", Disruption()).any for s in self.steps)

    def holders(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for s in self.steps:
            for h in getattr(s, "disruption", Disruption()).holders:
                seen[h] = None
        return tuple(seen)

    def to_dict(self) -> dict:
        return {"schema": PLAN_SCHEMA, "action": self.action, "profile": self.profile, "host": self.host,
                "in_sync": self.in_sync,
                "disruptive": self.disruptive, "warnings": list(self.warnings),
                "steps": [s.to_dict() for s in self.steps], "pending": list(self.pending),
                "vms": None if self.vms is None else {vm: [str(a) for a in fns] for vm, fns in self.vms},
                "matrix": self.matrix}


def step_from_dict(data: dict) -> Step:
    """Rebuild a step from its journal form (the inverse of Step.to_dict)."""
    cls = STEP_TYPES[data["kind"]]
    kwargs = {}
    for f in fields(cls):
        if f.name in data:
            kwargs[f.name] = _revive(f.name, data[f.name])
    return cls(**kwargs)


_ADDRESS_FIELDS = {"pf", "address"}


def _revive(name: str, value):
    if name in _ADDRESS_FIELDS and isinstance(value, str):
        return PciAddress.parse(value)
    if name in ("pfs", "functions") and isinstance(value, list):
        return tuple(PciAddress.parse(v) for v in value)
    if name == "vf_num":
        return tuple(value)
    if name == "disruption" and isinstance(value, dict):
        return Disruption(functions=tuple(PciAddress.parse(a) for a in value.get("functions", ())),
                          vms=tuple(value.get("vms", ())), processes=tuple(value.get("processes", ())),
                          host_wide=bool(value.get("host_wide")), units=tuple(value.get("units", ())),
                          clients=tuple(value.get("clients", ())))
    return value


def _plain(value):
    if isinstance(value, dict):
        if set(value) == {"domain", "bus", "slot", "function"}:
            return str(PciAddress(**value))
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Problem:
    """One reason a profile cannot be applied; the planner collects all of them."""

    subject: str
    message: str
    fix: str | None = None
