"""Validation reports: one model (model.py) written as JSON, JUnit XML and a self-contained HTML page."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vgpu.guest.report.model import ValidationReport

JSON_NAME = "validation-report.json"
JUNIT_NAME = "validation-report.junit.xml"
HTML_NAME = "validation-report.html"


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to a temp file beside ``path``, fsync, chmod, then os.replace it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_all(report: ValidationReport, out_dir: Path) -> dict[str, Path]:
    """Write the three formats into ``out_dir``; returns {"json"|"junit"|"html": path}."""
    from vgpu.guest.report import html, json, junit

    paths = {"json": out_dir / JSON_NAME, "junit": out_dir / JUNIT_NAME, "html": out_dir / HTML_NAME}
    atomic_write(paths["json"], json.render(report))
    atomic_write(paths["junit"], junit.render(report))
    atomic_write(paths["html"], html.render(report))
    return paths
