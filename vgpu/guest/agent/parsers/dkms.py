"""Parser for ``dkms status``.

dkms(8) prints one line per module/version/kernel/arch combination with its state:
- dkms >= 2.8 / 3.x:  "amdgpu/6.16.13-2278356.24.04, 6.8.0-79-generic, x86_64: installed"
- older dkms 2.x:     "amdgpu, 6.8.5-2041575.22.04, 5.15.0-119-generic, x86_64: installed"
- a module only added (no kernel yet): "amdgpu/6.16.13-2278356.24.04: added"
The state is "added", "built" or "installed", possibly followed by a note in parentheses
("installed (original_module exists)", "installed (WARNING! Diff between built and installed
module!)"). dkms prints nothing when no module is registered. Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

from .common import ParseError, lines_of

_STATES = ("added", "built", "installed", "installed-weak", "broken")
_LINE = re.compile(r"^(?P<ids>[^:]+):\s*(?P<status>(?P<state>[A-Za-z-]+)\b(?:\s*\((?P<note>.*)\))?.*)$")


@dataclass
class DkmsEntry:
    """One ``dkms status`` line. ``kernel``/``arch`` are None for an added-only module; ``status`` is
    the state with any note as printed ("installed (original_module exists)"); ``state`` the bare word."""

    module: str
    version: str
    kernel: Optional[str]
    arch: Optional[str]
    state: str
    status: str
    note: Optional[str] = None

    @property
    def installed(self) -> bool:
        return self.state == "installed"


def _ids(text: str) -> Optional[List[str]]:
    """[module, version, kernel?, arch?] from the part before the colon, either format."""
    parts = [part.strip() for part in text.split(",")]
    head = parts[0]
    if "/" in head:
        module, version = head.split("/", 1)
        rest = parts[1:]
    elif len(parts) >= 2:
        module, version = head, parts[1]
        rest = parts[2:]
    else:
        return None
    if not module or not version or " " in module or len(rest) > 2:
        return None
    return [module, version] + rest + [None] * (2 - len(rest))  # type: ignore[list-item]


def parse_dkms_status(text: str) -> List[DkmsEntry]:
    """Parse ``dkms status`` into DkmsEntry objects in printed order.

    Empty output gives [] (no module registered). Lines that are not status lines (dkms warnings
    such as "Error! Could not locate dkms.conf file.") are skipped. Raises ParseError when the text
    is non-empty but holds no status line at all.
    """
    entries: List[DkmsEntry] = []
    meaningful = 0
    for line in lines_of(text or ""):
        stripped = line.strip()
        if not stripped:
            continue
        meaningful += 1
        match = _LINE.match(stripped)
        if not match or match.group("state").lower() not in _STATES:
            continue
        ids = _ids(match.group("ids"))
        if ids is None:
            continue
        entries.append(DkmsEntry(module=ids[0], version=ids[1], kernel=ids[2], arch=ids[3],
                                 state=match.group("state").lower(), status=match.group("status").strip(),
                                 note=match.group("note")))
    if meaningful and not entries:
        raise ParseError("not dkms status output: no 'module/version, kernel, arch: state' line")
    return entries


def find_module(entries: List[DkmsEntry], module: str, kernel: Optional[str] = None) -> List[DkmsEntry]:
    """The entries for ``module`` (and ``kernel``, when given; added-only entries have no kernel)."""
    return [e for e in entries if e.module == module and (kernel is None or e.kernel == kernel)]
