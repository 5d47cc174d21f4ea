"""Helpers for the profile tests: build a profile document from a valid base plus dotted changes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from vgpu.errors import InputError
from vgpu.profiles import load_profile_text

DROP = object()  # remove the key
BASE: dict[str, Any] = {"version": "v1", "name": "t", "gpu": {"model": "MI300X", "vfs_per_gpu": 1}}


def doc(changes: dict[str, Any] | None = None, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``base`` (BASE) with ``{"gpu.vfs_per_gpu": 4}``-style changes applied."""
    out = copy.deepcopy(BASE if base is None else base)
    for dotted, value in (changes or {}).items():
        *parents, last = dotted.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return out


def load(data: dict[str, Any], source: str = "t.yaml"):
    return load_profile_text(yaml.safe_dump(data, sort_keys=False), source=source)


def problem(data: dict[str, Any], source: str = "t.yaml") -> str:
    """The one-line error the loader gives for ``data``; fails the test when it loads."""
    with pytest.raises(InputError) as caught:
        load(data, source)
    message = str(caught.value)
    assert "\n" not in message
    return message
