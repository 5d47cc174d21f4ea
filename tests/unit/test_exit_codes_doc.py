"""docs/exit-codes.md and vgpu.errors.ExitCode must agree."""

import re
from pathlib import Path

from vgpu.errors import ExitCode

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"


def test_every_exit_code_is_documented_with_its_number():
    rows = dict(re.findall(r"^\|\s*(\d+)\s*\|\s*([A-Z_]+)\s*\|", DOC.read_text(), re.M))
    for name, value in vars(ExitCode).items():
        if name.isupper():
            assert rows.get(str(value)) == name, f"{name}={value} missing or wrong in {DOC.name}"
