"""Every step kind a platform plans has a handler, checked when the table is built."""

from __future__ import annotations

import pytest

from vgpu.executor import StepTable
from vgpu.model.plan import STEP_TYPES, SetPassthrough, WriteFile


def test_every_step_kind_is_applied_by_exactly_one_platform():
    from vgpu.esxi.steps import TABLE as ESXI
    from vgpu.host.steps import TABLE as KVM
    kinds = [cls for table in (KVM, ESXI) for cls in table.handlers]
    assert sorted(c.kind for c in kinds) == sorted(STEP_TYPES)


def test_a_planned_step_without_a_handler_fails_when_the_table_is_built():
    noop = (lambda s, c: {}, lambda s, c, i: None, lambda s, c, i: None)
    with pytest.raises(TypeError, match="no handler for \\['set-passthrough'\\]"):
        StepTable("test", {WriteFile: noop}, plans=(WriteFile, SetPassthrough))
    with pytest.raises(TypeError, match="handlers for unplanned"):
        StepTable("test", {WriteFile: noop, SetPassthrough: noop}, plans=(WriteFile,))


def test_a_step_of_the_other_platform_is_one_error_not_a_key_error():
    from vgpu.errors import HostError
    from vgpu.host.steps import TABLE
    with pytest.raises(HostError, match="cannot apply a set-passthrough step"):
        TABLE.prepare(SetPassthrough.__new__(SetPassthrough), None)
