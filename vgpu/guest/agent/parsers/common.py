"""Shared helpers for the tool-output parsers: numbers, units, lines, JSON payloads.

Standard library only, Python 3.8 syntax and stdlib: this package runs inside guests as part of
the agent zipapp. Every helper is pure and never raises on odd values: what it cannot read it
returns as ``None``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional


class ParseError(ValueError):
    """The text is not the output of the tool the parser was asked to read (or is empty)."""


# Values the ROCm tools print for "no data". amd-smi prints "N/A" (also with a unit glued on:
# "N/A mV", "N/A C" in the GIM amd-smi docs); rocm-smi prints "N/A" and "Not supported".
_NA = {"", "n/a", "na", "none", "unknown", "not supported", "not available", "-"}

# Lines that publishers (and `| head`) leave where output was cut.
_TRUNCATION = re.compile(r"^(?:\.{3,}|\u2026|-+\s*snipped\s*-+|#\s*\(truncated output\))$", re.I)

# "304(0x130)", "29877(0x74b5)": rocminfo prints decimal with the hex in parentheses.
_DEC_HEX = re.compile(r"^([-+]?\d+)\s*\(0x[0-9a-fA-F]+\)")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def lines_of(text: str) -> List[str]:
    """Split ``text`` into lines with CRLF/CR normalised and trailing whitespace removed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [line.rstrip() for line in text.split("\n")]


def require_text(text: Optional[str], tool: str) -> str:
    """Return ``text`` unchanged; raise ParseError when it is None, empty or only whitespace."""
    if text is None or not str(text).strip():
        raise ParseError("%s printed nothing: no output to parse" % tool)
    return str(text)


def is_truncation(line: str) -> bool:
    """True for markers publishers put where output was cut ('...', '---- snipped ----', '…')."""
    return bool(_TRUNCATION.match(line.strip()))


# Shell prompt lines that captures keep around the output: "$ amd-smi ...", "# rocm-smi",
# "ubuntu@host:~$ sudo amd-smi partition", "[root@host ~]# lspci", "PS C:\\> amd-smi.exe ...".
_PROMPT = re.compile(r"^(?:\$|#|>|PS [A-Za-z]:\\[^>]*>"
                     r"|\[[^\]\s]+@[^\]]+\][$#]"
                     r"|(?:\([^)\s]+\)\s*)?[\w.-]+@[\w.-]+:[^\s$#]*[$#])(?:\s|$)")


def is_prompt(line: str) -> bool:
    """True for a shell prompt line a capture kept ("$ cmd", "user@host:~$ cmd", "[root@h ~]# cmd")."""
    return bool(_PROMPT.match(line.strip()))


def is_noise(line: str) -> bool:
    """Blank lines, truncation markers and prompt lines: never part of a tool's output."""
    return not line.strip() or is_truncation(line) or is_prompt(line)


def is_na(value: Any) -> bool:
    """True for None and the tools' "no data" spellings ("N/A", "N/A mV", "Not supported")."""
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    text = value.strip().lower()
    return text in _NA or text.startswith("n/a ")


def parse_int(value: Any) -> Optional[int]:
    """Read an integer from 304, "304", "304(0x130)", "0x74a1", "0x74A1", " 64 " or "1,024".

    Returns None for N/A, non-numbers and floats with a fraction ("1.5"). Booleans are not ints here.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, dict):
        return parse_int(value.get("value"))
    text = str(value).strip().replace(",", "")
    if is_na(text):
        return None
    match = _DEC_HEX.match(text)
    if match:
        return int(match.group(1))
    if _HEX.match(text):
        return int(text, 16)
    token = text.split()[0] if text.split() else ""
    if re.match(r"^[-+]?\d+$", token):
        return int(token)
    return None


def parse_float(value: Any) -> Optional[float]:
    """Read a number from 1.5, "1.30708e+06", "41.0", "5300 GB/s" (the leading number), "0x10"."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return parse_float(value.get("value"))
    text = str(value).strip().replace(",", "")
    if is_na(text):
        return None
    as_int = parse_int(text)
    if as_int is not None and (_HEX.match(text) or _DEC_HEX.match(text)):
        return float(as_int)
    match = _NUMBER.match(text)
    return float(match.group(0)) if match else None


def parse_scalar(value: str) -> Any:
    """Convert a CSV/table cell: int if integral, float if numeric, None if N/A, else the text."""
    text = value.strip()
    if is_na(text):
        return None
    if re.match(r"^[-+]?\d+$", text):
        return int(text)
    if re.match(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$", text):
        return float(text)
    return text


@dataclass(frozen=True)
class Quantity:
    """A number with its unit as printed ("MB", "GB/s", "W", "°C", "%", "MHz")."""

    value: float
    unit: str

    def __str__(self) -> str:
        number = int(self.value) if self.value.is_integer() else self.value
        return ("%s %s" % (number, self.unit)).strip()


_QUANTITY = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*)$")


def parse_quantity(value: Any) -> Optional[Quantity]:
    """Read "196288 MB", "48.0 GB", "5300 GB/s", "41.0°C", "121.0W", "131Mhz", "0 %", "32(0x20) KB",
    or amd-smi JSON's {"value": 196592, "unit": "MB"}. A bare number gets unit "". N/A gives None."""
    if isinstance(value, dict):
        number = parse_float(value.get("value"))
        unit = value.get("unit")
        return Quantity(number, str(unit or "")) if number is not None else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return Quantity(float(value), "")
    text = str(value).strip()
    if is_na(text):
        return None
    text = re.sub(r"^([-+]?\d+)\s*\(0x[0-9a-fA-F]+\)", r"\1", text)
    match = _QUANTITY.match(text)
    if not match:
        return None
    return Quantity(float(match.group(1)), match.group(2).strip())


# Sizes: the ROCm tools print binary multiples with decimal names (rocminfo "KB" is KiB: a
# 192 GiB MI300X shows 201326592 KB minus reserved; amd-smi "196592 MB" is MiB).
_SIZE_TO_MB = {
    "b": 1.0 / (1024 * 1024), "bytes": 1.0 / (1024 * 1024),
    "kb": 1.0 / 1024, "kib": 1.0 / 1024, "k": 1.0 / 1024,
    "mb": 1.0, "mib": 1.0, "m": 1.0,
    "gb": 1024.0, "gib": 1024.0, "g": 1024.0,
    "tb": 1024.0 * 1024, "tib": 1024.0 * 1024,
}


def size_mb(value: Any, default_unit: str = "MB") -> Optional[float]:
    """Size in MiB from "196288 MB", "48.0 GB", "200998912 KB", {"value":..,"unit":..} or a bare number
    (taken in ``default_unit``). None for N/A or a unit that is not a size."""
    quantity = parse_quantity(value)
    if quantity is None:
        return None
    unit = (quantity.unit or default_unit).strip().lower()
    factor = _SIZE_TO_MB.get(unit)
    return quantity.value * factor if factor is not None else None


def parse_list(value: str) -> List[str]:
    """Split an amd-smi list value "[0 %, N/A, 0 %]" (or "[ 0 %, 0 % ]") into its stripped items."""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = [item.strip().strip("'\"") for item in text.split(",")]
    return [item for item in items if item]


def normalize_bdf(value: Any) -> Optional[str]:
    """Lower-case "dddd:bb:dd.f" from "0000:83:00.0", "83:00.0" (domain 0000) or "0000:0C:00.0".

    Returns None for anything that is not a PCI address. (Host code turns this into PciAddress.)
    """
    if not isinstance(value, str):
        return None
    match = re.match(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$",
                     value.strip())
    if not match:
        return None
    domain = int(match.group(1) or "0", 16)
    return "%04x:%02x:%02x.%s" % (domain, int(match.group(2), 16), int(match.group(3), 16),
                                  match.group(4))


def json_payload(text: str, tool: str) -> Any:
    """Decode the JSON document in ``text``, skipping any banner before it (amd-smi run as non-root
    prints a permission notice on stdout before the JSON) and anything after it.

    Tries each line that starts with "{" or "[" in turn. Raises ParseError when none decodes.
    """
    require_text(text, tool)
    normalized = text.replace("\r\n", "\n")
    decoder = json.JSONDecoder()
    offset = 0
    for line in normalized.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("{", "[")):
            start = offset + (len(line) - len(stripped))
            try:
                payload, _ = decoder.raw_decode(normalized, start)
                return payload
            except ValueError:
                pass
        offset += len(line) + 1
    raise ParseError("%s output holds no JSON document" % tool)


def first(values: Iterable[Any]) -> Any:
    """The first value that is not None (or None)."""
    for value in values:
        if value is not None:
            return value
    return None
