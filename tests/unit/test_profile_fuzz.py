"""Fuzz the profile loader: whatever the input, it returns a Profile or raises InputError with one line."""

from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from vgpu.errors import InputError
from vgpu.model.profile import Profile
from vgpu.profiles import load_profile_text

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
                    st.sampled_from(["v1", "MI300X", "mi355x", "sriov", "passthrough", "esxi", "kvm", "SPX", "QPX",
                                     "CPX", "NPS1", "NPS4", "all", "0000:85:00.0", "85:02.1", "7.0", "30.10.x",
                                     "gpu-vm-{index:02d}", "{index.__class__}", "../x", "required"]))
keys = st.one_of(st.sampled_from(["version", "name", "extends", "gpu", "model", "mode", "vfs_per_gpu",
                                  "compute_partition", "memory_partition", "select", "addresses", "count",
                                  "numa_nodes", "hypervisor", "vms", "vfs_per_vm", "name_pattern", "assign",
                                  "numa_policy", "guest", "os", "rocm", "amdgpu_driver", "validation",
                                  "tolerance", "fp8_tflops_min", "compute_units"]), st.text(max_size=10),
                 st.integers())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=5)), max_leaves=20)
VALID = {"version": "v1", "name": "f", "gpu": {"model": "MI300X", "vfs_per_gpu": 4,
                                               "select": {"addresses": ["0000:85:00.0"]}},
         "vms": {"vfs_per_vm": 2}, "guest": {"rocm": "7.0"}, "validation": {"tolerance": 0.5}}
PATHS = [(), ("gpu",), ("gpu", "select"), ("vms",), ("guest",), ("validation",)]


def _loads_or_input_error(text: str | bytes) -> None:
    try:
        profile = load_profile_text(text, source="fuzz.yaml")
    except InputError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert isinstance(profile, Profile)
    # Whatever loads must survive its own round trip.
    assert load_profile_text(yaml.safe_dump(profile.to_dict()), source="again.yaml").to_dict() == profile.to_dict()


@SETTINGS
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_anything_but_input_error(data):
    _loads_or_input_error(data)


@SETTINGS
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises_anything_but_input_error(text):
    _loads_or_input_error(text)


@SETTINGS
@given(st.dictionaries(keys, values, max_size=8))
@example({"[key]": []})  # pydantic's own marker for dict keys, used as a user's key
def test_arbitrary_mappings_never_raise_anything_but_input_error(data):
    _loads_or_input_error(yaml.safe_dump({"version": "v1", **data}))


@SETTINGS
@given(st.sampled_from(PATHS), keys, values)
def test_mutated_valid_profile_never_raises_anything_but_input_error(path, key, value):
    data = copy.deepcopy(VALID)
    node = data
    for part in path:
        node = node[part]
    node[key] = value
    _loads_or_input_error(yaml.safe_dump(data))
