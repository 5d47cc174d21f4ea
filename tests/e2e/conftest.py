"""End-to-end on simulated hosts: the production CLI and services against vgpu.sim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu.host.discovery import discover
from vgpu.host.paths import HostPaths
from vgpu.host.target import HostTarget
from vgpu.sim import SimHost

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sim(tmp_path):
    """A fresh simulated host factory: sim("8xmi300x") -> SimHost."""
    def make(machine="8xmi300x", name="sim"):
        return SimHost.create(tmp_path / name, machine=machine)
    return make


def target_of(host) -> HostTarget:
    return HostTarget(HostPaths.under(host.root, label=f"simulated {host.machine.name}"), sim=host)


def inventory(host):
    return discover(HostPaths.under(host.root), source="sysfs")


def run_cli(*args, sim_dir: Path, env_extra: dict | None = None, check_rc: int | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real `vgpu` entry point in a subprocess (its own process, as an operator would)."""
    env = dict(os.environ, VGPU_SIM_DIR=str(sim_dir), PYTHONPATH=str(REPO), NO_COLOR="1", COLUMNS="200")
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-m", "vgpu", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc
