"""Hostile inputs: each case builds its input, runs the real CLI, and checks the exit code, the one
error line, and that nothing outside the target changed (trees hashed before and after)."""

from __future__ import annotations

import hashlib
import os
import stat
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadsafe import HANG, burn_session, cpu_burners, signalled, wait_until  # noqa: E402,F401  (fixtures; no sleeps)

REPO = Path(__file__).resolve().parents[2]


def tree_digest(root: Path) -> dict[str, str]:
    """path -> kind and content hash (or link target / mode) of everything below ``root``, without
    following symlinks and without opening FIFOs or devices. Equal digests: nothing changed."""
    root = Path(root)
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    todo = [root]
    while todo:
        path = todo.pop()
        st = os.lstat(path)
        rel = os.path.relpath(path, root)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = f"link {os.readlink(path)}"
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = f"dir {mode:o}"
            todo.extend(Path(path) / n for n in os.listdir(path))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = f"file {mode:o} {hashlib.sha256(Path(path).read_bytes()).hexdigest()}"
        else:
            out[rel] = f"special {st.st_mode:o} {st.st_rdev}"
    return out


class Watch:
    """Hash a set of trees now; ``unchanged()`` asserts they are identical later."""

    def __init__(self, *roots: Path):
        self.roots = [Path(r) for r in roots]
        self.before = [tree_digest(r) for r in self.roots]

    def unchanged(self) -> None:
        for root, before in zip(self.roots, self.before):
            after = tree_digest(root)
            if after != before:
                added = sorted(set(after) - set(before))[:10]
                removed = sorted(set(before) - set(after))[:10]
                changed = sorted(k for k in set(after) & set(before) if after[k] != before[k])[:10]
                pytest.fail(f"{root} changed: added {added} removed {removed} changed {changed}")


def vgpu(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = HANG,
         input: str | None = None) -> subprocess.CompletedProcess:
    """The real ``vgpu`` entry point in its own process, as an operator runs it."""
    base = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", COLUMNS="200")
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "vgpu", *args], capture_output=True, text=True,
                          env=base, cwd=cwd or REPO, timeout=timeout, input=input)


def assert_refused(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """Exit ``code``, an ``error:`` line on stderr containing each needle, no traceback."""
    err = proc.stderr
    assert proc.returncode == code, (proc.returncode, proc.stdout[-1500:], err[-1500:])
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle.lower() in lines[0].lower(), (needle, lines[0])
    return lines[0]


def special_file(path: Path, how: str, cap: int) -> bool:
    """Make ``path`` the non-regular or oversized file ``how`` (fifo, dev-zero: a link to /dev/zero,
    directory, over-cap: sparse, one byte over ``cap``); False for any other ``how``."""
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    elif how == "directory":
        path.mkdir()
    elif how == "over-cap":
        with open(path, "wb") as fh:  # sparse: costs no disk
            fh.truncate(cap + 1)
    else:
        return False
    return True


def two_gpu_spec(name: str, description: str, *, first_vf_limit: int | None = None) -> str:
    """A small machine spec (2 x MI300X on two NUMA nodes) whose plan still has every step kind: the
    tiers that run a provision many times use it to stay fast. ``first_vf_limit``: the VF count the
    first GPU's firmware allows (gim refuses more)."""
    limit = f", vf_limit: {first_vf_limit}" if first_vf_limit is not None else ""
    return f"""\
version: v1
name: {name}
description: {description}
functions:
  - {{address: "0000:05:00.0", kind: gpu, model: MI300X, numa_node: 0, sriov: {{total_vfs: 8{limit}}},
     path: ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0"]}}
  - {{address: "0000:85:00.0", kind: gpu, model: MI300X, numa_node: 1, sriov: {{total_vfs: 8}},
     path: ["0000:80:01.1", "0000:81:00.0", "0000:82:00.0"]}}
state:
  iommu: true
  cmdline: "BOOT_IMAGE=/boot/vmlinuz-6.8.0-sim ro iommu=pt modprobe.blacklist=amdgpu"
  modules:
    gim: {{}}
    vfio_pci: {{}}
  module_versions: {{gim: "8.4.0.K"}}
  hugepages: {{2048: 0, 1048576: 0}}
"""


def planned_sim(factory, name: str, *, profile: str = "mi300x-4vf", machine: Path | None = None) -> Path:
    """A simulated host built once per module by the real CLI (a plan run, or `sim reset --machine`)."""
    root = factory.mktemp(name)
    if machine is None:
        proc = vgpu("plan", "--profile", profile, "--simulate", "--sim-dir", str(root / "sim"))
        assert proc.returncode == 3, proc.stderr
    else:
        proc = vgpu("sim", "reset", "--machine", str(machine), "--sim-dir", str(root / "sim"))
        assert proc.returncode == 0, proc.stderr
    return root / "sim"


def copy_sim(base: Path, tmp_path: Path) -> Path:
    """This case's own copy of a module's simulated host."""
    copy = tmp_path / "sim"
    shutil.copytree(base, copy, symlinks=True)
    return copy


@pytest.fixture
def watch():
    return Watch


# --- running as user nobody (non-root cases) ------------------------------------------------------------
# The interpreter must be one nobody can execute: the venv's python may live under root's home (pyenv),
# so Debian's python3 of the same minor version runs the repository and the venv's site-packages.
# VGPU_REQUIRE_NONROOT=1 (make test-hostile) turns 'cannot run as nobody here' into a failure.

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
                          capture_output=True, text=True, cwd="/", timeout=600)


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
