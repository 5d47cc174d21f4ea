"""Parser for ``rocminfo`` output: the HSA system attributes and every agent (CPU and GPU).

Handles the full layout (one "Pool N" / "ISA N" sub-block per pool and ISA) and the condensed
one-line form ("Pool 1: GLOBAL; COARSE GRAINED   268419072 KB", "ISA 1: amdgcn-...") seen in
ROCm/ROCm issue #6023, agent headers with annotations ("Agent 3 (first GPU ...)"), trailing
spaces, TABs and CRLF. Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .common import ParseError, is_truncation, lines_of, parse_int, require_text, size_mb

_AGENT = re.compile(r"^Agent\s+(\d+)\b")
_POOL = re.compile(r"^Pool\s+(\d+)\s*(?::\s*(.*))?$")
_ISA = re.compile(r"^ISA\s+(\d+)\s*(?::\s*(.*))?$")
_ROCK = re.compile(r"^ROCk module(?: version (\S+))? is (NOT )?loaded", re.I)
# Condensed pool: "GLOBAL; COARSE GRAINED   268419072 KB" / "GROUP   64 KB".
_POOL_LINE = re.compile(r"^(?P<segment>.*?)\s+(?P<size>\d+(?:\(0x[0-9a-fA-F]+\))?\s*[KMG]B)$")


@dataclass
class Pool:
    """One memory pool of an agent. ``segment`` is "GLOBAL" or "GROUP"; ``flags`` e.g. ["COARSE GRAINED"]."""

    index: int
    segment: str = ""
    flags: List[str] = field(default_factory=list)
    size_kb: Optional[int] = None
    fields: Dict[str, str] = field(default_factory=dict)


@dataclass
class Agent:
    """One HSA agent. ``fields`` keeps every agent-level "key: value" line as printed."""

    index: int
    name: str = ""
    marketing_name: str = ""
    vendor_name: str = ""
    device_type: str = ""
    uuid: str = ""
    node: Optional[int] = None
    compute_units: Optional[int] = None
    simds_per_cu: Optional[int] = None
    chip_id: Optional[int] = None
    bdfid: Optional[int] = None
    isas: List[str] = field(default_factory=list)
    pools: List[Pool] = field(default_factory=list)
    fields: Dict[str, str] = field(default_factory=dict)
    sections: Dict[str, Dict[str, str]] = field(default_factory=dict)

    @property
    def is_gpu(self) -> bool:
        return self.device_type.upper() == "GPU"

    @property
    def chip_id_hex(self) -> Optional[str]:
        """The chip (PCI device) id as "0x74b5", or None."""
        return None if self.chip_id is None else "0x%04x" % self.chip_id

    @property
    def gfx_target(self) -> Optional[str]:
        """The gfx target ("gfx942"): the agent name, else the first ISA's target; None for CPUs."""
        if re.match(r"^gfx[0-9a-f]+$", self.name):
            return self.name
        for isa in self.isas:
            match = re.search(r"--(gfx[0-9a-f]+)(?::|$)", isa)
            if match:
                return match.group(1)
        return None

    @property
    def bdf(self) -> Optional[str]:
        """"bb:dd.f" from BDFID (bus << 8 | device << 3 | function, as the KFD topology reports it)."""
        if not self.bdfid:
            return None
        return "%02x:%02x.%d" % (self.bdfid >> 8 & 0xFF, self.bdfid >> 3 & 0x1F, self.bdfid & 0x7)

    @property
    def vram_kb(self) -> Optional[int]:
        """The device-local memory: the size of the coarse-grained GLOBAL pool (the VRAM pool of a
        GPU agent), else the largest GLOBAL pool."""
        globals_ = [p for p in self.pools if p.segment.upper() == "GLOBAL" and p.size_kb is not None]
        for pool in globals_:
            if any("COARSE" in flag.upper() for flag in pool.flags):
                return pool.size_kb
        return max((p.size_kb for p in globals_), default=None)

    @property
    def vram_mb(self) -> Optional[float]:
        return None if self.vram_kb is None else self.vram_kb / 1024.0


@dataclass
class RocmInfo:
    """What ``rocminfo`` printed. ``errors`` holds lines such as "hsa api call failure at: ..."."""

    rock_loaded: bool = False
    rock_version: Optional[str] = None
    runtime_version: Optional[str] = None
    runtime_ext_version: Optional[str] = None
    system: Dict[str, str] = field(default_factory=dict)
    agents: List[Agent] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)

    @property
    def gpus(self) -> List[Agent]:
        return [agent for agent in self.agents if agent.is_gpu]

    @property
    def cpus(self) -> List[Agent]:
        return [agent for agent in self.agents if agent.device_type.upper() == "CPU"]


def _split(line: str):
    stripped = line.strip()
    if ":" not in stripped:
        return stripped, None
    key, value = stripped.split(":", 1)
    return key.strip(), value.lstrip(":").strip()


def _indent(line: str) -> int:
    expanded = line.expandtabs(8)
    return len(expanded) - len(expanded.lstrip())


def _segment(pool: Pool, text: str) -> None:
    """Fill segment and flags from "GLOBAL; FLAGS: COARSE GRAINED" or "GLOBAL; COARSE GRAINED"."""
    parts = [part.strip() for part in text.split(";")]
    pool.segment = parts[0]
    rest = ";".join(parts[1:])
    rest = re.sub(r"^\s*FLAGS:\s*", "", rest)
    pool.flags = [flag.strip() for flag in rest.split(",") if flag.strip()]


def _one_line_pool(pool: Pool, text: str) -> None:
    match = _POOL_LINE.match(text.strip())
    if not match:
        _segment(pool, text)
        return
    _segment(pool, match.group("segment"))
    pool.size_kb = _kb(match.group("size"))


def _kb(text: str) -> Optional[int]:
    mb = size_mb(text, default_unit="KB")
    return None if mb is None else int(round(mb * 1024))


class _AgentBuilder:
    """Feeds the lines of one agent block; ``section`` is the open "Pool Info:"-like header."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.base: Optional[int] = None
        self.section: Optional[str] = None

    def feed(self, line: str) -> None:
        indent = _indent(line)
        if self.base is None:
            self.base = indent
        key, value = _split(line)
        if indent <= self.base:
            self.section = key if not value else None
            if value is not None:
                self.agent.fields.setdefault(key, value)
            return
        if self.section == "Pool Info":
            self._pool_line(key, value)
        elif self.section == "ISA Info":
            self._isa_line(key, value, line)
        elif self.section is not None and value is not None:
            # "Cache Info:" (L1/L2/L3), "Workgroup Max Size per Dimension:" (x/y/z), future ones.
            self.agent.sections.setdefault(self.section, {}).setdefault(key, value)

    def _pool_line(self, key: str, value: Optional[str]) -> None:
        match = _POOL.match(key if value is None else "%s: %s" % (key, value))
        if match:
            pool = Pool(int(match.group(1)))
            self.agent.pools.append(pool)
            if match.group(2):
                _one_line_pool(pool, match.group(2))
            return
        if not self.agent.pools or value is None:
            return
        pool = self.agent.pools[-1]
        pool.fields.setdefault(key, value)
        if key == "Segment":
            _segment(pool, value)
        elif key == "Size":
            pool.size_kb = _kb(value)

    def _isa_line(self, key: str, value: Optional[str], line: str) -> None:
        match = _ISA.match(line.strip())
        if match and match.group(2):
            self.agent.isas.append(match.group(2).strip())
        elif key == "Name" and value:
            self.agent.isas.append(value)


def _finish(agent: Agent) -> Agent:
    fields = agent.fields
    agent.name = fields.get("Name", "")
    agent.marketing_name = fields.get("Marketing Name", "")
    agent.vendor_name = fields.get("Vendor Name", "")
    agent.device_type = fields.get("Device Type", "")
    agent.uuid = fields.get("Uuid", "")
    agent.node = parse_int(fields.get("Node"))
    agent.compute_units = parse_int(fields.get("Compute Unit"))
    agent.simds_per_cu = parse_int(fields.get("SIMDs per CU"))
    agent.chip_id = parse_int(fields.get("Chip ID"))
    agent.bdfid = parse_int(fields.get("BDFID"))
    return agent


def _header_line(info: RocmInfo, line: str) -> None:
    rock = _ROCK.match(line.strip())
    if rock:
        info.rock_loaded = not rock.group(2)
        info.rock_version = rock.group(1)
        return
    lowered = line.lower()
    if "failure" in lowered or "error" in lowered or lowered.startswith("call returned"):
        info.errors.append(line.strip())
        return
    key, value = _split(line)
    if value is not None:
        info.system.setdefault(key, value)


def parse_rocminfo(text: str) -> RocmInfo:
    """Parse ``rocminfo`` (or ``rocminfo --support``) output.

    Returns a RocmInfo; ``gpus`` lists the GPU agents. Output where the ROCk module is not loaded
    gives ``rock_loaded=False`` and no agents. Raises ParseError for empty text or text that is
    not rocminfo output (no ROCk line, no HSA sections, no agents).
    """
    require_text(text, "rocminfo")
    info = RocmInfo()
    builder: Optional[_AgentBuilder] = None
    recognised = False
    for line in lines_of(text):
        stripped = line.strip()
        if not stripped or set(stripped) <= set("*=") or is_truncation(stripped):
            continue
        if stripped.startswith("*** Done"):
            break
        if stripped in ("HSA System Attributes", "HSA Agents") or _ROCK.match(stripped):
            recognised = True
        agent = _AGENT.match(stripped)
        if agent and _indent(line) == 0:
            builder = _AgentBuilder(Agent(int(agent.group(1))))
            info.agents.append(builder.agent)
        elif builder is not None:
            builder.feed(line)
        elif stripped not in ("HSA System Attributes", "HSA Agents"):
            _header_line(info, line)
    if not recognised and not info.agents:
        raise ParseError("not rocminfo output: no 'ROCk module', 'HSA Agents' or 'Agent N' lines")
    info.runtime_version = info.system.get("Runtime Version")
    info.runtime_ext_version = info.system.get("Runtime Ext Version")
    info.agents = [_finish(agent) for agent in info.agents]
    return info
