"""Which hosts go in which wave (pure: no I/O).

Sizes follow Ansible's ``serial`` (docs/rollout.md has the sources): each entry is a host count or a percentage of
all the roll-out's hosts (rounded down, at least 1) and the last entry repeats. The first batch is the canary:
the hosts named with ``--canary``, else the first ``serial[0]`` hosts in inventory order. Canary hosts are
never in a later wave (a real incident: canary and main nodes drained together). Every wave is at most
``max_unavailable`` hosts (a count or a percentage, like the AMD GPU Operator's ``maxUnavailableNodes``,
default 25%), and at run time hosts left failed by an earlier wave count against it (runner.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vgpu.errors import InputError

DEFAULT_SERIAL = ("1", "25%")
DEFAULT_MAX_UNAVAILABLE = "25%"
_SIZE = re.compile(r"^(?:([1-9][0-9]{0,5})|([1-9][0-9]?(?:\.[0-9]+)?|100)%)$")
# an inventory host name, never an Ansible pattern: the names are joined into --limit (no ",", "*", "!", "&",
# "~", ranges in brackets; "all" and "ungrouped" name groups)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}$")


@dataclass(frozen=True)
class Wave:
    index: int  # 1-based
    hosts: tuple[str, ...]
    canary: bool = False

    @property
    def name(self) -> str:
        return "canary" if self.canary else f"wave {self.index}"


@dataclass
class WavePlan:
    waves: list[Wave]
    max_unavailable: int
    guests: dict[str, list[str]]  # host -> its guests (inventory order)
    warnings: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return [h for w in self.waves for h in w.hosts]


def check_size(text: str, what: str) -> str:
    """A ``serial`` entry or ``--max-unavailable``: N or P% (0 < P <= 100). Raises InputError."""
    text = str(text).strip()
    if not _SIZE.match(text):
        raise InputError(f"{what} {text[:40]!r}: expected a host count (e.g. 2) or a percentage (e.g. 25%)")
    return text


def parse_serial(text: str) -> tuple[str, ...]:
    """``1,25%,50%`` -> ("1", "25%", "50%")."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or len(parts) > 32:
        raise InputError(f"--serial {str(text)[:60]!r}: expected 1 to 32 comma-separated sizes, e.g. 1,25%,50%")
    return tuple(check_size(p, "--serial entry") for p in parts)


def resolve(size: str, total: int) -> int:
    """A size as a host count: percentages of ``total`` rounded down, never below 1."""
    if size.endswith("%"):
        return max(1, int(total * float(size[:-1]) / 100.0))
    return int(size)


def plan_waves(hosts: list[str], guests: dict[str, list[str]], *, canary: list[str] | tuple[str, ...] = (),
               serial: tuple[str, ...] = DEFAULT_SERIAL, max_unavailable: str = DEFAULT_MAX_UNAVAILABLE) -> WavePlan:
    """Cut ``hosts`` (inventory order) into a canary and waves. Raises InputError for a canary host that is not
    a roll-out host, or a canary larger than the unavailability budget."""
    if not hosts:
        raise InputError("the roll-out has no hosts", hint="check --hosts (an Ansible pattern) against the inventory")
    total = len(hosts)
    budget = resolve(check_size(max_unavailable, "--max-unavailable"), total)
    unknown = [c for c in canary if c not in hosts]
    if unknown:
        raise InputError(f"--canary {unknown[0]}: not one of the roll-out's {total} host(s)",
                         hint="the hosts are the inventory's hosts matching --hosts: " + ", ".join(hosts[:8])
                         + (" ..." if total > 8 else ""))
    sizes = list(serial) or list(DEFAULT_SERIAL)
    first = list(dict.fromkeys(canary)) if canary else hosts[:resolve(sizes[0], total)]
    rest_sizes = sizes[1:] or sizes[:1]
    if len(first) > budget:
        raise InputError(f"the canary has {len(first)} hosts but at most {budget} may be unavailable at once "
                         f"(--max-unavailable {max_unavailable})", hint="name fewer --canary hosts or raise "
                         "--max-unavailable")
    waves = [Wave(1, tuple(first), canary=True)]
    remaining = [h for h in hosts if h not in first]
    warnings: list[str] = []
    capped: list[int] = []
    i = 0
    while remaining:
        want = resolve(rest_sizes[min(i, len(rest_sizes) - 1)], total)
        size = min(want, budget)
        if size < want:
            capped.append(len(waves) + 1)
        waves.append(Wave(len(waves) + 1, tuple(remaining[:size])))
        remaining = remaining[size:]
        i += 1
    if capped:
        warnings.append(f"{len(capped)} wave(s) capped at {budget} hosts by --max-unavailable {max_unavailable} "
                        f"(--serial asks for more): wave {', '.join(map(str, capped[:6]))}"
                        + (" ..." if len(capped) > 6 else ""))
    for w in waves:
        for h in w.hosts:
            if not guests.get(h):
                warnings.append(f"{h} ({w.name}) has no guests: its gate is provisioning alone "
                                "(give its guests the host variable vgpu_host: " + h + ")")
    return WavePlan(waves=waves, max_unavailable=budget, guests={h: list(guests.get(h, [])) for h in hosts},
                    warnings=warnings)


def guests_by_host(hosts: list[str], guest_vars: dict[str, dict], *, key: str = "vgpu_host") -> tuple[
        dict[str, list[str]], list[str]]:
    """Each roll-out host's guests: the guests whose ``vgpu_host`` variable names it. Returns the mapping and
    warnings for guests that name no roll-out host (not validated by the roll-out)."""
    out: dict[str, list[str]] = {h: [] for h in hosts}
    warnings = []
    for guest, hv in guest_vars.items():
        host = hv.get(key)
        if host is None:
            warnings.append(f"guest {guest} has no {key} variable: the roll-out does not validate it")
        elif not isinstance(host, str) or not _NAME.match(host) or host in ("all", "ungrouped"):
            raise InputError(f"guest {guest}: {key} {str(host)[:80]!r} is not a host name (a literal inventory "
                             "host name, not a list, number or template)")
        elif host not in out:
            warnings.append(f"guest {guest}: {key} {host} is not a host of this roll-out: not validated by it")
        else:
            out[host].append(guest)
    return out, warnings


def split(hosts: list[str], size: int) -> list[list[str]]:
    """``hosts`` in consecutive batches of at most ``size`` (size >= 1)."""
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name in ("all", "ungrouped"):
        raise InputError(f"{what} {str(name)[:60]!r}: not an inventory host name")
    return name
