"""What vgpu reads of an ESXi host, as plain data, and how: one PropertyCollector round trip.

:class:`HostState` holds the host's PCI devices with their passthrough state and its VMs with their
DirectPath I/O devices and the settings vgpu checks. :func:`retrieve` reads all of it with one
``RetrievePropertiesEx`` (continued while the server pages): the host and, through a traversal of
``HostSystem.vm``, each VM, with only the property paths below. Reading the managed objects attribute by
attribute instead costs a round trip per attribute and fetches ``config`` and ``hardware`` whole (hundreds
of KB to MBs each on a real host; through vCenter, minutes per run: issue 25).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu.errors import InputError
from vgpu.esxi import specs
from vgpu.hypervisor.base import DomainInfo
from vgpu.model.pci import PciAddress

# vSphere power states -> the libvirt state names the rest of vgpu uses (an active VM holds its devices)
POWER_STATES = {"poweredOn": "running", "poweredOff": "shutoff", "suspended": "pmsuspended"}
HOST_PATHS = ("name", "hardware.pciDevice", "hardware.numaInfo", "config.pciPassthruInfo",
              "runtime.inMaintenanceMode", "summary.config.product")
VM_PATHS = ("name", "runtime.powerState", "config.uuid", "config.template", "config.firmware",
            "config.hardware.memoryMB", "config.hardware.device", "config.memoryReservationLockedToMax",
            "config.extraConfig", "config.changeVersion")


@dataclass(frozen=True)
class PciDevice:
    address: PciAddress
    vendor: int
    device: int
    subsystem: tuple[int, int]
    class_id: int  # 16-bit class/subclass, as the API gives it
    name: str
    capable: bool = False
    enabled: bool = False
    active: bool = False
    numa_node: int | None = None


@dataclass(frozen=True)
class DynamicDevice:
    """A Dynamic DirectPath I/O device of a VM (VirtualPCIPassthrough.DynamicBackingInfo): it names no
    host function, only the ids it accepts; ESXi picks a free matching device at power-on (assignedId)."""

    allowed: tuple[tuple[int, int], ...]  # (vendorId, deviceId)
    label: str = ""  # customLabel: the hardware label a host device must carry too
    assigned: PciAddress | None = None  # the function ESXi gave it (while the VM runs)

    def accepts(self, device: "PciDevice") -> bool:
        return (device.vendor, device.device) in self.allowed

    def describe(self) -> str:
        ids = ", ".join(f"{v:04x}:{d:04x}" for v, d in self.allowed)
        return f"Dynamic DirectPath I/O, allowed {ids}" + (f", label {self.label}" if self.label else "")


@dataclass(frozen=True)
class VmConfig:
    name: str
    uuid: str
    power: str  # poweredOn | poweredOff | suspended
    firmware: str  # bios | efi
    memory_mb: int
    locked: bool  # memoryReservationLockedToMax
    passthrough: tuple[PciAddress, ...]  # host functions its configuration has (VirtualPCIPassthrough)
    extra: dict[str, str] = field(default_factory=dict)  # extraConfig
    disks: int = 0  # virtual disks: an installed guest boots with the firmware it was installed with
    change_version: str = ""  # config.changeVersion: a reconfigure naming it is refused after another edit
    dynamic: tuple[DynamicDevice, ...] = ()
    ref: object = field(default=None, compare=False, repr=False)  # the vim.VirtualMachine (its MoRef)
    devices: tuple = field(default=(), compare=False, repr=False)  # config.hardware.device as read

    @property
    def assigned(self) -> tuple[PciAddress, ...]:
        """The functions vgpu attached (its mark in extraConfig), of those the VM still has."""
        return tuple(a for a in specs.parse_mark(self.extra.get(specs.MARK_KEY, "")) if a in self.passthrough)

    @property
    def in_use(self) -> tuple[PciAddress, ...]:
        """The host functions it holds now: its fixed devices, and those Dynamic DirectPath I/O assigned it."""
        return tuple(dict.fromkeys((*self.passthrough, *(d.assigned for d in self.dynamic if d.assigned))))

    def holds(self, device: "PciDevice") -> str | None:
        """How this VM holds (or will take, at power-on) ``device``: a sentence, or None."""
        if device.address in self.passthrough:
            return "its configuration has it"
        for d in self.dynamic:
            if d.assigned == device.address:
                return f"ESXi assigned it at power-on ({d.describe()})"
            if d.assigned is None and self.power == "poweredOff" and d.accepts(device):
                return f"it can take it at power-on ({d.describe()})"
        return None

    def domain(self) -> DomainInfo:
        return DomainInfo(self.name, self.uuid, POWER_STATES.get(self.power, self.power), self.in_use,
                          assigned=self.assigned)


@dataclass(frozen=True)
class HostState:
    name: str
    uuid: str
    api_version: str
    product: str
    maintenance: bool
    devices: tuple[PciDevice, ...]
    vms: tuple[VmConfig, ...]

    def device(self, address: PciAddress) -> PciDevice | None:
        return next((d for d in self.devices if d.address == address), None)

    def vm(self, name: str) -> VmConfig | None:
        return next((v for v in self.vms if v.name == name), None)

    def holders(self, address: PciAddress, *, besides: str | None = None) -> list[tuple[VmConfig, str]]:
        """Every VM (but ``besides``) that holds the function or can take it at power-on, with how: a fixed
        DirectPath device, or a Dynamic DirectPath I/O device (assigned, or whose allowed ids match)."""
        device = self.device(address)
        if device is None:
            return [(v, "its configuration has it") for v in self.vms if v.name != besides and address in v.passthrough]
        return [(v, how) for v in self.vms if v.name != besides and (how := v.holds(device))]


def _passthrough_devices(devices) -> tuple[list[PciAddress], list[DynamicDevice]]:
    """A VM's DirectPath I/O devices: fixed ones (DeviceBackingInfo: the host function) and Dynamic
    DirectPath I/O ones (DynamicBackingInfo: allowed ids, and the function assigned at power-on)."""
    from pyVmomi import vim

    fixed, dynamic = [], []
    for dev in devices:
        if not isinstance(dev, vim.vm.device.VirtualPCIPassthrough):
            continue
        b = dev.backing
        if isinstance(b, vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo):
            try:
                fixed.append(PciAddress.parse(b.id))
            except InputError:
                continue
        elif isinstance(b, vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo):
            try:
                assigned = PciAddress.parse(b.assignedId) if b.assignedId else None
            except InputError:
                assigned = None
            dynamic.append(DynamicDevice(tuple((_u16(a.vendorId), _u16(a.deviceId)) for a in b.allowedDevice or ()),
                                         str(b.customLabel or ""), assigned))
    return fixed, dynamic


def _u16(value) -> int:
    """The API's signed xsd:short ids (two's complement above 0x7fff) as the unsigned PCI id."""
    return int(value) & 0xFFFF


def retrieve(session, uuid: str) -> HostState:
    """The host and its VMs in one ``RetrievePropertiesEx`` (plus continuations)."""
    from pyVmomi import vim, vmodl

    pc_types = vmodl.query.PropertyCollector
    to_vms = pc_types.TraversalSpec(name="vms", type=vim.HostSystem, path="vm", skip=False)
    spec = pc_types.FilterSpec(
        objectSet=[pc_types.ObjectSpec(obj=session.host, skip=False, selectSet=[to_vms])],
        propSet=[pc_types.PropertySpec(type=vim.HostSystem, pathSet=list(HOST_PATHS)),
                 pc_types.PropertySpec(type=vim.VirtualMachine, pathSet=list(VM_PATHS))])
    pc = session.content.propertyCollector
    result = pc.RetrievePropertiesEx([spec], pc_types.RetrieveOptions())
    objects = list(result.objects or ()) if result else []
    while result is not None and result.token:
        result = pc.ContinueRetrievePropertiesEx(result.token)
        objects += list(result.objects or ())
    host_props, vms = {}, []
    for content in objects:
        _refused(content)
        props = {p.name: p.val for p in content.propSet or ()}
        if isinstance(content.obj, vim.HostSystem):
            host_props = props
        elif (vm := _vm(content.obj, props)) is not None:
            vms.append(vm)
    return _host(host_props, uuid, session.api_version, sorted(vms, key=lambda v: v.name))


def _refused(content) -> None:
    """The PropertyCollector reports a property it could not read in ``missingSet``, not as a fault: a session
    that ended (NotAuthenticated) or a privilege the user lacks (NoPermission) is raised like the fault of a
    call, so that it is logged in again, or named. Other missing paths (a VM being created has no config yet)
    are left out of the read."""
    from pyVmomi import vim

    for missing in content.missingSet or ():
        if isinstance(missing.fault, (vim.fault.NotAuthenticated, vim.fault.NoPermission)):
            raise missing.fault


def _host(props: dict, uuid: str, api_version: str, vms: list[VmConfig]) -> HostState:
    numa = {}
    for node in (getattr(props.get("hardware.numaInfo"), "numaNode", None) or ()):
        for pci in node.pciId or ():
            numa[str(pci).lower()] = int(node.typeId)
    infos = {i.id.lower(): i for i in (props.get("config.pciPassthruInfo") or ())}
    devices = []
    for d in props.get("hardware.pciDevice") or ():
        try:
            address = PciAddress.parse(d.id)
        except InputError:
            continue  # an id this version cannot read: not a GPU vgpu can assign
        info = infos.get(d.id.lower())
        devices.append(PciDevice(address, _u16(d.vendorId), _u16(d.deviceId),
                                 (_u16(d.subVendorId), _u16(d.subDeviceId)), _u16(d.classId),
                                 str(d.deviceName or ""), bool(info and info.passthruCapable),
                                 bool(info and info.passthruEnabled), bool(info and info.passthruActive),
                                 numa.get(d.id.lower())))
    product = props.get("summary.config.product")
    return HostState(str(props.get("name", "")), uuid, api_version, str(getattr(product, "fullName", "") or ""),
                     bool(props.get("runtime.inMaintenanceMode")), tuple(sorted(devices, key=lambda d: d.address)),
                     tuple(vms))


def _vm(obj, props: dict) -> VmConfig | None:
    """A VM as read, or None for a template or a VM without a configuration (being created, inaccessible)."""
    from pyVmomi import vim

    if "config.uuid" not in props or props.get("config.template"):
        return None
    devices = tuple(props.get("config.hardware.device") or ())
    functions, dynamic = _passthrough_devices(devices)
    extra = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or ()}
    return VmConfig(str(props.get("name", "")), str(props["config.uuid"]), str(props.get("runtime.powerState", "")),
                    str(props.get("config.firmware") or "bios"), int(props.get("config.hardware.memoryMB") or 0),
                    bool(props.get("config.memoryReservationLockedToMax")), tuple(functions), extra,
                    disks=sum(isinstance(d, vim.vm.device.VirtualDisk) for d in devices),
                    change_version=str(props.get("config.changeVersion") or ""), dynamic=tuple(dynamic), ref=obj,
                    devices=devices)
