"""LinuxKernel runs the real modprobe/udevadm interface: argument lists, never a shell; errors as one sentence.

A stand-in executable records its argv and answers as modprobe does (the real modprobe would change
this machine's modules)."""

import json
import os
import stat

import pytest

from vgpu.errors import HostError
from vgpu.host.kernel import KernelOps, LinuxKernel


def fake_tool(tmp_path, name, rc=0, stderr=""):
    log = tmp_path / f"{name}.argv"
    script = tmp_path / name
    script.write_text("#!/usr/bin/env python3\nimport json, sys\n"
                      f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                      f"sys.stderr.write({stderr!r})\nsys.exit({rc})\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), log


def calls(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_it_is_a_kernel_ops():
    assert isinstance(LinuxKernel(), KernelOps)


def test_module_names_and_parameters_are_separate_arguments(tmp_path):
    modprobe, log = fake_tool(tmp_path, "modprobe")
    kernel = LinuxKernel(modprobe=modprobe)
    kernel.load_module("gim", {"vf_num": "4,4"})
    kernel.unload_module("gim; reboot")  # hostile text stays one argument: no shell ever sees it
    assert calls(log) == [["--", "gim", "vf_num=4,4"], ["-r", "--", "gim; reboot"]]


def test_modprobe_failure_is_one_sentence_with_its_reason(tmp_path):
    modprobe, _ = fake_tool(tmp_path, "modprobe", rc=1, stderr="modprobe: FATAL: Module gim is in use.\n")
    with pytest.raises(HostError, match=r"^unloading module gim failed: modprobe: FATAL: Module gim is in use\.$"):
        LinuxKernel(modprobe=modprobe).unload_module("gim")


def test_missing_modprobe_is_a_host_error(tmp_path):
    with pytest.raises(HostError, match="loading module gim failed"):
        LinuxKernel(modprobe=str(tmp_path / "nope")).load_module("gim")


def test_write_attr_failure_names_the_file_and_the_reason(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    with pytest.raises(HostError, match=r"writing '1' to .*ro/missing/attr failed"):
        LinuxKernel().write_attr(target / "missing" / "attr", "1")


def test_settle_asks_udevadm_with_a_timeout_and_survives_its_absence(tmp_path):
    udevadm, log = fake_tool(tmp_path, "udevadm")
    LinuxKernel(udevadm=udevadm).settle(7.5)
    assert calls(log) == [["settle", "--timeout=7"]]
    LinuxKernel(udevadm=str(tmp_path / "absent")).settle(0.01)  # no udevadm: a short wait, no error
    assert os.path.exists(log)


def test_host_lock_under_a_regular_file_is_bad_input_naming_it(tmp_path):
    from vgpu.errors import InputError
    from vgpu.executor import host_lock
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(InputError, match="it, or a directory above it, is a regular file"):
        with host_lock(blocker / "vgpu"):
            pass
