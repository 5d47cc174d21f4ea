"""Pure helpers behind :class:`vgpu.model.profile.Profile`: safe names, GPU selection, VM assignment, warnings.

Kept apart from the schema so each module stays small. Nothing here does I/O: the planner hands in
what discovery found (objects with ``.address``, ``.numa_node`` and, for GPUs, ``.model``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vgpu.catalog import Mode, Support
from vgpu.errors import InputError, RefusedError

if TYPE_CHECKING:
    from vgpu.model.profile import Profile

# Anything that becomes a VM name, a file name or a command argument: no '/', no '..', no shell
# metacharacters, no whitespace or newlines, at most 63 characters (a DNS label; libvirt and ESXi
# accept more, but the name also ends up in file names and host names).
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_FORMAT_SPEC = re.compile(r"0?[1-9]?d?")


class FieldError(ValueError):
    """A rule broken at ``field`` (dotted, relative to the model that raised it)."""

    def __init__(self, field: str | tuple[str, ...], message: str):
        super().__init__(message)
        self.field = tuple(field.split(".")) if isinstance(field, str) else tuple(field)
        self.message = message


def safe_name(value: str, what: str) -> str:
    """Return ``value`` when it is a safe name for a VM, file or argument; raise ValueError otherwise."""
    if not SAFE_NAME.fullmatch(value) or ".." in value:
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise ValueError(f"{what} {shown!r} is not allowed: use 1-63 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit (no '/', '..', spaces or shell characters)")
    return value


def check_pattern(pattern: str) -> None:
    """Accept a VM name pattern with exactly one ``{index}`` field and an integer format only.

    ``str.format`` with attribute or item access ("{index.__class__}") or conversions could reach
    object internals, so only ``{index}``, ``{index:d}`` and ``{index:0Nd}`` are allowed.
    """
    try:
        parts = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise ValueError(f"name pattern {pattern!r} is not a valid format string ({exc})") from None
    fields = [(name, spec, conv) for _, name, spec, conv in parts if name is not None]
    if [f[0] for f in fields] != ["index"]:
        raise ValueError(f"name pattern {pattern!r} must contain {{index}} exactly once and no other field, "
                         "e.g. gpu-vm-{index:02d}")
    _, spec, conv = fields[0]
    if conv is not None or not _FORMAT_SPEC.fullmatch(spec or ""):
        raise ValueError(f"name pattern {pattern!r}: only {{index}}, {{index:d}} or {{index:0Nd}} are allowed")
    for index in (0, 7, MAX_INDEX):
        safe_name(pattern.format(index=index), "VM name from the pattern")


MAX_INDEX = 999  # more VMs than any host the catalog describes (8 GPUs x 8 VFs)


def check_split(profile: Profile) -> None:
    """Refuse a vfs_per_vm that leaves functions over or spreads one VM across partial GPUs."""
    vms, gpu = profile.vms, profile.gpu
    if vms.assign is not None:
        return
    n, sriov = vms.vfs_per_vm, gpu.mode is Mode.SRIOV
    per_gpu = gpu.vfs_per_gpu if sriov else 1
    kind = "VFs" if sriov else "GPUs"
    if sriov and per_gpu % n and n % per_gpu:
        divisors = ", ".join(str(d) for d in range(1, per_gpu + 1) if per_gpu % d == 0)
        raise FieldError("vms.vfs_per_vm", f"{n} VFs per VM does not split {per_gpu} VFs per GPU evenly; use "
                         f"one of {divisors} or a multiple of {per_gpu}")
    fixed = gpu.select.fixed_count
    if fixed is not None and (fixed * per_gpu) % n:
        raise FieldError("vms.vfs_per_vm", f"{fixed * per_gpu} {kind} ({fixed} GPUs selected) do not split "
                         f"into VMs of {n}")


def warnings(profile: Profile) -> list[str]:
    """Operator warnings from the support levels of the profile's combination and mode (docs/hardware.md §3-4)."""
    out: list[str] = []
    model, gpu, combo = profile.gpu.catalog_model, profile.gpu, profile.combo
    if combo is not None:
        what = f"{combo.vf_num} VF{'s' if combo.vf_num > 1 else ''} per GPU ({combo.compute.value}/" \
               f"{combo.memory.value}) on {model.name}"
        if combo.support is Support.UNVALIDATED:
            out.append(f"{what} is accepted by GIM but not in AMD's validated matrix")
        elif combo.support is Support.PREVIEW:
            out.append(f"{what} is a preview in AMD's support matrix")
        if combo.note:
            out.append(f"{what}: {combo.note}")
        if combo.vf_num > 1 and "firmware" not in combo.note:
            out.append(f"{what} needs PFs whose TotalVFs is at least {combo.vf_num}: the standard firmware "
                       "reports 1, more needs AMD's multi-VF firmware bundle")
        if combo.min_gim:
            out.append(f"{what} needs GIM {combo.min_gim} or later")
    mode = model.mode_support(gpu.mode, profile.hypervisor)
    if mode.support is not Support.SUPPORTED:
        note = f": {mode.note}" if mode.note else ""
        out.append(f"{gpu.mode.value} on {profile.hypervisor.value} for {model.name} is {mode.support.value} in "
                   f"AMD's support matrix{note}")
    return out


def _model_name(gpu: Any) -> str:
    model = getattr(gpu, "model", None)
    return str(getattr(model, "name", model))


def select_gpus(profile: Profile, gpus: Sequence[Any]) -> list[Any]:
    """The GPUs ``profile.gpu.select`` takes from ``gpus``, in address order; RefusedError when it cannot."""
    want, sel = profile.gpu.model, profile.gpu.select
    mine = sorted((g for g in gpus if _model_name(g).lower() == want.lower()), key=lambda g: g.address)
    if sel.addresses is not None:
        return _by_address(profile, gpus, sel.addresses)
    pool, where = mine, ""
    if sel.numa_nodes is not None:
        pool = [g for g in mine if g.numa_node in sel.numa_nodes]
        where = f" on NUMA node{'s' if len(sel.numa_nodes) > 1 else ''} {_join(sel.numa_nodes)}"
        empty = [n for n in sel.numa_nodes if all(g.numa_node != n for g in mine)]
        if sel.count is None and empty:
            raise RefusedError(f"profile {profile.name} selects NUMA node {_join(empty)}, but no {want} GPU is "
                               f"there (its {want} GPUs are on nodes {_join(sorted({_node(g) for g in mine}))})")
    if not pool:
        raise RefusedError(f"profile {profile.name} wants {want} GPUs, but the host has none{where} "
                           f"(found: {_census(gpus)})")
    if sel.count is not None:
        if len(pool) < sel.count:
            raise RefusedError(f"profile {profile.name} wants {sel.count} {want} GPUs{where}, but the host has "
                               f"{len(pool)}")
        pool = pool[:sel.count]
    return pool


def _by_address(profile: Profile, gpus: Sequence[Any], addresses: Sequence[Any]) -> list[Any]:
    by_address = {g.address: g for g in gpus}
    want = profile.gpu.model
    for address in addresses:
        found = by_address.get(address)
        if found is None:
            raise RefusedError(f"profile {profile.name} selects GPU {address}, but the host has no GPU there "
                               f"(GPUs: {_join(sorted(by_address)) or 'none'})")
        if _model_name(found).lower() != want.lower():
            raise RefusedError(f"profile {profile.name} selects GPU {address}, which is an {_model_name(found)}, "
                               f"not an {want}")
    return sorted((by_address[a] for a in addresses), key=lambda g: g.address)


def vm_assignment(profile: Profile, functions: Sequence[Any]) -> dict[str, list[Any]]:
    """{VM name: [addresses]}: the explicit ``vms.assign`` map checked, or the pattern applied in groups.

    VMs from the pattern are numbered in the order of their lowest address. Raises RefusedError when
    the functions cannot be split as the profile asks, InputError when two functions share an address.
    """
    funcs = sorted(functions, key=lambda f: f.address)
    addresses = [f.address for f in funcs]
    if len(set(addresses)) != len(addresses):
        raise InputError("vm_assignment got the same PCI address twice")
    kind = "VFs" if profile.gpu.mode is Mode.SRIOV else "GPUs"
    if not funcs:
        raise RefusedError(f"profile {profile.name} has no {kind} to assign to VMs")
    if profile.vms.assign is not None:
        return _explicit(profile, funcs, kind)
    chunks = _split(profile, funcs, kind)
    chunks.sort(key=lambda c: c[0].address)
    pattern = profile.vms.name_pattern
    return {pattern.format(index=i): [f.address for f in chunk] for i, chunk in enumerate(chunks)}


def _explicit(profile: Profile, funcs: list[Any], kind: str) -> dict[str, list[Any]]:
    by_address = {f.address: f for f in funcs}
    required = profile.vms.numa_policy.value == "required"
    for vm, addresses in profile.vms.assign.items():
        for address in addresses:
            if address not in by_address:
                raise RefusedError(f"profile {profile.name} assigns {address} to VM {vm}, but it is not one of "
                                   f"the {len(funcs)} {kind} the profile provides ({_join(sorted(by_address))})")
        nodes = {_node(by_address[a]) for a in addresses}
        if required and (len(nodes) > 1 or None in nodes):
            raise RefusedError(f"NUMA policy required: VM {vm} gets {kind} on NUMA nodes "
                               f"{_join(sorted(nodes, key=str))}; give it {kind} from one node")
    return {vm: list(addresses) for vm, addresses in profile.vms.assign.items()}


def _split(profile: Profile, funcs: list[Any], kind: str) -> list[list[Any]]:
    n, policy = profile.vms.vfs_per_vm, profile.vms.numa_policy.value
    groups: dict[Any, list[Any]] = {}
    for f in funcs:
        groups.setdefault(_node(f) if policy != "none" else "all", []).append(f)
    if policy == "required" and None in groups:
        raise RefusedError(f"NUMA policy required, but {groups[None][0].address} reports no NUMA node; use "
                           "numa_policy: preferred or none on this host")
    chunks: list[list[Any]] = []
    rest: list[Any] = []
    for node, members in groups.items():
        full = len(members) - len(members) % n
        if policy == "required" and full != len(members):
            raise RefusedError(f"NUMA policy required: NUMA node {node} has {len(members)} {kind}, which do not "
                               f"split into VMs of {n}")
        chunks += [members[i:i + n] for i in range(0, full, n)]
        rest += members[full:]
    if len(rest) % n:
        raise RefusedError(f"profile {profile.name}: {len(funcs)} {kind} do not split into VMs of {n} "
                           f"({len(rest) % n} left over)")
    rest.sort(key=lambda f: f.address)
    return chunks + [rest[i:i + n] for i in range(0, len(rest), n)]


def _node(item: Any) -> int | None:
    """sysfs reports -1 when the platform gives no NUMA information: treat it as unknown."""
    node = getattr(item, "numa_node", None)
    return node if isinstance(node, int) and node >= 0 else None


def _census(gpus: Sequence[Any]) -> str:
    counts: dict[str, int] = {}
    for g in gpus:
        counts[_model_name(g)] = counts.get(_model_name(g), 0) + 1
    return ", ".join(f"{c} x {m}" for m, c in sorted(counts.items())) or "no GPUs"


def _join(items: Sequence[Any]) -> str:
    return ", ".join(str(i) for i in items)
