"""The JSON report (schema ``vgpu.validation-report/v1``) and reading reports back for ``vgpu report``."""

from __future__ import annotations

import json
from pathlib import Path

from vgpu.errors import InputError
from vgpu.guest.report.model import ValidationReport


def render(report: ValidationReport) -> bytes:
    return (json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n").encode()


def load(path: Path) -> ValidationReport:
    """A report from a JSON file, or from the report in a report directory. Raises InputError."""
    from vgpu.guest.report import JSON_NAME

    if path.is_dir():
        path = path / JSON_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"no validation report at {path}",
                         hint="pass a report JSON or a --report-dir") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not JSON (line {exc.lineno}: {exc.msg})") from None
    return ValidationReport.from_dict(data, source=str(path))
