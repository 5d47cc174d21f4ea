"""Validation reports: one model (model.py) written as JSON, JUnit XML and a self-contained HTML page."""

from __future__ import annotations

import os
from pathlib import Path

from vgpu.errors import InputError
from vgpu.fsutil import atomic_write
from vgpu.inputs import write_error

from vgpu.guest.report.model import ValidationReport

JSON_NAME = "validation-report.json"
JUNIT_NAME = "validation-report.junit.xml"
HTML_NAME = "validation-report.html"


__all__ = ["atomic_write", "check_report_dir", "write_all", "write_files", "JSON_NAME", "JUNIT_NAME", "HTML_NAME"]


def write_all(report: ValidationReport, out_dir: Path) -> dict[str, Path]:
    """Write the three formats into ``out_dir``; returns {"json"|"junit"|"html": path}."""
    from vgpu.guest.report import html, json, junit

    paths = {"json": out_dir / JSON_NAME, "junit": out_dir / JUNIT_NAME, "html": out_dir / HTML_NAME}
    write_files(out_dir, {paths["json"]: json.stream(report), paths["junit"]: junit.render(report),
                          paths["html"]: html.render(report)})
    return paths


def write_files(out_dir: Path, files: dict[Path, bytes]) -> None:
    """Write each file of a report directory atomically; any OSError (full disk, permission, read-only) is
    one line naming the directory."""
    try:
        for path, data in files.items():
            atomic_write(path, data)
    except OSError as exc:
        raise write_error(exc, "report directory", out_dir) from None


def check_report_dir(out_dir: Path) -> None:
    """Refuse (InputError) a report directory that could not be written, before any guest runs:
    the nearest existing ancestor must be a directory this process may write into."""
    probe = Path(out_dir)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"report directory {out_dir}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"report directory {out_dir} cannot be written: {probe} is read-only or not writable "
                         "by this user", hint="give a --report-dir you can write to")
