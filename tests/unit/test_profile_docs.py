"""docs/profiles.md is the operator's reference: it must cover every field and its example must load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vgpu.model.profile import GpuSelection, GpuSpec, GuestSpec, Profile, ValidationOverrides, VmSpec
from vgpu.profiles import load_profile_text, shipped_names

DOC = (Path(__file__).resolve().parents[2] / "docs" / "profiles.md").read_text()


@pytest.mark.parametrize("model", [Profile, GpuSpec, GpuSelection, VmSpec, GuestSpec, ValidationOverrides])
def test_every_field_is_documented(model):
    missing = [f for f in model.model_fields if f"`{f}`" not in DOC and f"{{{f}:" not in DOC]
    assert missing == []


def test_every_shipped_profile_is_documented():
    assert [n for n in shipped_names() if f"`{n}`" not in DOC] == []


def test_the_complete_example_loads():
    example = re.search(r"## A complete example\n\n```yaml\n(.*?)```", DOC, re.S).group(1)
    profile = load_profile_text(example, source="lab.yaml")
    assert (profile.name, profile.gpu.vfs_per_gpu, profile.vms.vfs_per_vm) == ("lab-4vf", 4, 2)
