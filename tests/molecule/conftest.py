"""Shared by the Molecule tier's tests: the environment (root, tools, the cached Debian root), one run at a time,
and what a run must not leave behind."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
REQUIRE = os.environ.get("VGPU_REQUIRE_MOLECULE") == "1"


def _unavailable(why: str):
    if REQUIRE:
        pytest.fail(f"{why} (VGPU_REQUIRE_MOLECULE=1 makes this a failure)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def molecule_env(tmp_path_factory) -> dict:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        _unavailable("Molecule hosts need root on Linux (network namespaces, overlayfs, systemd-nspawn)")
    for tool in ("systemd-nspawn", "ip", "apt-ftparchive", "dpkg-deb", "gpg", "ssh-keygen"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (make test-molecule installs it)")
    if not (VENV_BIN / "molecule").exists():
        _unavailable(f"{VENV_BIN}/molecule is missing: pip install -e '.[test]'")
    if "overlay" not in Path("/proc/filesystems").read_text():
        _unavailable("the kernel has no overlayfs")
    build = subprocess.run([str(REPO / "tools" / "molecule" / "build-root.sh")], capture_output=True, text=True,
                           timeout=1200)
    if build.returncode == 3:
        _unavailable(build.stderr.strip().splitlines()[-1])
    assert build.returncode == 0, build.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    env.update(PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}", NO_COLOR="1", ANSIBLE_NOCOLOR="1",
               ANSIBLE_HOME=str(tmp_path_factory.mktemp("ansible-home")))
    return env


def _leftovers(run_dir: Path) -> list[str]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = [p.name for p in Path("/sys/class/net").glob("vmol*")] + \
        [p.name for p in Path("/sys/class/net").glob("vgpumol0")]
    mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()
              if ln.split()[1].startswith(str(run_dir) + "/")]
    return [n for n in netns if n.startswith("vgpumol-")] + links + mounts


@pytest.fixture()
def molecule_lock():
    """One Molecule run at a time on this machine: every run uses the same bridge, addresses and port."""
    with open("/run/lock/vgpu-molecule.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # a second run waits here instead of failing in `create`
        yield

