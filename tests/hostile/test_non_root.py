"""Non-root use (issue 8, section 8): the simulated flow works for any user on a simulator directory that
user owns (it failed at step 4 with "mixed state": the simulated kernel could not rewrite its own read-only
attributes), and a directory the user cannot write is one line (exit 5), not a traceback or exit 70.

The cases run the real CLI as user nobody (uid 65534) with setpriv. The interpreter must be one nobody can
execute: the venv's python may live under root's home (pyenv), so Debian's python3 of the same minor
version runs the repository and the venv's site-packages. VGPU_REQUIRE_NONROOT=1 (set by `make test`) turns
"cannot run as nobody here" from a skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from .conftest import REPO, Watch, assert_refused

NOBODY = 65534


def _candidates() -> list[str]:
    out = [os.path.realpath(sys.executable)]
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3"):
        for folder in ("/usr/bin", "/usr/local/bin"):
            if os.path.exists(os.path.join(folder, name)):
                out.append(os.path.join(folder, name))
    return out


def _env(home: str, **extra: str) -> list[str]:
    path = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    pairs = {"HOME": home, "PYTHONPATH": path, "NO_COLOR": "1", "COLUMNS": "200", "PATH": "/usr/bin:/bin", **extra}
    return [f"{k}={v}" for k, v in pairs.items()]


@pytest.fixture(scope="module")
def python_for_nobody() -> str:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to switch to user nobody")
    for python in _candidates():
        probe = subprocess.run(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "env",
                                *_env("/"), python, "-c", "import vgpu.cli, pydantic, click"],
                               capture_output=True, text=True, cwd="/")
        if probe.returncode == 0:
            return python
    message = "no python that user nobody can run with vgpu's dependencies"
    if os.environ.get("VGPU_REQUIRE_NONROOT") == "1":
        pytest.fail(message)
    pytest.skip(message)


def as_nobody(python: str, *args: str, home: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "env",
                           *_env(home, **env), python, "-m", "vgpu", *args],
                          capture_output=True, text=True, cwd="/", timeout=120)


@pytest.fixture
def area(tmp_path) -> Path:
    """A directory nobody can reach: the pytest tree above it is root's 0700."""
    base = Path(tmp_path)
    for parent in [base, *base.parents]:
        if parent == Path("/tmp") or parent == Path("/"):
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o711)
    own = base / "nobody"
    own.mkdir()
    os.chown(own, NOBODY, NOBODY)
    return base


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
