"""Pure parsers for the tools the guest agent runs: rocminfo, amd-smi (ROCm and GIM host flavours,
text/JSON/CSV), rocm-smi, hipblaslt-bench, dkms status and lspci.

Standard library only, Python >= 3.8 (they ship inside the agent zipapp). Each parser takes the
tool's stdout as text and returns dataclasses; it raises ``ParseError`` (a ValueError) only when
the text is empty or is not that tool's output at all. See docs/parsers.md.
"""

from __future__ import annotations

from .common import ParseError, Quantity

__all__ = ["ParseError", "Quantity"]
