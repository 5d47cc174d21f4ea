"""SimHost: a simulated Linux host in a state directory (``state.json`` + the tree in ``root/``).

``SimHost.create`` builds a machine and boots it: loads the spec's modules in order (each driver
binds what it matches, gim creates VFs), applies ``state.bind``, enables NIC VFs. Everything later
goes through ``host.kernel`` (``vgpu.sim.kernel.SimKernel``), so separate processes see one host.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from vgpu.errors import HostError, InputError
from vgpu.sim.kernel import LOG_NAME, SimKernel
from vgpu.sim.state import LOCK_FILE, Holder, SimState, load_state, save_state, write_atomic, write_tree_mark

# Building a machine (spec, presets, boot through the kernel model) is imported where a host is built:
# opening an existing one for a read command needs only its state, its tree and the kernel's lock.
if TYPE_CHECKING:
    from vgpu.sim.pcicore import Ctx
    from vgpu.sim.spec import MachineSpec

ROOT_NAME = "root"
DEFAULT_MACHINE = "8xmi300x"  # vgpu.sim.spec.DEFAULT_MACHINE, here without importing the spec's models
_PLAIN_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # MachineSpec.name's pattern


class SimHost:
    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.root = self.state_dir / ROOT_NAME
        self.sys_root = self.root / "sys"
        self.kernel = SimKernel(self.state_dir, self.root)
        self._machine_name: str | None = None  # read once: a host keeps its machine until rebuilt

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def create(cls, state_dir: Path, machine: str | Path | MachineSpec = DEFAULT_MACHINE) -> "SimHost":
        """Wipe ``state_dir`` (only if empty or a simulated host) and build ``machine`` in it.
        Raises InputError for an unknown machine, a malformed spec or a foreign directory."""
        from vgpu.sim.build import build_state
        from vgpu.sim.pcicore import Ctx
        from vgpu.sim.spec import MachineSpec, load_spec
        from vgpu.sim.tree import Tree

        spec = machine if isinstance(machine, MachineSpec) else load_spec(machine)
        state_dir = Path(state_dir)
        _check_ours(state_dir)
        state = build_state(spec)
        # boot in a staging directory first: a spec that cannot boot leaves the old host alone
        state_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{state_dir.name}.new-", dir=state_dir.parent))
        try:
            _claim(staging)
            _write_etc(staging / ROOT_NAME, spec)
            ctx = Ctx(state)
            ctx.log(f"Linux version {spec.state.kernel_release} (vgpu simulated host) #1 SMP PREEMPT_DYNAMIC")
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
        host._complete()
        return host

    def _complete(self) -> None:
        """Create now what reading the host would otherwise create lazily (the state lock, the simulated
        libvirt's node), so that read-only commands (plan, status, check mode) leave the directory as it is."""
        from vgpu.hypervisor.sim import SimHypervisor
        from vgpu.vms import sim_hypervisor_dir
        (self.state_dir / LOCK_FILE).touch(mode=0o644)
        SimHypervisor(sim_hypervisor_dir(self.root))

    def target(self):
        """This host as every command sees a host (vgpu.host.target.HostTarget): its tree, its kernel,
        its libvirt (the test driver), its state dir, and the test hooks of vgpu.sim.hooks."""
        from vgpu.host.paths import HostPaths
        from vgpu.host.target import HostTarget
        from vgpu.hypervisor.sim import SimHypervisor
        from vgpu.sim.hooks import pause_at_start, step_hook_from_env
        from vgpu.vms import sim_hypervisor_dir

        pause_at_start(self.root)
        return HostTarget(HostPaths.under(self.root, label=f"simulated {self.machine_name}"),
                          state=self.root / "var" / "lib" / "vgpu", kernel_ops=self.kernel,
                          hypervisor_factory=lambda: SimHypervisor(sim_hypervisor_dir(self.root)),
                          step_hook=step_hook_from_env(self.root), local_processes=False,
                          amdsmi_runner=lambda: self._amdsmi())

    def _amdsmi(self):
        """The simulated amd-smi of this host, or None where its machine spec does not install it."""
        from vgpu.sim.amdsmi import runner
        return runner(self)

    @classmethod
    def open(cls, state_dir: Path) -> "SimHost":
        """An existing simulated host. Raises InputError when missing, unmarked or corrupt."""
        if not is_sim_dir(check_location(state_dir)):
            raise InputError(f"{state_dir} is not a simulated host vgpu made (no {MARKER} marker)",
                             hint="create one with `vgpu sim reset --sim-dir DIR` in a new directory")
        host = cls(state_dir)
        state = host.kernel.repair()  # validates, and repairs a tree a crash left behind
        host._machine_name = _name_of(state.machine, host.state_dir)
        return host

    @staticmethod
    def exists(state_dir: Path) -> bool:
        """Whether ``state_dir`` is a simulated host vgpu made (it may still be corrupt: open() says)."""
        return is_sim_dir(state_dir)

    def is_machine(self, machine: str | Path | MachineSpec) -> bool:
        """Whether this host was built from ``machine`` (a name, a spec file, or a spec).
        Raises InputError when ``machine`` itself is unknown or malformed."""
        from vgpu.sim.spec import MachineSpec, load_spec
        spec = machine if isinstance(machine, MachineSpec) else load_spec(machine)
        return spec.model_dump(mode="json") == self.state.machine

    # -- views ------------------------------------------------------------------------------
    @property
    def state(self) -> SimState:
        return load_state(self.state_dir)

    @property
    def machine(self) -> MachineSpec:
        return _spec_of(self.state.machine, self.state_dir)

    @property
    def machine_name(self) -> str:
        """The machine's name, as ``machine.name``, without building the spec's models for a plain name."""
        if self._machine_name is None:
            self._machine_name = _name_of(self.state.machine, self.state_dir)
        return self._machine_name

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


def _name_of(machine: dict, state_dir: Path) -> str:
    name = machine.get("name")
    if isinstance(name, str) and _PLAIN_NAME.fullmatch(name):
        return name
    return _spec_of(machine, state_dir).name  # not a name a spec can have: says what is wrong


def _spec_of(machine: dict, state_dir: Path) -> MachineSpec:
    """The machine spec a state was built from; a hand-edited one that is not a spec is corrupt state."""
    from pydantic import ValidationError

    from vgpu.inputs import validation_problem
    from vgpu.sim.spec import MachineSpec
    from vgpu.sim.state import STATE_FILE
    try:
        return MachineSpec.model_validate(machine)
    except ValidationError as exc:
        raise InputError(f"simulated host state {Path(state_dir) / STATE_FILE} is corrupt "
                         f"(machine: {validation_problem(exc, limit=120)})",
                         hint="rebuild it with `vgpu sim reset`") from None


# A simulator directory is recognised only by this file, which vgpu writes when it builds a host
# there: vgpu never deletes or replaces a directory without it (some other program's state.json or
# root/ does not count), so a mistyped --sim-dir or an unset variable cannot cost anyone their files.
MARKER = ".vgpu-sim"
MARKER_FORMAT = "vgpu.sim-dir/v1"


def is_sim_dir(state_dir: Path) -> bool:
    """Whether vgpu's marker is in ``state_dir`` (a regular file naming the format)."""
    from vgpu.inputs import read_optional
    try:
        raw = read_optional(Path(state_dir) / MARKER, "simulator state")
    except InputError:
        return False
    return raw is not None and raw.decode("utf-8", "replace").split("\n", 1)[0].strip() == MARKER_FORMAT


def check_location(state_dir: Path | str, *, writable: bool = True) -> Path:
    """``state_dir`` as a usable simulator directory, or InputError (exit 5): an empty value (which
    would mean the current directory), ``/``, the home directory, a symbolic link, something that is
    not a directory, or (``writable``) a directory this user cannot write, or cannot create because
    its nearest existing parent is not writable. It need not exist yet."""
    text = str(state_dir)
    if not text.strip():
        raise InputError("the simulator directory is empty ('' would mean the current directory)",
                         hint="give --sim-dir DIR or VGPU_SIM_DIR a directory of its own, or leave both unset")
    path = Path(text)
    real = Path(os.path.realpath(path))
    home = Path(os.path.realpath(os.path.expanduser("~")))
    if real == Path("/") or real == home or real in (Path(p) for p in _SYSTEM_DIRS):
        raise InputError(f"refusing {text} as the simulator directory: it is {real}, not a directory of its own",
                         hint="use a new directory, e.g. ~/.cache/vgpu/sim (the default)")
    if _holds_cwd(real) and not is_sim_dir(real):  # '.', '..': where the operator's own files are
        raise InputError(f"refusing {text} as the simulator directory: it is {real}, the current directory "
                         "or one above it", hint="use a new directory, e.g. ~/.cache/vgpu/sim (the default)")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if writable:
            _check_creatable(path)
        return path
    except OSError as exc:
        from vgpu.inputs import write_error
        raise write_error(exc, "simulator directory", path) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"simulator directory {text} is a symbolic link; give the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        from vgpu.inputs import describe_mode
        raise InputError(f"simulator directory {text} is {describe_mode(st.st_mode)}, not a directory")
    if writable and not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"simulator directory {text} is not writable by you (it belongs to uid {st.st_uid}; "
                         f"you are uid {os.geteuid()})", hint="use a simulator directory of your own: --sim-dir DIR")
    return path


def _holds_cwd(real: Path) -> bool:
    try:
        cwd = Path(os.path.realpath(os.getcwd()))
    except OSError:  # the current directory was deleted
        return False
    return real == cwd or real in cwd.parents


def _check_creatable(path: Path) -> None:
    parent = Path(os.path.abspath(path)).parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not os.path.isdir(parent):
        raise InputError(f"cannot create simulator directory {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot create simulator directory {path}: {parent} is not writable by you "
                         f"(uid {os.geteuid()})", hint="use a simulator directory of your own: --sim-dir DIR, "
                         "or set HOME / XDG_CACHE_HOME to a directory you own")


_SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root", "/run",
                "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/tmp", "/mnt", "/media")


def _check_ours(state_dir: Path) -> None:
    """Refuse to replace a directory that is neither empty nor marked as vgpu's simulator directory."""
    check_location(state_dir)
    if state_dir.exists():
        if any(state_dir.iterdir()) and not is_sim_dir(state_dir):
            raise InputError(f"refusing to replace {state_dir}: it is not empty and has no {MARKER} marker, "
                             "so it is not a simulated host vgpu made",
                             hint="choose an empty or new directory for the simulated host")


def _claim(staging: Path) -> None:
    write_atomic(staging / MARKER, f"{MARKER_FORMAT}\nThis directory is a host simulated by vgpu; "
                                   "`vgpu sim remove` deletes it.\n")


def _write_etc(root: Path, spec: MachineSpec) -> None:
    conf = root / "etc" / "modprobe.d"
    conf.mkdir(parents=True, exist_ok=True)
    for name, text in spec.state.modprobe_d.items():
        write_atomic(conf / name, text if text.endswith("\n") else text + "\n")
    if spec.state.gim_config is not None:
        write_atomic(root / "etc" / "gim_config", spec.state.gim_config)
    write_atomic(root / "etc" / "os-release", os_release_text(spec))


def os_release_text(spec: MachineSpec) -> str:
    """/etc/os-release as os-release(5) writes it, from the spec's state.os_release."""
    osr = spec.state.os_release
    pretty = osr.pretty_name or f"{_OS_NAMES.get(osr.id, osr.id)} {osr.version_id}"
    return (f'PRETTY_NAME="{pretty}"\nNAME="{_OS_NAMES.get(osr.id, osr.id)}"\nVERSION_ID="{osr.version_id}"\n'
            f"ID={osr.id}\n")


_OS_NAMES = {"ubuntu": "Ubuntu", "rhel": "Red Hat Enterprise Linux", "debian": "Debian GNU/Linux",
             "rocky": "Rocky Linux"}


def _boot(ctx: Ctx, root: Path, spec: MachineSpec) -> None:
    """Load the spec's modules in order; ``state.bind`` devices go to their named driver (a
    temporary driver_override steers driver_attach), then NICs enable their initial VFs."""
    from vgpu.sim import modules, pcicore
    from vgpu.sim.build import initial_vfs
    from vgpu.sim.tree import registered_drivers

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
    from vgpu.sim.services import add_client
    for client in spec.state.gpu_clients:  # GPU clients start after the drivers, as their services do
        add_client(ctx, client.comm, client.device, client.unit or "")
