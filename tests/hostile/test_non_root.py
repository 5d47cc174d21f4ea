"""Non-root use (issue 8, section 8): the simulated flow works for any user on a simulator directory that
user owns (it failed at step 4 with "mixed state": the simulated kernel could not rewrite its own read-only
attributes), and a directory the user cannot write is one line (exit 5), not a traceback or exit 70.

The cases run the real CLI as user nobody (uid 65534) with setpriv. The interpreter must be one nobody can
execute: the venv's python may live under root's home (pyenv), so Debian's python3 of the same minor
version runs the repository and the venv's site-packages. VGPU_REQUIRE_NONROOT=1 (set by `make test`) turns
"cannot run as nobody here" from a skip into a failure.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import Watch, as_nobody, assert_refused

def test_the_whole_simulated_flow_works_as_a_normal_user(python_for_nobody, area):
    home = str(area / "nobody")
    sim = area / "nobody" / "sim"
    steps = [(("discover", "--simulate"), 0), (("plan", "--profile", "mi300x-4vf", "--simulate"), 3),
             (("provision", "--profile", "mi300x-4vf", "--yes", "--simulate"), 0),
             (("status", "--simulate"), 0), (("plan", "--profile", "mi300x-4vf", "--simulate"), 0),
             (("release", "--yes", "--simulate"), 0), (("sim", "remove"), 0)]
    for args, code in steps:
        proc = as_nobody(python_for_nobody, *args, home=home, VGPU_SIM_DIR=str(sim))
        assert proc.returncode == code, (args, proc.stdout[-800:], proc.stderr[-800:])
        assert "Traceback" not in proc.stderr
        if args[0] == "status":
            assert "in sync" in proc.stdout
    assert not sim.exists()


ROOT_OWNED = {
    "discover": ("discover", "--simulate"),
    "provision": ("provision", "--profile", "mi300x-4vf", "--yes", "--simulate"),
    "status": ("status", "--simulate"),
    "sim-reset": ("sim", "reset"),
    "sim-remove": ("sim", "remove"),
}


@pytest.fixture(scope="module")
def root_host(tmp_path_factory) -> Path:
    from vgpu.sim import SimHost
    base = tmp_path_factory.mktemp("rootsim")
    SimHost.create(base / "sim")
    return base / "sim"


@pytest.mark.parametrize("command", sorted(ROOT_OWNED))
def test_a_simulator_directory_owned_by_root_is_one_line(python_for_nobody, area, root_host, command):
    sim = area / "rootsim"
    shutil.copytree(root_host, sim, symlinks=True)
    watch = Watch(sim)
    proc = as_nobody(python_for_nobody, *ROOT_OWNED[command], "--sim-dir", str(sim), home=str(area / "nobody"))
    assert_refused(proc, 5, str(sim), "not writable by you")
    watch.unchanged()


@pytest.mark.parametrize("how", ["home-missing", "parent-not-writable"])
def test_a_simulator_directory_that_cannot_be_created_is_one_line(python_for_nobody, area, how):
    watch = Watch(area)
    if how == "home-missing":
        proc = as_nobody(python_for_nobody, "discover", "--simulate", home="/nonexistent")
        needle = "/nonexistent/.cache/vgpu/sim"
    else:
        proc = as_nobody(python_for_nobody, "discover", "--simulate", "--sim-dir", str(area / "sub" / "sim"),
                         home=str(area / "nobody"))
        needle = str(area / "sub" / "sim")
    assert_refused(proc, 5, needle, "not writable by you")
    watch.unchanged()
