"""Parser for ``lspci`` output: device lines with or without ``-nn`` ids, the ``-k`` detail lines
("Subsystem:", "Kernel driver in use:", "Kernel modules:"), grep-cut output ("--" separators,
leading spaces, "# ..." comments a publisher appended), and the DevSta/LnkSta lines of
``lspci -vvv``. Standard library only, Python 3.8.

Model names in lspci come from the pci.ids database, which often does not know new functions
("Device [1002:74b5]"): use the ids, never the names (docs/hardware.md §1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .common import ParseError, is_noise, lines_of, normalize_bdf, parse_float, parse_int

_DEVICE = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<cls>[^:\[]+?)(?:\s+\[(?P<class_id>[0-9a-fA-F]{4})\])?:\s+(?P<desc>.*)$")
_IDS = re.compile(r"\s*\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
# What lspci prints when pci.ids has no name: "Device 74b5" (vendor known), "Device 1234:1111"
# (vendor unknown too); with -nn "Device [1002:74b5]" (read by _IDS).
_UNNAMED = re.compile(r"(?:^|\s)Device (?:(?P<vendor>[0-9a-fA-F]{4}):)?(?P<device>[0-9a-fA-F]{4})$")
_REV = re.compile(r"\s*\(rev\s+(?P<rev>[0-9a-fA-F]+)\)")
_PROG_IF = re.compile(r"\s*\(prog-if\s+[^)]*\)")


@dataclass
class LspciDevice:
    """One PCI function. ``bdf`` is normalised to "dddd:bb:dd.f"; ids are None without ``-nn``."""

    bdf: str
    class_name: str
    class_id: Optional[int] = None
    description: str = ""
    vendor_id: Optional[int] = None
    device_id: Optional[int] = None
    revision: Optional[int] = None
    subsystem: Optional[str] = None
    subsystem_vendor_id: Optional[int] = None
    subsystem_device_id: Optional[int] = None
    driver: Optional[str] = None
    modules: List[str] = field(default_factory=list)
    details: Dict[str, str] = field(default_factory=dict)

    @property
    def ids(self) -> Optional[str]:
        """"1002:74b5" or None."""
        if self.vendor_id is None or self.device_id is None:
            return None
        return "%04x:%04x" % (self.vendor_id, self.device_id)


def _strip_comment(value: str) -> str:
    return value.split(" #", 1)[0].strip() if " #" in value else value.strip()


def _take_ids(text: str):
    """(text without its trailing "[vvvv:dddd]", vendor, device). Without ids, an unnamed
    "Device 74b5" still gives the device id (and "Device 1234:1111" both); the text is kept."""
    matches = list(_IDS.finditer(text))
    if not matches:
        unnamed = _UNNAMED.search(text.strip())
        if unnamed is None:
            return text.strip(), None, None
        vendor = unnamed.group("vendor")
        return text.strip(), int(vendor, 16) if vendor else None, int(unnamed.group("device"), 16)
    last = matches[-1]
    return (text[:last.start()] + text[last.end():]).strip(), int(last.group("vendor"), 16), \
        int(last.group("device"), 16)


def _device(match) -> LspciDevice:
    desc = _PROG_IF.sub("", match.group("desc"))
    rev = _REV.search(desc)
    desc = _REV.sub("", desc)
    desc, vendor, device = _take_ids(desc)
    return LspciDevice(bdf=normalize_bdf(match.group("bdf")) or match.group("bdf"),
                       class_name=match.group("cls").strip(),
                       class_id=int(match.group("class_id"), 16) if match.group("class_id") else None,
                       description=desc, vendor_id=vendor, device_id=device,
                       revision=int(rev.group("rev"), 16) if rev else None)


def _detail(device: LspciDevice, key: str, value: str) -> None:
    value = _strip_comment(value)
    device.details.setdefault(key, value)
    if key == "Subsystem":
        device.subsystem, device.subsystem_vendor_id, device.subsystem_device_id = _take_ids(value)
    elif key == "Kernel driver in use":
        device.driver = value or None
    elif key == "Kernel modules":
        device.modules = [m.strip() for m in value.split(",") if m.strip()]


def parse_lspci(text: str) -> List[LspciDevice]:
    """Parse ``lspci``, ``lspci -nn``, ``-nnk``/``-nnkk`` (also cut by grep) into devices in order.

    Empty output gives [] (grep matched nothing); shell prompt lines around the output are
    skipped. Raises ParseError when other text holds no device line.
    """
    devices: List[LspciDevice] = []
    meaningful = 0
    for line in lines_of(text or ""):
        stripped = line.strip()
        if is_noise(line) or stripped == "--":
            continue
        meaningful += 1
        match = _DEVICE.match(stripped)
        if match:
            devices.append(_device(match))
        elif devices and ":" in stripped:
            key, value = stripped.split(":", 1)
            _detail(devices[-1], key.strip(), value)
    if meaningful and not devices:
        raise ParseError("not lspci output: no 'bb:dd.f class: description' line")
    return devices


@dataclass
class LinkStatus:
    """A "LnkSta:" line: negotiated speed (GT/s) and width (lanes); ``flags`` the rest as printed."""

    speed_gts: Optional[float] = None
    width: Optional[int] = None
    downgraded: bool = False
    flags: List[str] = field(default_factory=list)


def parse_link_status(text: str) -> List[LinkStatus]:
    """Every "LnkSta:" line of ``lspci -vvv`` (or its grep), in order. "LnkSta2:" is not one.

    Newer lspci appends "(ok)" or "(downgraded)" to speed and width; both are read.
    """
    found: List[LinkStatus] = []
    for line in lines_of(text or ""):
        stripped = line.strip()
        if not stripped.startswith("LnkSta:"):
            continue
        status = LinkStatus()
        for part in [p.strip() for p in stripped[len("LnkSta:"):].split(",") if p.strip()]:
            if part.startswith("Speed"):
                status.speed_gts = parse_float(part.split()[1].replace("GT/s", ""))
            elif part.startswith("Width"):
                status.width = parse_int(part.split()[1].lstrip("x"))
            else:
                status.flags.append(part)
            status.downgraded = status.downgraded or "downgraded" in part
        found.append(status)
    return found


def parse_device_status(text: str) -> List[Dict[str, bool]]:
    """Every "DevSta:" line as {flag: set}: "CorrErr- FatalErr+" -> {"CorrErr": False, "FatalErr": True}."""
    found = []
    for line in lines_of(text or ""):
        stripped = line.strip()
        if stripped.startswith("DevSta:"):
            flags = stripped[len("DevSta:"):].split()
            found.append({flag[:-1]: flag.endswith("+") for flag in flags if flag[-1:] in "+-"})
    return found
