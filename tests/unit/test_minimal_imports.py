"""Host discovery and vfio binding run where only the standard library (and pyudev) exists: the real-kernel
tier's guest root has no PyYAML, pydantic, rich or click, and it broke when vgpu.inputs imported yaml at
the top. This keeps those modules importable without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CODE = """
import sys
for name in ("yaml", "pydantic", "rich", "click", "jsonschema"):
    sys.modules[name] = None  # import fails like a missing package
import vgpu.host.discovery, vgpu.host.binding, vgpu.host.kernel, vgpu.inputs
print("ok")
"""


def test_discovery_and_binding_import_with_the_standard_library_only():
    proc = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
