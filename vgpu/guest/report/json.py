"""The JSON report (schema ``vgpu.validation-report/v1``) and reading reports back for ``vgpu report``."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from pathlib import Path

from vgpu.errors import InputError
from vgpu.inputs import InputFileError, load_json
from vgpu.guest.report.model import REPORT_SCHEMA, ValidationReport


def render(report: ValidationReport) -> bytes:
    return b"".join(stream(report))


def stream(report: ValidationReport) -> Iterator[bytes]:
    """The report's JSON one guest at a time: the same bytes as ``json.dumps(report.to_dict(),
    indent=2)`` plus a newline, without building the whole document (a fleet's report is a few
    KiB per guest). The summary comes first, as in the whole document."""
    top = {"schema": REPORT_SCHEMA, "generated": report.generated, "vgpu_version": report.vgpu_version,
           "summary": report.summary(), "guests": []}
    head = json.dumps(top, indent=2, allow_nan=False)
    if not report.guests:
        yield (head + "\n").encode()
        return
    tail = "[]\n}"
    assert head.endswith(tail), head[-20:]
    yield (head[: -len(tail)] + "[\n").encode()
    for i, guest in enumerate(report.guests):
        text = json.dumps(guest.to_dict(), indent=2, allow_nan=False).replace("\n", "\n    ")
        yield (("    " if i == 0 else ",\n    ") + text).encode()
    yield b"\n  ]\n}\n"


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
