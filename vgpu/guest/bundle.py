"""Pack the guest agent into one self-contained zipapp, ``vgpu-agent.pyz``.

The archive holds vgpu/guest/agent (parsers, the HIP source and fp8_torch included) plus empty
``vgpu`` and ``vgpu.guest`` package stubs, so that nothing but the standard library is imported on
the guest (Python >= 3.8). The output is byte-for-byte deterministic: sorted entries, a fixed
timestamp and fixed permissions, so the same source gives the same checksum on every host
(handy for caching the upload and for reproducible reports).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from vgpu.fsutil import atomic_write

AGENT_NAME = "vgpu-agent.pyz"
SHEBANG = b"#!/usr/bin/env python3\n"
_AGENT_DIR = Path(__file__).resolve().parent / "agent"
_SUFFIXES = (".py", ".hip")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
_STUBS = {
    "vgpu/__init__.py": '"""vgpu guest agent bundle (see vgpu.guest.bundle)."""\n',
    "vgpu/guest/__init__.py": "",
    "__main__.py": "import sys\n\nfrom vgpu.guest.agent.main import main\n\nsys.exit(main())\n",
}


def agent_files() -> list[tuple[str, Path]]:
    """(archive name, source path) of every agent file, sorted; caches and stray files left out."""
    out = []
    for path in sorted(_AGENT_DIR.rglob("*")):
        rel = path.relative_to(_AGENT_DIR)
        if path.is_file() and path.suffix in _SUFFIXES and "__pycache__" not in rel.parts:
            out.append(("vgpu/guest/agent/" + rel.as_posix(), path))
    return out


def _entry(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    info.create_system = 3  # unix, whatever the building host is
    zf.writestr(info, data, compresslevel=9)


def build_bytes() -> bytes:
    """The zipapp's bytes (shebang + zip)."""
    buf = io.BytesIO()
    buf.write(SHEBANG)
    entries = [(name, text.encode()) for name, text in _STUBS.items()]
    entries += [(name, path.read_bytes()) for name, path in agent_files()]
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in sorted(entries):
            _entry(zf, name, data)
    return buf.getvalue()


def build_agent(dest_dir: Path) -> Path:
    """Write ``dest_dir/vgpu-agent.pyz`` atomically (mode 0755) and return its path."""
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / AGENT_NAME
    atomic_write(target, build_bytes(), 0o755)
    return target
