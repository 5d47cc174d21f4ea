"""What vgpu reads from and changes on an ESXi host, through the vSphere API. The only module that
calls pyVmomi objects (besides the connection and the spec builders in vgpu/esxi/specs.py).

Reading gives plain data (:class:`HostState`, vgpu/esxi/model.py: PCI devices with their passthrough
state, VMs with their passthrough devices and settings), in one PropertyCollector round trip. Changing is three operations: toggle passthrough on a
device (``HostPciPassthruSystem.UpdatePassthruConfig``), and reconfigure a powered-off VM to add or
remove GPUs (``ReconfigVM_Task``), or to put back a saved configuration. :class:`EsxiHypervisor`
gives the VM side the same interface libvirt's has (vgpu/hypervisor/base.py), so the VM planning and
the journal's undo work the same on both platforms.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence

from vgpu.errors import HostError, InputError, InUseError, RemoteError
from vgpu.esxi import specs
from vgpu.esxi.connect import Session, fault_error, seconds_from_env, task_error
from vgpu.esxi.model import POWER_STATES, DynamicDevice, HostState, PciDevice, VmConfig, retrieve  # noqa: F401
from vgpu.hypervisor.base import DomainInfo, holding
from vgpu.model.pci import PciAddress

TASK_TIMEOUT = 600.0  # seconds; a reconfigure takes seconds on a real host
TASK_TIMEOUT_ENV = "VGPU_ESXI_TASK_TIMEOUT"


def task_timeout() -> float:
    """How long a vSphere task may run before vgpu stops waiting ($VGPU_ESXI_TASK_TIMEOUT, else 600 s)."""
    return seconds_from_env(TASK_TIMEOUT_ENV, TASK_TIMEOUT, 86400, "a vSphere task may take")


class TaskStillRunning(RemoteError):
    """A task that did not end by its deadline. Its outcome is unknown, so the executor does not roll back
    (the undo would race the task on the host): the journal stays, as after a crash, and the next run rolls
    back once the task has ended (``unsettled``, vgpu/executor.py)."""

    unsettled = True

    def __init__(self, task, state: str, limit: float, label: str):
        super().__init__(f"{label}: task {task._moId} is still {state} after {limit:g} s; vgpu stopped waiting and "
                         "did not roll back while it runs (the journal is kept)",
                         hint=f"watch task {task._moId} in the vSphere client; once it has ended, `vgpu provision` or "
                              f"`vgpu release` rolls this run back first (${TASK_TIMEOUT_ENV} sets another deadline)")


class EsxiHost:
    """One ESXi host behind a logged-in session."""

    def __init__(self, session: Session):
        self.session = session
        self.label = f"ESXi {session.host.name}"  # read once: it names the host after the session closed too
        self.uuid = str(session.host.hardware.systemInfo.uuid)

    # -- reading -------------------------------------------------------------------------------------

    def read(self) -> HostState:
        return self._call(self._read)

    def _read(self) -> HostState:
        state = retrieve(self.session, self.uuid)  # one round trip (vgpu/esxi/model.py)
        self._refs = {v.name: v.ref for v in state.vms}
        return state

    def passthrough_targets(self, vm_name: str) -> dict[PciAddress, tuple[object, str]]:
        """The devices ESXi offers this VM for DirectPath I/O: address -> (HostPciDevice, systemId)."""
        def query():
            vm = self._vm_object(vm_name)
            target = vm.environmentBrowser.QueryConfigTarget(self.session.host)
            out = {}
            for p in target.pciPassthrough or ():
                try:
                    out[PciAddress.parse(p.pciDevice.id)] = (p.pciDevice, str(p.systemId))
                except (InputError, AttributeError):
                    continue
            return out
        return self._call(query)

    # -- changing ------------------------------------------------------------------------------------

    def set_passthrough(self, address: PciAddress, enabled: bool) -> None:
        from pyVmomi import vim

        config = vim.host.PciPassthruConfig(id=str(address), passthruEnabled=enabled, applyNow=True)
        system = self.session.host.configManager.pciPassthruSystem
        if system is None:
            raise HostError(f"{self.label} has no PCI passthrough system (configManager.pciPassthruSystem)")
        try:
            self._call(lambda: system.UpdatePassthruConfig([config]))
        except vim.fault.VimFault as exc:
            raise HostError(f"{'enabling' if enabled else 'disabling'} passthrough on {address} failed: "
                            f"{task_error(exc)}") from None

    def reconfigure(self, vm_name: str, spec, what: str, *, version: str | None = None) -> None:
        """One ``ReconfigVM_Task``, guarded by ``config.changeVersion`` (``version``: the one vgpu's decision was
        read with): ESXi refuses it (ConcurrentAccess) when someone changed the VM since. The task is submitted
        once and then waited on by its reference: a session that ends meanwhile is logged in again and the
        same task is read, never a second one submitted (vSphere Web Services API, ManagedEntity tasks)."""
        from pyVmomi import vim

        if version:
            spec.changeVersion = version
        try:
            vm = self._call(lambda: self._vm_object(vm_name))
            task = self._call(lambda: vm.ReconfigVM_Task(spec))  # refused unauthenticated: it never ran
            self._call(lambda: self._wait(task))
        except vim.fault.InvalidPowerState:
            raise InUseError(f"{what}: VM {vm_name} is powered on, and ESXi changes PCI passthrough devices only "
                             "while a VM is off", hint="power the VM off, then run vgpu again") from None
        except vim.fault.ConcurrentAccess:
            raise HostError(f"{what}: VM {vm_name} was changed by someone else since vgpu read it (its "
                            "config.changeVersion differs); vgpu did not overwrite that change",
                            hint="check the VM in the vSphere client, then run vgpu again") from None
        except vim.fault.VimFault as exc:
            raise HostError(f"{what}: {task_error(exc)}") from None

    def _wait(self, task) -> None:
        """Wait for ``task`` with a deadline (``$VGPU_ESXI_TASK_TIMEOUT``, else TASK_TIMEOUT seconds), blocking in
        ``WaitForUpdatesEx`` with ``maxWaitSeconds`` below the socket deadline, so that a task that posts no
        update for a while is waited on, not taken for a dead host. Past the deadline: TaskStillRunning."""
        from pyVmomi import vim, vmodl

        from vgpu.esxi.connect import timeout

        pc = self.session.content.propertyCollector
        deadline, limit = time.monotonic() + task_timeout(), task_timeout()
        spec = vmodl.query.PropertyCollector.FilterSpec(
            objectSet=[vmodl.query.PropertyCollector.ObjectSpec(obj=task)],
            propSet=[vmodl.query.PropertyCollector.PropertySpec(type=vim.Task, pathSet=["info.state"])])
        flt = pc.CreateFilter(spec, partialUpdates=False)
        try:
            version = ""
            while True:
                info = task.info
                if info.state == vim.TaskInfo.State.success:
                    return
                if info.state == vim.TaskInfo.State.error:
                    raise info.error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TaskStillRunning(task, str(info.state), limit, self.label)
                wait = max(1, int(min(remaining, timeout() / 2)))
                update = pc.WaitForUpdatesEx(version, vmodl.query.PropertyCollector.WaitOptions(maxWaitSeconds=wait))
                version = update.version if update is not None else version
        finally:
            flt.Destroy()

    # -- plumbing ------------------------------------------------------------------------------------

    def _vm_object(self, name: str):
        """The VM's managed object, from the last read (its MoRef: no round trip per VM to find it by name)."""
        ref = getattr(self, "_refs", {}).get(name)
        if ref is None:
            ref = {v.name: v.ref for v in self._read().vms}.get(name)
        if ref is None:
            raise HostError(f"{self.label} has no VM named {name}")
        return ref

    def _call(self, fn):
        """Run ``fn``; when the session was dropped (expired, or terminated by an administrator) log in
        again once and retry. A host that stops answering is one RemoteError."""
        from pyVmomi import vim, vmodl

        try:
            try:
                return fn()
            except vim.fault.NotAuthenticated:
                self._relogin()
                return fn()
        except vim.fault.VimFault:
            raise  # the caller says what it means for its operation
        except vmodl.MethodFault as exc:  # RuntimeFault, SecurityError: one line, never pyVmomi's dump
            raise fault_error(exc, self.label, self.session.endpoint.user) from None
        except (ConnectionError, OSError) as exc:
            raise RemoteError(f"{self.label} stopped answering ({type(exc).__name__}: {exc})",
                              hint="check the host and the network; rerun vgpu, which rolls back an interrupted "
                                   "run first") from None

    def _relogin(self) -> None:
        from pyVmomi import vim

        ep = self.session.endpoint
        try:
            self.session.content.sessionManager.Login(ep.user, ep.password)
        except vim.fault.InvalidLogin:
            raise RemoteError(f"the session with {self.label} ended and logging in again was refused",
                              hint="check the credentials and rerun") from None


class EsxiHypervisor:
    """The VM side of an ESXi host, with libvirt's interface (vgpu.hypervisor.base.Hypervisor)."""

    def __init__(self, host: EsxiHost, bars: dict[PciAddress, int]):
        self.host = host
        self.bars = bars  # 64-bit BAR bytes per GPU the profile may assign (docs/esxi.md, MMIO sizing)

    def domains(self) -> list[DomainInfo]:
        return [v.domain() for v in self.host.read().vms]

    def holders(self, addresses: Iterable[PciAddress]) -> dict[PciAddress, list[DomainInfo]]:
        return holding(self.domains(), addresses)

    def attach(self, domain: str, addresses: Sequence[PciAddress], *, numa_node: int | None,
               bar64_bytes: int, version: str | None = None) -> None:
        vm = self._powered_off(domain, "attaching GPUs")
        offered = self.host.passthrough_targets(domain)
        missing = [a for a in addresses if a not in offered]
        if missing:
            raise HostError(f"ESXi does not offer {', '.join(map(str, missing))} for passthrough to VM {domain} "
                            "(passthrough not active on the host)",
                            hint="run `vgpu plan`: a host reboot may be pending")
        spec = specs.attach_spec(vm, [(a, *offered[a]) for a in addresses], self._window_bytes(vm, addresses))
        self.host.reconfigure(domain, spec, f"attaching {', '.join(map(str, addresses))} to VM {domain}",
                              version=version or vm.change_version)

    def _window_bytes(self, vm: VmConfig, adding: Sequence[PciAddress]) -> int:
        functions = dict.fromkeys((*vm.passthrough, *adding))
        return sum(self.bars.get(a, 0) for a in functions)

    def detach(self, domain: str, addresses: Sequence[PciAddress], *, version: str | None = None) -> None:
        vm = self._powered_off(domain, "detaching GPUs")
        remaining = [a for a in vm.passthrough if a not in addresses]
        spec = specs.detach_spec(self._device_objects(vm), addresses, vm,
                                 sum(self.bars.get(a, 0) for a in remaining))
        self.host.reconfigure(domain, spec, f"detaching {', '.join(map(str, addresses))} from VM {domain}",
                              version=version or vm.change_version)

    def definition(self, domain: str) -> str:
        """The VM's restorable configuration (JSON): passthrough devices, firmware, memory lock, the
        extraConfig keys vgpu may change."""
        vm = self.host.read().vm(domain)
        if vm is None:
            raise HostError(f"{self.host.label} has no VM named {domain}")
        return specs.saved_config(vm, self._backings(vm))

    def restore(self, domain: str, saved: str) -> None:
        vm = self._powered_off(domain, "restoring the configuration")
        data = json.loads(saved)
        now = {str(d.backing.id) for d in self._device_objects(vm)}
        readd = any(isinstance(b, dict) and b.get("id") not in now for b in data.get("devices", []))
        ids = {str(a): sid for a, (_, sid) in self.host.passthrough_targets(domain).items()} if readd else {}
        spec = specs.restore_spec(vm, self._device_objects(vm), data, ids)
        if spec is not None:
            self.host.reconfigure(domain, spec, f"restoring VM {domain}'s configuration", version=vm.change_version)

    def _powered_off(self, domain: str, what: str) -> VmConfig:
        vm = self.host.read().vm(domain)
        if vm is None:
            raise HostError(f"{what}: {self.host.label} has no VM named {domain}")
        if vm.power != "poweredOff":
            raise InUseError(f"{what}: VM {domain} is {vm.power}; ESXi changes passthrough devices only while a VM "
                             "is off", hint="power it off, then run vgpu again")
        return vm

    @staticmethod
    def _device_objects(vm: VmConfig) -> list:
        """Its fixed DirectPath devices, as read: vgpu attaches and restores those; a Dynamic DirectPath I/O
        device (no host function in its backing) is the administrator's and is never touched."""
        from pyVmomi import vim

        return [d for d in vm.devices if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
                and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo)]

    def _backings(self, vm: VmConfig) -> list[dict]:
        out = []
        for dev in self._device_objects(vm):
            b = dev.backing
            out.append({"id": str(b.id), "deviceId": str(b.deviceId), "vendorId": int(b.vendorId),
                        "systemId": str(b.systemId), "deviceName": str(getattr(b, "deviceName", "") or "")})
        return out
