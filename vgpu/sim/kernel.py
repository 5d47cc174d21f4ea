"""SimKernel: ``vgpu.host.kernel.KernelOps`` on a simulated host.

Each operation runs under the state directory's lock on a fresh copy of the saved state, so
separate processes see one host. It is all-or-nothing: when it raises HostError nothing changed
(only the kernel log grows). On success the state is saved first, then the touched parts of
the tree are rendered (see ``vgpu.sim.state`` for crash consistency).

Fault injection (issue #3's rollback tests): ``fail_next("write_attr:*/drivers_probe")`` makes
the next operation whose description matches (fnmatch) raise HostError before it changes
anything; descriptions are ``load_module:NAME``, ``unload_module:NAME``,
``write_attr:/sys/...`` (path inside the root; also matched as ``write_attr:/sys/...=VALUE``)
and ``settle``. Armed faults live in the state, so they reach a ``vgpu`` subprocess too.
"""

from __future__ import annotations

import fnmatch
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from vgpu.errors import HostError
from vgpu.host.kmsg import LOG_FILE
from vgpu.sim.state import (Fault, SimState, locked, parse_state, read_state_text, read_tree_mark, save_state,
                            write_tree_mark)
from vgpu.sim.tree import Tree

# The kernel model (gim, modules, PCI core, and through them the machine specs) is imported by the
# operations that change something: a read command only opens the host (repair) and reads its tree.
if TYPE_CHECKING:
    from vgpu.sim.pcicore import Ctx

LOG_NAME = LOG_FILE  # the kernel log of the tree, where vgpu.host.kmsg reads it back
_GIM_ATTRS = ("memory_partition_mode", "accelerator_partition_profile")
_AMDGPU_ATTRS = ("current_compute_partition", "current_memory_partition")


class SimKernel:
    """Implements KernelOps (load_module, unload_module, write_attr, settle, the unit calls) plus fail_next."""

    def __init__(self, state_dir: Path, root: Path):
        self.state_dir = Path(state_dir)
        self.root = Path(root)
        self.tree = Tree(self.root)
        # The state this kernel saved last, with its text: the next transaction uses it again when state.json
        # still holds exactly that text (another process changed nothing), instead of parsing it again. Taken at
        # the start of every transaction and given back only by a commit, so a change that failed half way never
        # leaves its half-changed state here.
        self._saved: tuple[str, SimState] | None = None

    # -- KernelOps --------------------------------------------------------------------------
    def load_module(self, name: str, params: Mapping[str, str] | None = None) -> None:
        from vgpu.sim import modules
        self.transaction(f"load_module:{name}",
                         lambda ctx: modules.load(ctx, self.root, name, dict(params or {})))

    def unload_module(self, name: str) -> None:
        from vgpu.sim import modules
        self.transaction(f"unload_module:{name}", lambda ctx: modules.unload(ctx, name))

    def write_attr(self, path: Path, value: str) -> None:
        rel = self._inside(Path(path))
        self.transaction(f"write_attr:/{rel}", lambda ctx: self._write(ctx, Path(path), value), value=value)

    def stop_unit(self, unit: str) -> None:
        from vgpu.sim import services
        self.transaction(f"stop_unit:{unit}", lambda ctx: services.stop(ctx, unit))

    def start_unit(self, unit: str) -> None:
        from vgpu.sim import services
        self.transaction(f"start_unit:{unit}", lambda ctx: services.start(ctx, unit))

    def unit_active(self, unit: str) -> bool:
        with locked(self.state_dir):
            state = self.fresh_state()
        return any(h.unit == unit for h in state.holders.values())

    def settle(self, timeout: float) -> None:
        """Nothing is ever pending: the model applies every change before returning."""
        self.transaction("settle", lambda ctx: None, readonly=True)

    # -- fault injection --------------------------------------------------------------------
    def fail_next(self, op: str, error: str = "injected fault", *, skip: int = 0, kill: bool = False) -> None:
        """Arm a fault: the (skip+1)-th next operation matching ``op`` raises HostError(error),
        or with ``kill`` completes and then SIGKILLs the calling process (crash tests)."""
        def arm(ctx: Ctx) -> None:
            ctx.state.faults.append(Fault(pattern=op, error=error, skip=skip, kill=kill))
        self.transaction("arm-fault", arm, faultable=False)

    def clear_faults(self) -> None:
        self.transaction("clear-faults", lambda ctx: ctx.state.faults.clear(), faultable=False)

    # -- machinery --------------------------------------------------------------------------
    def transaction(self, description: str, change: Callable[[Ctx], object], *, value: str | None = None,
                    readonly: bool = False, faultable: bool = True):
        saved, self._saved = self._saved, None
        with locked(self.state_dir):
            state = self.fresh_state(checked=saved)
            fault = self._take_fault(state, description, value) if faultable else None
            if fault is not None and not fault.kill:
                save_state(self.state_dir, state)  # the fault is spent
                raise HostError(f"{description}: {fault.error}", subject="injected")
            if readonly and fault is None:
                return None
            from vgpu.sim.pcicore import Ctx
            ctx = Ctx(state)
            try:
                result = change(ctx)
            except HostError:
                self._append_log(ctx.log_lines)
                raise
            self._commit(ctx)
        if fault is not None and fault.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def repair(self) -> SimState:
        """Validate the saved state and re-render the tree if a crash left it behind, under the
        state lock so that another process's operation is never interleaved with the render."""
        # a missing or corrupt host is an InputError, and no lock file is made
        text = read_state_text(self.state_dir)
        state = parse_state(text, self.state_dir)
        with locked(self.state_dir):
            return self.fresh_state(checked=(text, state))

    def fresh_state(self, checked: tuple[str, SimState] | None = None) -> SimState:
        """The saved state; re-renders the whole tree if a crash left it behind the state.
        Callers hold the state lock (``transaction`` and ``repair`` do). ``checked``: a text of the state
        file read before and the state parsed from it, used again when the file still holds that text."""
        text = read_state_text(self.state_dir)
        unchanged = checked is not None and checked[0] == text
        state = checked[1] if unchanged else parse_state(text, self.state_dir)
        if read_tree_mark(self.state_dir) != state.generation:
            self.tree.render_all(state)
            write_tree_mark(self.state_dir, state.generation)
        return state

    def _commit(self, ctx: Ctx) -> None:
        state = ctx.state
        state.generation += 1
        text = save_state(self.state_dir, state)
        for f in ctx.removed:
            self.tree.remove_function(state, f)
        for address in sorted(ctx.dirty):
            if address in state.functions:
                self.tree.render_function(state, state.functions[address])
        self.tree.render_globals(state)
        self._append_log(ctx.log_lines)
        write_tree_mark(self.state_dir, state.generation)
        self._saved = (text, state)

    def _append_log(self, lines: list[str]) -> None:
        if lines:
            with open(self.root / LOG_NAME, "a", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")

    @staticmethod
    def _take_fault(state: SimState, description: str, value: str | None) -> Fault | None:
        names = [description] + ([f"{description}={value.strip()}"] if value is not None else [])
        for fault in state.faults:
            if any(fnmatch.fnmatchcase(n, fault.pattern) for n in names):
                if fault.skip:
                    fault.skip -= 1
                    return None
                state.faults.remove(fault)
                return fault
        return None

    def _inside(self, path: Path) -> str:
        """The path relative to the root; HostError for anything outside it (even via links)."""
        root = os.path.realpath(self.root)
        raw = os.path.abspath(path)
        real = os.path.realpath(path)
        for candidate in (raw, real):
            if os.path.commonpath([root, candidate]) != root:
                raise HostError(f"{path} is outside the simulated host {self.root}")
        return os.path.relpath(real, root)

    # -- attribute writes -------------------------------------------------------------------
    def _write(self, ctx: Ctx, path: Path, value: str) -> None:
        from vgpu.sim import pcicore
        parts = Path(self._inside(path)).parts
        if parts == ("sys", "bus", "pci", "drivers_probe"):
            f = ctx.fn(pcicore.address_from(path, value))
            pcicore.probe(ctx, f)
        elif parts[:4] == ("sys", "bus", "pci", "drivers") and len(parts) == 6:
            self._driver_file(ctx, path, parts[4], parts[5], value)
        elif parts[:2] == ("sys", "devices") and len(parts) >= 4 and parts[-2] in ctx.state.functions:
            self._device_file(ctx, path, ctx.state.functions[parts[-2]], parts[-1], value)
        elif parts[:4] == ("sys", "kernel", "mm", "hugepages") and parts[-1] == "nr_hugepages":
            size = parts[4].removeprefix("hugepages-").removesuffix("kB")
            ctx.state.hugepages[size] = _number(path, value)
        else:
            _refuse(path)

    def _driver_file(self, ctx: Ctx, path: Path, driver: str, name: str, value: str) -> None:
        from vgpu.sim import pcicore
        if not pcicore.is_registered(ctx.state, driver):
            raise HostError(f"{path}: No such file or directory (driver {driver} is not loaded)")
        if name in ("new_id", "remove_id"):
            words = value.split()
            if len(words) < 2 or not all(_is_hex(w) for w in words[:2]):
                raise HostError(f"writing {value.strip()!r} to {path} failed: Invalid argument (EINVAL)")
            entry = f"{int(words[0], 16):04x} {int(words[1], 16):04x}"
            ids = ctx.state.dynamic_ids.setdefault(driver, [])
            if name == "new_id":
                ids.append(entry) if entry not in ids else None
                for f in ctx.state.sorted_functions():  # new_id probes matching unbound devices
                    if f.driver is None and pcicore.matches(ctx.state, f, driver):
                        pcicore.probe(ctx, f, only=driver)
            elif entry in ids:
                ids.remove(entry)
            return
        f = ctx.fn(pcicore.address_from(path, value))
        if name == "unbind":
            if f.driver != driver:
                raise HostError(f"writing {f.address} to {path} failed: No such device (ENODEV): "
                                f"it is bound to {f.driver or 'no driver'}")
            pcicore.unbind(ctx, f)
        elif name == "bind":
            if f.driver is not None or not pcicore.matches(ctx.state, f, driver):
                why = f"it is bound to {f.driver}" if f.driver else f"{driver} does not match it"
                raise HostError(f"writing {f.address} to {path} failed: No such device (ENODEV): {why}")
            if not pcicore.bind(ctx, f, driver):
                raise HostError(f"writing {f.address} to {path} failed: Invalid argument (EINVAL): "
                                "probe failed")
        else:
            _refuse(path)

    def _device_file(self, ctx: Ctx, path: Path, f, name: str, value: str) -> None:
        from vgpu.sim import gim, pcicore
        if name == "driver_override":
            text = value.strip()
            f.driver_override = text or None
            ctx.dirty.add(f.address)
        elif name == "sriov_numvfs" and f.sriov is not None:
            pcicore.write_sriov_numvfs(ctx, f, value)
        elif name in _GIM_ATTRS and f.driver == "gim" and f.compute_partition:
            gim.write_partition(ctx, f, name, value)
        elif name in _AMDGPU_ATTRS and f.driver == "amdgpu" and f.compute_partition:
            _amdgpu_partition(ctx, f, name, value)
        elif name in ("reset", "sriov_drivers_autoprobe"):
            pcicore.ensure_not_held(ctx, [f], f"resetting {f.address}") if name == "reset" else None
        else:
            _refuse(path)


def _amdgpu_partition(ctx: Ctx, f, name: str, value: str) -> None:
    """amdgpu's current_*_partition: a mode the model has, memory partitions <= compute ones
    (ROCm amdgpu-docs gpu-partitioning/mi300x/overview.rst)."""
    from vgpu.catalog import DEFAULT as CATALOG
    model = CATALOG.by_name(f.gpu_model)
    text = value.strip().upper()
    compute, memory = f.compute_partition, f.memory_partition
    if name == "current_compute_partition":
        compute = text
        ok = text in {p.value for p in model.compute_partitions}
    else:
        memory = text
        ok = text in {p.value for p in model.memory_partitions}
    counts = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}
    if not ok or int(memory[3:]) > counts.get(compute, 0):
        raise HostError(f"writing {value.strip()!r} to {f.address}/{name} failed: Invalid argument (EINVAL)")
    f.compute_partition, f.memory_partition = compute, memory
    ctx.dirty.add(f.address)


def _number(path: Path, value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = -1
    if number < 0:
        raise HostError(f"writing {value.strip()!r} to {path} failed: Invalid argument (EINVAL)")
    return number


def _is_hex(word: str) -> bool:
    try:
        int(word, 16)
        return True
    except ValueError:
        return False


def _refuse(path: Path) -> None:
    if not os.path.lexists(path):
        raise HostError(f"writing to {path} failed: No such file or directory")
    raise HostError(f"writing to {path} failed: Permission denied (read-only attribute, or not modelled "
                    "by the simulated kernel)")
