"""The boot unit provision installs: systemd accepts it, and the command it runs converges a host."""

import os
import shlex
import shutil
import subprocess

import pytest

from vgpu.profiles import load_profile
from vgpu.provision import provision

from conftest import REPO, run_cli, target_of

UNIT = "etc/systemd/system/vgpu-reapply.service"


def _installed_unit(sim):
    host = sim()
    provision(target_of(host), load_profile("mi300x-4vf"))
    return host, (host.root / UNIT).read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(sim, tmp_path):
    _, text = _installed_unit(sim)
    unit = tmp_path / "vgpu-reapply.service"
    unit.write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_unit_runs_after_modules_load_and_before_libvirt_and_is_enabled(sim):
    host, text = _installed_unit(sim)
    assert "After=systemd-modules-load.service" in text and "Before=libvirtd.service" in text
    link = host.root / "etc/systemd/system/multi-user.target.wants/vgpu-reapply.service"
    assert link.resolve() == (host.root / UNIT).resolve()  # relative, so it holds in any root
    assert (host.root / "etc/modules-load.d/vgpu.conf").read_text() == "gim\nvfio-pci\n"


def test_the_units_command_reapplies_the_recorded_profile_after_a_reboot(sim):
    host, text = _installed_unit(sim)
    exec_start = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_start)
    assert os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK)
    host.kernel.unload_module("gim")  # the reboot: VFs gone, gim back from modules-load.d with gim_config
    host.kernel.load_module("gim")
    run_cli("status", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=1)
    env = dict(os.environ, PYTHONPATH=str(REPO), VGPU_SIM_DIR=str(host.state_dir))
    proc = subprocess.run([*argv, "--simulate", "--sim-dir", str(host.state_dir)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "verified" in proc.stdout
    run_cli("status", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=0)
