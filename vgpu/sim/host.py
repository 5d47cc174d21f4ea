"""SimHost: a simulated Linux host in a state directory (``state.json`` + the tree in ``root/``).

``SimHost.create`` builds a machine and boots it: loads the spec's modules in order (each driver
binds what it matches, gim creates VFs), applies ``state.bind``, enables NIC VFs. Everything later
goes through ``host.kernel`` (``vgpu.sim.kernel.SimKernel``), so separate processes see one host.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from vgpu.errors import HostError, InputError
from vgpu.sim import modules, pcicore
from vgpu.sim.build import build_state, initial_vfs
from vgpu.sim.kernel import LOG_NAME, SimKernel
from vgpu.sim.pcicore import Ctx
from vgpu.sim.spec import DEFAULT_MACHINE, MachineSpec, load_spec
from vgpu.sim.state import (STATE_FILE, Holder, SimState, load_state, save_state, write_atomic,
                            write_tree_mark)
from vgpu.sim.tree import Tree, registered_drivers

ROOT_NAME = "root"


class SimHost:
    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.root = self.state_dir / ROOT_NAME
        self.sys_root = self.root / "sys"
        self.kernel = SimKernel(self.state_dir, self.root)

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def create(cls, state_dir: Path, machine: str | Path | MachineSpec = DEFAULT_MACHINE) -> "SimHost":
        """Wipe ``state_dir`` (only if empty or a simulated host) and build ``machine`` in it.
        Raises InputError for an unknown machine, a malformed spec or a foreign directory."""
        spec = machine if isinstance(machine, MachineSpec) else load_spec(machine)
        state_dir = Path(state_dir)
        _check_ours(state_dir)
        state = build_state(spec)
        # boot in a staging directory first: a spec that cannot boot leaves the old host alone
        state_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{state_dir.name}.new-", dir=state_dir.parent))
        try:
            _write_etc(staging / ROOT_NAME, spec)
            ctx = Ctx(state)
            ctx.log("Linux version 6.8.0-sim (vgpu simulated host) #1 SMP PREEMPT_DYNAMIC")
            ctx.log(f"Command line: {state.cmdline}")
            _boot(ctx, staging / ROOT_NAME, spec)
            _check_ours(state_dir)
            if state_dir.exists():
                shutil.rmtree(state_dir)
            os.replace(staging, state_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        os.chmod(state_dir, 0o755)
        host = cls(state_dir)
        save_state(state_dir, state)
        Tree(host.root).render_all(state)
        (host.root / LOG_NAME).write_text("\n".join(ctx.log_lines) + "\n")
        write_tree_mark(state_dir, state.generation)
        return host

    @classmethod
    def open(cls, state_dir: Path) -> "SimHost":
        """An existing simulated host. Raises InputError when missing or corrupt."""
        host = cls(state_dir)
        host.kernel.repair()  # validates, and repairs a tree a crash left behind
        return host

    @staticmethod
    def exists(state_dir: Path) -> bool:
        """Whether ``state_dir`` holds a simulated host (it may still be corrupt: open() says)."""
        return (Path(state_dir) / STATE_FILE).is_file()

    def is_machine(self, machine: str | Path | MachineSpec) -> bool:
        """Whether this host was built from ``machine`` (a name, a spec file, or a spec).
        Raises InputError when ``machine`` itself is unknown or malformed."""
        spec = machine if isinstance(machine, MachineSpec) else load_spec(machine)
        return spec.model_dump(mode="json") == self.state.machine

    # -- views ------------------------------------------------------------------------------
    @property
    def state(self) -> SimState:
        return load_state(self.state_dir)

    @property
    def machine(self) -> MachineSpec:
        return MachineSpec.model_validate(self.state.machine)

    @property
    def log_path(self) -> Path:
        return self.root / LOG_NAME

    def dmesg(self) -> str:
        return self.log_path.read_text(encoding="utf-8") if self.log_path.exists() else ""

    # -- simulated processes ----------------------------------------------------------------
    def add_holder(self, group: int, comm: str) -> int:
        """A process holding /dev/vfio/<group> open (as QEMU does); returns its pid. While it
        lives, unbinding or removing a member of the group fails (a real kernel would block).
        The group must exist; it need not be bound to vfio-pci yet, so that tests can say "a VM
        uses this VF" in one call (a real process could only open an existing /dev/vfio node).
        Raises HostError for a group that does not exist."""
        if not comm or len(comm) > 15 or not comm.isprintable() or "/" in comm:
            raise InputError(f"process name {comm!r} must be 1-15 printable characters without '/'")

        def add(ctx: Ctx) -> int:
            if not any(f.iommu_group == group for f in ctx.state.functions.values()):
                raise HostError(f"cannot open /dev/vfio/{group}: No such file or directory "
                                "(no such IOMMU group)")
            pid = ctx.state.next_pid
            ctx.state.next_pid += 1
            ctx.state.holders[str(pid)] = Holder(pid=pid, comm=comm, group=group)
            return pid
        return self.kernel.transaction(f"add_holder:{group}", add, faultable=False)

    def remove_holder(self, pid: int) -> None:
        def remove(ctx: Ctx) -> None:
            if ctx.state.holders.pop(str(pid), None) is None:
                raise HostError(f"no simulated process with pid {pid}")
        self.kernel.transaction(f"remove_holder:{pid}", remove, faultable=False)


def _check_ours(state_dir: Path) -> None:
    """Refuse to replace a directory that is not a simulated host (or empty)."""
    if state_dir.exists():
        if not state_dir.is_dir():
            raise InputError(f"simulated host directory {state_dir} is a file")
        entries = {p.name for p in state_dir.iterdir()}
        if entries and STATE_FILE not in entries and ROOT_NAME not in entries:
            raise InputError(f"refusing to wipe {state_dir}: it is not empty and holds no simulated host",
                             hint="choose an empty or new directory for the simulated host")


def _write_etc(root: Path, spec: MachineSpec) -> None:
    conf = root / "etc" / "modprobe.d"
    conf.mkdir(parents=True, exist_ok=True)
    for name, text in spec.state.modprobe_d.items():
        write_atomic(conf / name, text if text.endswith("\n") else text + "\n")
    if spec.state.gim_config is not None:
        write_atomic(root / "etc" / "gim_config", spec.state.gim_config)


def _boot(ctx: Ctx, root: Path, spec: MachineSpec) -> None:
    """Load the spec's modules in order; ``state.bind`` devices go to their named driver (a
    temporary driver_override steers driver_attach), then NICs enable their initial VFs."""
    state = ctx.state
    for address, driver in spec.state.bind.items():
        state.functions[address].driver_override = driver
    try:
        for name, params in spec.state.modules.items():
            modules.load(ctx, root, name, params)
    except HostError as exc:
        raise InputError(f"machine spec {spec.name}: state.modules: {exc.message}") from None
    for address, driver in spec.state.bind.items():
        f = state.functions[address]
        f.driver_override = None
        if driver not in registered_drivers(state):
            raise InputError(f"machine spec {spec.name}: state.bind: driver {driver} for {address} is not "
                             f"registered by any module in state.modules")
        if f.driver != driver:
            raise InputError(f"machine spec {spec.name}: state.bind: {driver} could not bind {address}")
    for address, count in initial_vfs(spec).items():
        try:
            pcicore.write_sriov_numvfs(ctx, state.functions[address], str(count))
        except HostError as exc:
            raise InputError(f"machine spec {spec.name}: {address} initial_vfs: {exc.message}") from None
