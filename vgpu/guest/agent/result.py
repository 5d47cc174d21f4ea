"""The agent's result format: the contract between the guest agent and the host side.

Standard library only and Python 3.8 compatible (this file runs inside guests).
The agent prints exactly one JSON document on stdout: ``AgentResult.to_dict()``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import List, Optional, Union

AGENT_RESULT_SCHEMA = "vgpu.agent-result/v1"
EXPECT_SCHEMA = "vgpu.agent-expect/v1"
STATUSES = ("pass", "fail", "skip", "error")


@dataclass
class CheckResult:
    name: str
    status: str  # one of STATUSES
    measured: Optional[Union[float, int, str]] = None
    expected: Optional[Union[float, int, str]] = None
    unit: Optional[str] = None
    detail: str = ""
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError("bad status %r for check %s" % (self.status, self.name))


@dataclass
class AgentResult:
    hostname: str
    agent_version: str
    started: str  # ISO 8601 UTC
    seconds: float
    checks: List[CheckResult] = field(default_factory=list)
    schema: str = AGENT_RESULT_SCHEMA

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "AgentResult":
        if data.get("schema") != AGENT_RESULT_SCHEMA:
            raise ValueError("not a vgpu agent result (schema %r)" % data.get("schema"))
        checks = [CheckResult(**c) for c in data.get("checks", [])]
        fields = {k: data[k] for k in ("hostname", "agent_version", "started", "seconds")}
        return cls(checks=checks, **fields)
