"""Deadlines read from the environment for ESXi connections and tasks: one parser, one error line."""

import pytest

from vgpu.errors import InputError


@pytest.mark.parametrize("text", ["abc", "0", "-1", "nan", "1e9"])
def test_a_deadline_from_the_environment_outside_its_range_is_one_line(monkeypatch, text):
    from vgpu.esxi.connect import TIMEOUT_ENV, timeout
    from vgpu.esxi.host import TASK_TIMEOUT_ENV, task_timeout

    for name, read in ((TIMEOUT_ENV, timeout), (TASK_TIMEOUT_ENV, task_timeout)):
        monkeypatch.setenv(name, text)
        with pytest.raises(InputError, match=rf"\${name}=.*give the seconds"):
            read()


def test_a_deadline_from_the_environment_is_read_and_defaults_when_unset(monkeypatch):
    from vgpu.esxi.connect import CONNECT_TIMEOUT, TIMEOUT_ENV, timeout

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert timeout() == CONNECT_TIMEOUT
    monkeypatch.setenv(TIMEOUT_ENV, "2.5")
    assert timeout() == 2.5
