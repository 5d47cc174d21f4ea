"""What the project ships carries what its users need: vgpu's wheel holds the playbooks, the vgpu.instinct
collection and ansible.cfg (so `vgpu playbook list` works from a wheel install, with no checkout), and the
collection tarball `ansible-galaxy collection build` makes holds every role, its argument specs and the module."""
from __future__ import annotations

import os
import subprocess
import zipfile

import pytest

from conftest import COLLECTIONS_CACHE, PLAYBOOKS, REPO, VENV_BIN, build_vgpu_wheel

CONTENT = "vgpu/ansible_content"
COLLECTION = "collections/ansible_collections/vgpu/instinct"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_vgpu_wheel(tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel"))


def test_the_wheel_carries_the_playbooks_and_the_collection(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for book in PLAYBOOKS.glob("*.yml"):
        assert f"{CONTENT}/playbooks/{book.name}" in names
    roles = {p.name for p in (REPO / COLLECTION / "roles").iterdir()}
    for role in roles:
        assert f"{CONTENT}/{COLLECTION}/roles/{role}/meta/argument_specs.yml" in names
    assert {f"{CONTENT}/{COLLECTION}/plugins/modules/vgpu_provision.py", f"{CONTENT}/{COLLECTION}/galaxy.yml",
            f"{CONTENT}/ansible.cfg"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".tar.gz") or "/tests/output/" in n]


def test_vgpu_playbook_list_works_from_a_wheel_install(wheel, tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([str(VENV_BIN / "python"), "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # vgpu from the wheel's files (PYTHONPATH is searched before the venv's editable checkout), its dependencies
    # from the venv; run away from the checkout, no VGPU_ANSIBLE_DIR.
    env = {k: v for k, v in os.environ.items() if k != "VGPU_ANSIBLE_DIR"} | {"PYTHONPATH": str(site)}
    code = "import sys, vgpu, vgpu.cli; print(vgpu.__file__, file=sys.stderr); sys.exit(vgpu.cli.main())"
    proc = subprocess.run([str(VENV_BIN / "python"), "-c", code, "playbook", "list"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.startswith(str(site / "vgpu" / "__init__.py")), proc.stderr
    for book in PLAYBOOKS.glob("*.yml"):
        assert book.stem in proc.stdout, proc.stdout


def test_vgpu_playbook_runs_the_wheels_collection(wheel, tmp_path, ansible_env):
    """ansible-playbook --syntax-check through vgpu's content dir of a wheel install: the roles resolve there."""
    site = tmp_path / "site"
    subprocess.run([str(VENV_BIN / "python"), "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    content = site / CONTENT
    env = {**ansible_env, "ANSIBLE_STDOUT_CALLBACK": "default",
           "ANSIBLE_COLLECTIONS_PATH": f"{content / 'collections'}:{COLLECTIONS_CACHE.parent}"}
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check",
                           *map(str, sorted((content / "playbooks").glob("*.yml")))], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
