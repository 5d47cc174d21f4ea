"""How each plan step is applied and undone on a host. One handler per step type.

``prepare`` reads what undo will need (before anything changes) and returns it as JSON-able data
that the executor journals first; ``apply`` changes the host; ``undo`` puts it back from that
data and must be safe to run twice or after a partial apply (crash recovery runs it blind).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vgpu.errors import HostError, VgpuError
from vgpu.host import binding, kmsg
from vgpu.executor import StepTable
from vgpu.host.files import FileStore
from vgpu.host.kernel import KernelOps
from vgpu.host.paths import HostPaths
from vgpu.model.pci import PciAddress
from vgpu.model.plan import (AttachFunctions, BindDevice, DetachFunctions, BindVfs, InstallPersistence, ReloadGim,
                             SetMemoryPartition, UnbindDevice, WriteFile)
from vgpu.persist import STATE_RECORD, UNIT_LINK, UNIT_LINK_TARGET, UNIT_PATH
from vgpu.planner import GIM_CONFIG



@dataclass
class Context:
    paths: HostPaths
    kernel: KernelOps
    files: FileStore
    baseline: dict = None  # config file contents before the run started (journaled)
    vf_timeout: float = 60.0  # GIM creates VFs at probe; big hosts take a while
    hypervisor: Callable[[], Any] | None = None  # opens the Hypervisor (libvirt) the VM steps use
    gim_reload: tuple[kmsg.Mark, dict[PciAddress, int]] | None = None  # the last reload: log mark, vf_num per PF

    def hv(self) -> Any:
        if self.hypervisor is None:
            raise HostError("this run has no hypervisor connection, so it cannot change VMs")
        return self.hypervisor()

    def pf_dir(self, pf: PciAddress):
        return binding.device_dir(self.paths, pf)

    def vfs_of(self, pf: PciAddress) -> list[PciAddress]:
        d = self.pf_dir(pf)
        links = sorted((n for n in os.listdir(d) if n.startswith("virtfn")), key=lambda n: int(n[6:]))
        return [PciAddress.parse(os.path.basename(os.readlink(d / n))) for n in links]

    def module_loaded(self, name: str) -> bool:
        return (self.paths.sys / "module" / name).is_dir()


# write-file ---------------------------------------------------------------------------------

def _file_prepare(step: WriteFile, ctx: Context) -> dict:
    before = ctx.files.read(step.path)
    ctx.files.check_writable(step.path)  # an unwritable /etc stops the run here, the file untouched
    return {"before": before, "new_dirs": ctx.files.missing_dirs(step.path)}


def _file_apply(step: WriteFile, ctx: Context, info: dict) -> None:
    ctx.files.write(step.path, step.content, step.mode)


def _file_undo(step: WriteFile, ctx: Context, info: dict) -> None:
    if ctx.files.read(step.path) != info.get("before"):  # equal: the write never happened (it failed)
        ctx.files.write(step.path, info.get("before"), step.mode)
    ctx.files.remove_dirs(info.get("new_dirs", []))


# reload-gim ---------------------------------------------------------------------------------

def _reload_prepare(step: ReloadGim, ctx: Context) -> dict:
    # The write-file steps before this one already changed gim_config: undo needs the pre-run text.
    baseline = ctx.baseline or {}
    config = baseline[GIM_CONFIG] if GIM_CONFIG in baseline else ctx.files.read(GIM_CONFIG)
    return {"config": config, "was_loaded": ctx.module_loaded("gim")}


def _reload_apply(step: ReloadGim, ctx: Context, info: dict) -> None:
    ctx.gim_reload = (kmsg.mark(ctx.paths), dict(zip(step.pfs, step.vf_num)))
    try:
        if ctx.module_loaded("gim"):
            ctx.kernel.unload_module("gim")
        ctx.kernel.load_module("gim")  # no vf_num on the command line: it would override /etc/gim_config
        _wait_for_vfs(ctx, dict(zip(step.pfs, step.vf_num)))
    except VgpuError as exc:
        raise with_gim_log(exc, ctx) from exc


def verify_with_gim_log(ctx: Context, verify: Callable[[], None]) -> None:
    """Run a plan's verification; when it fails after this run reloaded gim, say what GIM logged."""
    try:
        verify()
    except VgpuError as exc:
        raise with_gim_log(exc, ctx) from exc


def with_gim_log(exc: VgpuError, ctx: Context) -> VgpuError:
    """``exc`` with GIM's kernel-log reasons since the last gim reload appended, in the plan's terms
    (the same exception when this run reloaded no gim or GIM logged no reason). GIM refuses a
    vf_num by leaving the PF without VFs; only its log says why."""
    if ctx.gim_reload is None:
        return exc
    since, vf_num = ctx.gim_reload
    why = kmsg.explain(kmsg.gim_since(ctx.paths, since), vf_num)
    if why is None:
        return exc
    return type(exc)(f"{exc.message}; {why}", subject=exc.subject,
                     hint="GIM refused the configuration for the reason its log gives (a vf_num above what "
                          "the firmware allows, say); `dmesg | grep gim` has the whole log")


def _reload_undo(step: ReloadGim, ctx: Context, info: dict) -> None:
    # Undo runs before the earlier write-file undos: put gim's config back first so the reload
    # recreates the VFs the host had.
    ctx.files.write(GIM_CONFIG, info.get("config"))
    if ctx.module_loaded("gim"):
        ctx.kernel.unload_module("gim")
    if info.get("was_loaded", True):
        ctx.kernel.load_module("gim")
        ctx.kernel.settle(ctx.vf_timeout)


def _wait_for_vfs(ctx: Context, expected: dict[PciAddress, int]) -> None:
    """Wait (udev settle, then polling) until each PF has its VFs; a clear error on timeout."""
    deadline = time.monotonic() + ctx.vf_timeout
    while True:
        ctx.kernel.settle(min(5.0, ctx.vf_timeout))
        missing = {pf: n for pf, n in expected.items() if len(ctx.vfs_of(pf)) != n}
        if not missing:
            return
        if time.monotonic() >= deadline:
            pf, n = next(iter(missing.items()))
            raise HostError(f"gim did not create {n} VF(s) on {pf} within {ctx.vf_timeout:g} s "
                            f"(it has {len(ctx.vfs_of(pf))})",
                            hint="see `dmesg | grep gim`: vf_num must be allowed and at most TotalVFs")
        time.sleep(0.1)


# set-memory-partition -----------------------------------------------------------------------

def _mem_prepare(step: SetMemoryPartition, ctx: Context) -> dict:
    try:
        before = (ctx.pf_dir(step.pf) / "memory_partition_mode").read_text().split()[0]
    except (OSError, IndexError):
        before = None
    return {"before": before}


def _mem_apply(step: SetMemoryPartition, ctx: Context, info: dict) -> None:
    ctx.kernel.write_attr(ctx.pf_dir(step.pf) / "memory_partition_mode", step.mode)


def _mem_undo(step: SetMemoryPartition, ctx: Context, info: dict) -> None:
    if info.get("before"):
        ctx.kernel.write_attr(ctx.pf_dir(step.pf) / "memory_partition_mode", info["before"])


# bind-vfs / bind-device / unbind-device -----------------------------------------------------

def _vfs_prepare(step: BindVfs, ctx: Context) -> dict:
    return {"drivers": {str(vf): binding.current_driver(ctx.paths, vf) for vf in ctx.vfs_of(step.pf)}}


def _vfs_apply(step: BindVfs, ctx: Context, info: dict) -> None:
    vfs = ctx.vfs_of(step.pf)
    if len(vfs) != step.count:
        raise HostError(f"{step.pf} has {len(vfs)} VF(s), expected {step.count}")
    for vf in vfs:
        info["drivers"].setdefault(str(vf), binding.current_driver(ctx.paths, vf))
        binding.bind(ctx.paths, ctx.kernel, vf, step.driver)


def _vfs_undo(step: BindVfs, ctx: Context, info: dict) -> None:
    for vf in ctx.vfs_of(step.pf):
        if str(vf) in info.get("drivers", {}) and binding.current_driver(ctx.paths, vf) is not None:
            binding.unbind(ctx.paths, ctx.kernel, vf, restore=info["drivers"][str(vf)])


def _dev_prepare(step: BindDevice, ctx: Context) -> dict:
    return {"previous": binding.current_driver(ctx.paths, step.address)}


def _dev_apply(step: BindDevice, ctx: Context, info: dict) -> None:
    binding.bind(ctx.paths, ctx.kernel, step.address, step.driver)


def _dev_undo(step: BindDevice, ctx: Context, info: dict) -> None:
    if binding.current_driver(ctx.paths, step.address) != info.get("previous"):
        binding.unbind(ctx.paths, ctx.kernel, step.address, restore=info.get("previous"))


def _unbind_prepare(step: UnbindDevice, ctx: Context) -> dict:
    return {"previous": binding.current_driver(ctx.paths, step.address)}


def _unbind_apply(step: UnbindDevice, ctx: Context, info: dict) -> None:
    binding.unbind(ctx.paths, ctx.kernel, step.address, restore=step.restore)


def _unbind_undo(step: UnbindDevice, ctx: Context, info: dict) -> None:
    previous = info.get("previous")
    if previous and binding.current_driver(ctx.paths, step.address) != previous:
        binding.bind(ctx.paths, ctx.kernel, step.address, previous)


# install-persistence ------------------------------------------------------------------------

def _persist_prepare(step: InstallPersistence, ctx: Context) -> dict:
    paths = (STATE_RECORD, UNIT_PATH, UNIT_LINK)
    new_dirs = [d for p in paths for d in ctx.files.missing_dirs(p)]
    return {**{p: ctx.files.read(p) for p in paths}, "new_dirs": new_dirs}


def _persist_apply(step: InstallPersistence, ctx: Context, info: dict) -> None:
    ctx.files.write(STATE_RECORD, step.record, 0o644)
    ctx.files.write(UNIT_PATH, step.unit if step.record is not None else None, 0o644)
    ctx.files.symlink(UNIT_LINK, UNIT_LINK_TARGET if step.record is not None else None)


def _persist_undo(step: InstallPersistence, ctx: Context, info: dict) -> None:
    ctx.files.write(STATE_RECORD, info.get(STATE_RECORD))
    ctx.files.write(UNIT_PATH, info.get(UNIT_PATH))
    ctx.files.symlink(UNIT_LINK, info.get(UNIT_LINK))
    ctx.files.remove_dirs(info.get("new_dirs", []))


# attach-functions / detach-functions -----------------------------------------------------------------------------

def _vm_prepare(step: AttachFunctions | DetachFunctions, ctx: Context) -> dict:
    return {"xml": ctx.hv().definition(step.vm)}  # undo puts this exact configuration back


def _attach_apply(step: AttachFunctions, ctx: Context, info: dict) -> None:
    from vgpu.host.pcifunc import parse_resource

    bar64 = 0
    for address in step.functions:
        # the plan predicted these addresses; attach only what really is a function bound for VMs
        if binding.current_driver(ctx.paths, address) != "vfio-pci":
            raise HostError(f"{address} is not bound to vfio-pci, so it is not attached to VM {step.vm}",
                            hint="the VF addresses the plan predicted did not appear; run `vgpu plan` again")
        text = (binding.device_dir(ctx.paths, address) / "resource").read_text()
        bar64 += sum(b.size for b in parse_resource(text) if b.is_64bit)
    ctx.hv().attach(step.vm, step.functions, numa_node=step.numa_node, bar64_bytes=bar64)


def _vm_restore(step: AttachFunctions | DetachFunctions, ctx: Context, info: dict) -> None:
    hv = ctx.hv()
    if not info.get("xml") or step.vm not in {d.name for d in hv.domains()}:
        return  # nothing saved yet, or the VM was undefined since: no configuration to put back
    if hv.definition(step.vm) != info["xml"]:
        hv.restore(step.vm, info["xml"])


def _detach_apply(step: DetachFunctions, ctx: Context, info: dict) -> None:
    ctx.hv().detach(step.vm, step.functions)


# GPU clients ----------------------------------------------------------------------------------

def _clients_stopped(body: Callable) -> Callable:
    """``body`` (a step's apply or undo) with the step's GPU-client services stopped around it: stop each
    unit, run, then start each one again and verify it is active, also when the body failed (as
    mig-parted's apply hooks do; docs/hardware.md §3). A unit that does not come back fails the step."""
    def run(step, ctx: Context, info: dict) -> None:
        units = getattr(getattr(step, "disruption", None), "units", ())
        stopped: list[str] = []
        try:
            for unit in units:
                ctx.kernel.stop_unit(unit)
                stopped.append(unit)
            body(step, ctx, info)
        except VgpuError as exc:
            broken = _restart(ctx, stopped)
            if broken:
                raise type(exc)(f"{exc.message}; and {broken}", subject=exc.subject, hint=exc.hint) from exc
            raise
        broken = _restart(ctx, stopped)
        if broken:
            raise HostError(broken, hint="`systemctl status UNIT` and `journalctl -u UNIT` say why")
    return run


def _restart(ctx: Context, units: list[str]) -> str | None:
    """Start every unit and check it is active; a sentence naming those that are not, or None."""
    failed = []
    for unit in units:
        try:
            ctx.kernel.start_unit(unit)
        except VgpuError as exc:
            failed.append(f"{unit} ({exc.message})")
            continue
        if not ctx.kernel.unit_active(unit):
            failed.append(f"{unit} (not active after start)")
    return f"GPU client service(s) did not come back: {', '.join(failed)}" if failed else None


TABLE = StepTable("Linux/KVM", {
    WriteFile: (_file_prepare, _file_apply, _file_undo),
    ReloadGim: (_reload_prepare, _clients_stopped(_reload_apply), _clients_stopped(_reload_undo)),
    SetMemoryPartition: (_mem_prepare, _clients_stopped(_mem_apply), _clients_stopped(_mem_undo)),
    BindVfs: (_vfs_prepare, _vfs_apply, _vfs_undo),
    BindDevice: (_dev_prepare, _clients_stopped(_dev_apply), _clients_stopped(_dev_undo)),
    UnbindDevice: (_unbind_prepare, _clients_stopped(_unbind_apply), _clients_stopped(_unbind_undo)),
    InstallPersistence: (_persist_prepare, _persist_apply, _persist_undo),
    AttachFunctions: (_vm_prepare, _attach_apply, _vm_restore),
    DetachFunctions: (_vm_prepare, _detach_apply, _vm_restore),
}, plans=(WriteFile, ReloadGim, SetMemoryPartition, BindVfs, BindDevice, UnbindDevice, InstallPersistence,
          AttachFunctions, DetachFunctions))
