"""modprobe / modprobe -r in the simulated kernel.

As kmod does: options come from <etc>/modprobe.d/*.conf (``options NAME k=v``), then the kernel
command line (``NAME.k=v``), then the command's own arguments, later ones winning; loading a
module that is already loaded does nothing (its parameters do not change: a new vf_num needs
unload + load); ``install NAME /bin/false`` makes loading fail. Registering a PCI driver probes
every unbound device it matches, in address order (drivers/base/bus.c driver_attach).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from vgpu.errors import HostError
from vgpu.inputs import read_optional
from vgpu.sim import drivers, gim
from vgpu.sim.pcicore import Ctx, ensure_not_held, matches, probe, unbind
from vgpu.sim.state import write_atomic

KERNEL_RELEASE = "6.8.0-sim"
_DEPENDS = {"vfio_pci": ("vfio", "vfio_iommu_type1"), "kvm_amd": ("kvm",)}


def modprobe_d(etc: Path) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """(options per module, install commands per module) from <etc>/modprobe.d/*.conf."""
    options: dict[str, dict[str, str]] = {}
    installs: dict[str, str] = {}
    directory = etc / "modprobe.d"
    for conf in sorted(directory.glob("*.conf")) if directory.is_dir() else ():
        for line in _text(conf).splitlines():
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            if len(words) >= 3 and words[0] == "options":
                opts = options.setdefault(drivers.normalize(words[1]), {})
                opts.update(_pairs(words[2:]))
            elif len(words) >= 3 and words[0] == "install":
                installs[drivers.normalize(words[1])] = " ".join(words[2:])
    return options, installs


def _pairs(words: list[str]) -> dict[str, str]:
    out = {}
    for word in words:
        key, _, value = word.partition("=")
        out[key] = value
    return out


def _cmdline_params(cmdline: str, module: str) -> dict[str, str]:
    out = {}
    for word in cmdline.split():
        key, _, value = word.partition("=")
        mod, dot, param = key.partition(".")
        if dot and drivers.normalize(mod) == module:
            out[param] = value
    return out


def load(ctx: Ctx, root: Path, name: str, params: dict[str, str]) -> None:
    module = drivers.normalize(name)
    state = ctx.state
    if module not in state.available_modules:
        raise HostError(f"modprobe: FATAL: Module {name} not found in directory "
                        f"/lib/modules/{KERNEL_RELEASE}")
    if module in state.modules:
        return
    options, installs = modprobe_d(root / "etc")
    if installs.get(module, "").split()[:1] in (["/bin/false"], ["/usr/bin/false"], ["/bin/true"]):
        raise HostError(f"modprobe: ERROR: Error running install command '{installs[module]}' for module "
                        f"{module}: retcode 1", hint=f"a modprobe.d file disables {module}")
    merged = {**options.get(module, {}), **_cmdline_params(state.cmdline, module),
              **{k: str(v) for k, v in params.items()}}
    known = drivers.MODULE_PARAMS.get(module)
    unknown = sorted(k for k in merged if (known is not None and k not in known)
                     or not drivers.PARAM_NAME.fullmatch(k))
    if unknown:
        ctx.log(f"{module}: Unknown parameter `{unknown[0]}'")
        raise HostError(f"modprobe: ERROR: could not insert '{module}': Unknown symbol in module, or unknown "
                        f"parameter (see dmesg): {unknown[0]}")
    for dep in _DEPENDS.get(module, ()):
        if dep not in state.modules:
            state.modules[dep] = _visible(dep, {})
    state.modules[module] = _visible(module, merged)
    if module == "gim":
        _gim_init(ctx, root, merged)
    _register(ctx, drivers.driver_of(module))


def _visible(module: str, merged: dict[str, str]) -> dict[str, str]:
    """What /sys/module/<m>/parameters shows: defaults overlaid with the merged options."""
    defaults = drivers.MODULE_PARAMS.get(module, {})
    visible = drivers.VISIBLE_DEFAULTS.get(module)
    shown = {k: v for k, v in defaults.items() if visible is None or k in visible}
    return {**shown, **merged}


def _gim_init(ctx: Ctx, root: Path, params: dict[str, str]) -> None:
    path = root / "etc" / "gim_config"
    text = _text(path) if path.is_file() else None
    config, truncate = gim.read_config(ctx, text)
    if truncate:
        write_atomic(path, "")
    ctx.state.gim_config = gim.effective_settings(ctx, params, config)
    version = ctx.state.module_versions.get("gim", "unknown")
    ctx.log(f"gim info : AMD GPU Virtualization host driver (GIM) version {version} loaded")


def _register(ctx: Ctx, driver: str) -> None:
    """driver_attach: probe every unbound device, in address order."""
    for f in ctx.state.sorted_functions():
        # VFs made by an earlier probe in this loop are already probed; skip removed ones
        if f.driver is None and f.address in ctx.state.functions and matches(ctx.state, f, driver):
            probe(ctx, f, only=driver)


def unload(ctx: Ctx, name: str) -> None:
    module = drivers.normalize(name)
    state = ctx.state
    if module not in state.available_modules:
        raise HostError(f"modprobe: FATAL: Module {name} not found in directory "
                        f"/lib/modules/{KERNEL_RELEASE}")
    if module not in state.modules:
        return
    users = [m for m, deps in _DEPENDS.items() if module in deps and m in state.modules]
    driver = drivers.driver_of(module)
    bound = [f for f in state.sorted_functions() if f.driver == driver]
    if users or (module == "vfio_pci" and bound):
        ctx.log(f"modprobe: FATAL: Module {module} is in use.")
        raise HostError(f"modprobe: FATAL: Module {module} is in use.",
                        hint="unbind its devices first" if bound else f"unload {users[0]} first")
    if module == "gim":
        from vgpu.sim.services import gim_users
        if gim_users(ctx):  # its SMI device is open: the module's reference count is not zero
            ctx.log("modprobe: FATAL: Module gim is in use.")
            raise HostError("modprobe: FATAL: Module gim is in use.",
                            hint=f"stop what holds its devices first: {'; '.join(gim_users(ctx))}")
    vfs = [vf for pf in bound for vf in state.vfs_of(pf)]
    ensure_not_held(ctx, bound + vfs, f"unloading {module}")
    for f in bound:
        unbind(ctx, f)
    del state.modules[module]
    if module == "gim":
        state.gim_config = {}
        ctx.log("gim info : GIM unloaded")
    for dep in _DEPENDS.get(module, ()):
        if dep in state.modules and not any(dep in _DEPENDS.get(m, ()) for m in state.modules):
            del state.modules[dep]


def _text(path: Path) -> str:
    """A config file of the simulated host, read as modprobe reads it (undecodable bytes replaced),
    through vgpu.inputs: a FIFO or an oversized file is one InputError, never a hang."""
    return (read_optional(path, "config file") or b"").decode("utf-8", "replace")
