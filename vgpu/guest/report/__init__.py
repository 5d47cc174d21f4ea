"""Validation reports: one model (model.py) written as JSON, JUnit XML and a self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

from vgpu.fsutil import atomic_write

from vgpu.guest.report.model import ValidationReport

JSON_NAME = "validation-report.json"
JUNIT_NAME = "validation-report.junit.xml"
HTML_NAME = "validation-report.html"


__all__ = ["atomic_write", "write_all", "JSON_NAME", "JUNIT_NAME", "HTML_NAME"]


def write_all(report: ValidationReport, out_dir: Path) -> dict[str, Path]:
    """Write the three formats into ``out_dir``; returns {"json"|"junit"|"html": path}."""
    from vgpu.guest.report import html, json, junit

    paths = {"json": out_dir / JSON_NAME, "junit": out_dir / JUNIT_NAME, "html": out_dir / HTML_NAME}
    atomic_write(paths["json"], json.render(report))
    atomic_write(paths["junit"], junit.render(report))
    atomic_write(paths["html"], html.render(report))
    return paths
