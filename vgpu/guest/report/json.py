"""The JSON report (schema ``vgpu.validation-report/v1``) and reading reports back for ``vgpu report``."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from vgpu.errors import InputError
from vgpu.inputs import InputFileError, load_json
from vgpu.guest.report.model import ValidationReport


def render(report: ValidationReport) -> bytes:
    return (json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n").encode()


def load(path: Path) -> ValidationReport:
    """A report from a JSON file, or from the report in a report directory. Raises InputError."""
    from vgpu.guest.report import JSON_NAME

    if path.is_dir():
        path = path / JSON_NAME
    try:
        data = load_json(path, "report")
    except InputFileError as exc:
        if exc.errno == errno.ENOENT:
            raise InputError(f"no validation report at {path}",
                             hint="pass a report JSON or a --report-dir") from None
        raise
    return ValidationReport.from_dict(data, source=f"report {path}")
