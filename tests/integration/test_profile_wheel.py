"""The shipped profiles travel inside the built package and load from it through importlib.resources."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

CHECK = """
import vgpu, vgpu.profiles as p
from pathlib import Path
assert Path(vgpu.__file__).resolve().parent == Path(__import__("sys").argv[1]).resolve() / "vgpu", vgpu.__file__
folder = p.shipped_dir()
assert not Path(str(folder)).is_symlink()
print(" ".join(x.name for x in p.list_profiles()))
"""


def test_built_package_carries_the_profiles_and_loads_them(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "vgpu", src / "vgpu", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "profiles", src / "profiles")
    build = tmp_path / "build"
    # build_py is the step of bdist_wheel that lays out packages and package-data.
    subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py",
                    "--build-lib", str(build)], cwd=src, check=True, capture_output=True)
    shipped = sorted(p.name for p in (build / "vgpu" / "shipped_profiles").iterdir())
    assert shipped == sorted(p.name for p in (REPO / "profiles").glob("*.yaml"))
    assert (build / "vgpu" / "schemas" / "profile-v1.json").is_file()
    out = subprocess.run([sys.executable, "-c", CHECK, str(build)], env={"PYTHONPATH": str(build)}, cwd=tmp_path,
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == [p.stem for p in sorted((REPO / "profiles").glob("*.yaml"))]
