"""Operator docs that must match the code: exit codes (docs/exit-codes.md), plan JSON (docs/plan-json.md)."""

import re
from pathlib import Path

from vgpu.errors import ExitCode

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"


def test_every_exit_code_is_documented_with_its_number():
    rows = dict(re.findall(r"^\|\s*(\d+)\s*\|\s*([A-Z_]+)\s*\|", DOC.read_text(), re.M))
    for name, value in vars(ExitCode).items():
        if name.isupper():
            assert rows.get(str(value)) == name, f"{name}={value} missing or wrong in {DOC.name}"


def test_every_plan_step_kind_is_documented_with_its_fields():
    from dataclasses import fields

    from vgpu.model.plan import STEP_TYPES
    text = (DOC.parent / "plan-json.md").read_text()
    rows = {m[0]: m[1] for m in re.findall(r"^\| `([a-z-]+)` \| (.*?) \|", text, re.M)}
    for kind, cls in STEP_TYPES.items():
        assert kind in rows, f"step kind {kind} missing from plan-json.md"
        for f in fields(cls):
            assert f"`{f.name}`" in rows[kind], f"{kind}.{f.name} missing from plan-json.md"


def test_every_plan_field_is_documented():
    from vgpu.model.plan import Plan
    text = (DOC.parent / "plan-json.md").read_text()
    for key in Plan(profile="p", host="h").to_dict():
        assert f"| `{key}` |" in text, f"plan field {key} missing from plan-json.md"
