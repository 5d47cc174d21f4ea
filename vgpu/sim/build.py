"""MachineSpec -> SimState: functions with their upstream bridges, BAR addresses and IOMMU groups.

The initial module/driver state (gim loading, bindings, NIC VFs) is applied afterwards by the
kernel model, exactly as a boot would (``vgpu.sim.host``).
"""

from __future__ import annotations

from vgpu.errors import InputError
from vgpu.model.pci import PciAddress
from vgpu.sim import drivers
from vgpu.sim.presets import resolve
from vgpu.sim.spec import BarSpec, FunctionSpec, MachineSpec
from vgpu.sim.state import Bar, Function, SimState, Sriov

# Linux IORESOURCE_* flag sets as /sys/bus/pci/devices/*/resource prints them.
BAR_FLAGS = {"mem64pref": 0x14220C, "mem64": 0x140204, "mem32pref": 0x42208, "mem32": 0x40200,
             "io": 0x40101}
# Each root bus (host bridge) gets its own windows: 4 TiB of 64-bit space, 128 MiB below 4 GiB.
_WIN64, _WIN64_SIZE = 0x400_0000_0000, 0x400_0000_0000
_WIN32, _WIN32_SIZE = 0x8000_0000, 0x0800_0000


def build_state(spec: MachineSpec) -> SimState:
    """The machine's functions, not yet bound to anything. Raises InputError for layouts the
    kernel could not have (VF addresses colliding with other functions)."""
    specs = _with_path_bridges(spec)
    functions: dict[str, Function] = {}
    for fspec, parent in specs:
        functions[fspec.address] = _function(fspec, parent)
    _check_vf_room(functions)
    _assign_bars(functions)
    state = SimState(machine=spec.model_dump(mode="json"), functions=functions, iommu=spec.state.iommu,
                     cmdline=spec.state.cmdline, cpu_vendor=spec.state.cpu_vendor,
                     hugepages={str(k): v for k, v in spec.state.hugepages.items()},
                     module_versions=dict(spec.state.module_versions))
    if state.iommu:
        _assign_groups(state, {f.address: f.iommu_group_with for f, _ in specs})
    state.available_modules = sorted(_available_modules(state, spec))
    return state


def _with_path_bridges(spec: MachineSpec) -> list[tuple[FunctionSpec, str | None]]:
    """Every function with its parent: declared ones plus bridges named only in ``path`` lists,
    plus one root complex and one IOMMU function per root bus (``auto_host_bridges``)."""
    declared = {f.address: f for f in spec.functions}
    out: dict[str, tuple[FunctionSpec, str | None]] = {}
    for f in spec.functions:
        parent = None
        for depth, bridge in enumerate(f.path):
            if bridge not in out:
                bspec = declared.get(bridge) or FunctionSpec(
                    address=bridge, kind="root_port" if depth == 0 else "bridge", numa_node=f.numa_node)
                out[bridge] = (bspec, parent)
            elif out[bridge][1] != parent:
                raise InputError(f"machine spec {spec.name}: bridge {bridge} has two different upstream "
                                 f"paths ({out[bridge][1]} and {parent})")
            parent = bridge
        if f.address in out and out[f.address][1] != parent and f.path:
            raise InputError(f"machine spec {spec.name}: {f.address} has two different upstream paths")
        if f.address not in out or f.path:
            out[f.address] = (f, parent)
    if spec.auto_host_bridges:
        _add_root_complexes(out)
    return list(out.values())


def _add_root_complexes(out: dict[str, tuple[FunctionSpec, str | None]]) -> None:
    roots = sorted({(PciAddress.parse(a).domain, PciAddress.parse(a).bus)
                    for a, (_, parent) in out.items() if parent is None})
    for domain, bus in roots:
        node = next(f.numa_node for a, (f, p) in out.items()
                    if p is None and PciAddress.parse(a).bus == bus and PciAddress.parse(a).domain == domain)
        for slot_fn, kind in (("00.0", "host_bridge"), ("00.2", "iommu")):
            address = f"{domain:04x}:{bus:02x}:{slot_fn}"
            if address not in out:
                out[address] = (FunctionSpec(address=address, kind=kind, numa_node=node), None)


def _function(fspec: FunctionSpec, parent: str | None) -> Function:
    r = resolve(fspec)
    sriov = None
    if r["sriov"] and r["sriov"]["total_vfs"] > 0:
        if r["sriov"]["vf_device"] is None:
            raise InputError(f"{fspec.address}: sriov.vf_device is needed (the catalog has no VF id for it)")
        sriov = Sriov(total_vfs=r["sriov"]["total_vfs"], offset=r["sriov"]["offset"],
                      stride=r["sriov"]["stride"], vf_device=r["sriov"]["vf_device"],
                      vf_bars=[_bar(b) for b in r["sriov"]["vf_bars"]], vf_limit=r["sriov"].get("vf_limit"))
    link = r["link"]
    return Function(
        address=fspec.address, parent=parent, kind=fspec.kind, vendor=r["vendor"], device=r["device"],
        subsystem_vendor=r["subsystem_vendor"], subsystem_device=r["subsystem_device"],
        class_code=r["class_code"], revision=fspec.revision, numa_node=fspec.numa_node,
        natural_driver=r["driver"], bars=[_bar(b) for b in r["bars"]], sriov=sriov, gpu_model=r["model"],
        link=(link.speed, link.width, link.max_speed or link.speed, link.max_width or link.width)
        if link else None)


def _bar(b: BarSpec) -> Bar:
    return Bar(index=b.index, start=0, size=b.size, flags=BAR_FLAGS[b.type])


def initial_vfs(spec: MachineSpec) -> dict[str, int]:
    return {f.address: f.sriov.initial_vfs for f in spec.functions if f.sriov and f.sriov.initial_vfs}


def vf_address(pf: Function, index: int) -> str:
    """VF ``index`` sits at routing id PF + offset + index * stride (PCIe SR-IOV spec 9.3.3.10)."""
    pci = pf.pci
    rid = (pci.bus << 8 | pci.slot << 3 | pci.function) + pf.sriov.offset + index * pf.sriov.stride
    if rid > 0xFFFF:
        raise InputError(f"{pf.address}: VF {index} would sit beyond bus ff")
    return str(PciAddress(pci.domain, rid >> 8, (rid >> 3) & 0x1F, rid & 7))


def _check_vf_room(functions: dict[str, Function]) -> None:
    owner: dict[str, str] = {}
    for f in functions.values():
        if f.sriov is None:
            continue
        for i in range(f.sriov.total_vfs):
            address = vf_address(f, i)
            if address in functions or address in owner:
                other = address if address in functions else f"a VF of {owner[address]}"
                raise InputError(f"{f.address}: VF {i} would sit at {address}, which is taken by {other}")
            owner[address] = f.address


def _assign_bars(functions: dict[str, Function]) -> None:
    cursors: dict[tuple[int, int], list[int]] = {}
    for f in sorted(functions.values(), key=lambda x: x.pci):
        root = _root_bus(functions, f)
        if root not in cursors:
            k = len(cursors)
            cursors[root] = [_WIN64 + k * _WIN64_SIZE, _WIN32 + k * _WIN32_SIZE, 0x1000 + k * 0x1000]
        for bar in f.bars:
            bar.start = _allocate(cursors[root], bar.size, bar.flags)
        if f.sriov:  # IOV BARs hold total_vfs apertures side by side
            for bar in f.sriov.vf_bars:
                bar.start = _allocate(cursors[root], bar.size * f.sriov.total_vfs, bar.flags)


def _allocate(cursor: list[int], size: int, flags: int) -> int:
    slot = 0 if flags & 0x100000 else (2 if flags & 0x100 else 1)
    start = (cursor[slot] + size - 1) // size * size  # naturally aligned, as BARs are
    cursor[slot] = start + size
    return start


def _root_bus(functions: dict[str, Function], f: Function) -> tuple[int, int]:
    while f.parent is not None:
        f = functions[f.parent]
    return (f.pci.domain, f.pci.bus)


def _assign_groups(state: SimState, share: dict[str, str | None]) -> None:
    """One group per function in address order (ACS everywhere), except ``iommu_group_with``."""
    for f in state.sorted_functions():
        if f.kind == "iommu" or share.get(f.address):
            continue
        f.iommu_group = state.next_group
        state.next_group += 1
    for address, other in share.items():
        seen = {address}
        while share.get(other):  # follow chains: a shares with b, b shares with c
            if other in seen:
                raise InputError(f"{address}: iommu_group_with forms a cycle through {other}")
            seen.add(other)
            other = share[other]
        if other:
            target = state.functions[other]
            if target.iommu_group is None:
                raise InputError(f"{address}: iommu_group_with {other} names a function without a group")
            state.functions[address].iommu_group = target.iommu_group


def _available_modules(state: SimState, spec: MachineSpec) -> set[str]:
    names = set(drivers.STANDARD_MODULES) | {drivers.normalize(m) for m in spec.state.modules}
    for f in state.functions.values():
        if f.natural_driver:
            module = drivers.module_of(f.natural_driver)
            if module:
                names.add(module)
    return names
