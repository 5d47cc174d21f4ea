"""The zipapp: deterministic, stdlib only, runnable with ``python3 -S`` (and Python 3.8), clean exit codes."""

from __future__ import annotations

import ast
import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import vgpu
from vgpu.guest import agent as agent_pkg
from vgpu.guest.bundle import AGENT_NAME, build_agent
from vgpu.guest.expect import build_expectation
from vgpu.sim.guests import SIM_TARGET, sim_guest_env

AGENT_DIR = Path(agent_pkg.__file__).resolve().parent


def _python38() -> str | None:
    found = shutil.which("python3.8")
    if found and subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0:
        return found
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3")))
    return pyenv[0] if pyenv else None


@pytest.fixture()
def expect_file(tmp_path) -> Path:
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(build_expectation(**SIM_TARGET)))
    return path


def test_build_is_byte_for_byte_deterministic(tmp_path):
    a = build_agent(tmp_path / "a").read_bytes()
    b = build_agent(tmp_path / "b").read_bytes()
    assert a == b
    assert a.startswith(b"#!/usr/bin/env python3\n")


def test_bundle_holds_the_agent_parsers_and_hip_source_but_not_the_host_package(tmp_path):
    path = build_agent(tmp_path)
    assert path.name == AGENT_NAME and os.access(path, os.X_OK)
    names = zipfile.ZipFile(path).namelist()
    assert "__main__.py" in names and "vgpu/guest/agent/hip/vgpu_checks.hip" in names
    assert "vgpu/guest/agent/parsers/rocminfo.py" in names and "vgpu/guest/agent/fp8ref.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith("vgpu/") and not n.startswith(("vgpu/guest/agent/", "vgpu/__init__",
                                                                                "vgpu/guest/__init__"))]


def test_agent_imports_only_the_standard_library_and_itself():
    allowed = set(sys.stdlib_module_names) | {"vgpu", "torch"}  # torch only inside fp8_torch's guarded import
    for path in AGENT_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module or ""]
            else:
                continue
            for mod in mods:
                assert mod.split(".")[0] in allowed, f"{path.name} imports {mod}"
                if mod.startswith("vgpu"):
                    assert mod.startswith("vgpu.guest.agent"), f"{path.name} imports {mod}"


def test_agent_version_follows_the_package_version():
    assert agent_pkg.__version__ == vgpu.__version__


def test_bundle_runs_with_python_s_from_a_temp_dir_and_prints_one_json(tmp_path, expect_file):
    agent = build_agent(tmp_path / "dist")
    env = sim_guest_env(tmp_path / "guest", scenario="healthy")
    proc = subprocess.run(["python3", "-S", str(agent), "--expect", str(expect_file), "--skip-workloads"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one document: json.loads refuses trailing data
    assert doc["schema"] == "vgpu.agent-result/v1" and doc["agent_version"] == vgpu.__version__


@pytest.mark.skipif(_python38() is None, reason="no Python 3.8 interpreter here (pyenv 3.8 or python3.8)")
def test_bundle_runs_under_python_3_8(tmp_path, expect_file):
    agent = build_agent(tmp_path / "dist")
    env = sim_guest_env(tmp_path / "guest", scenario="healthy")
    proc = subprocess.run([_python38(), "-S", str(agent), "--expect", str(expect_file)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["bf16.hipblaslt"]["measured"] == 612.0 and checks["bf16.hipblaslt"]["expected"] == 581.0
    assert {c["status"] for c in checks.values()} == {"pass"}, checks


@pytest.mark.parametrize("content, message", [
    (None, "cannot read expectation"),
    ("{not json", "is not JSON"),
    ('{"schema": "other/v1"}', "has schema 'other/v1'"),
    ('{"schema": "vgpu.agent-expect/v1", "model": "MI300X"}', "lacks arch"),
    ('{"schema": "vgpu.agent-expect/v1", "model": "MI300X", "arch": "gfx942", "vendor_id": "0x1002", '
     '"device_ids": "0x74b5", "fp8": {}, "thresholds": {}, "rocm": "7.0"}', "device_ids must be a non-empty list"),
    ('{"schema": "vgpu.agent-expect/v1", "model": "MI300X", "arch": "gfx942", "vendor_id": "AMD", '
     '"device_ids": ["0x74b5"], "fp8": {}, "thresholds": {}, "rocm": "7.0"}', "vendor_id 'AMD' is not a hex id"),
])
def test_bad_expectation_exits_2_with_one_line_and_no_stdout(tmp_path, content, message):
    agent = build_agent(tmp_path)
    expect = tmp_path / "e.json"
    if content is not None:
        expect.write_text(content)
    proc = subprocess.run([sys.executable, "-S", str(agent), "--expect", str(expect)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_uncreatable_workdir_exits_2(tmp_path, expect_file):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, str(build_agent(tmp_path / "d")), "--expect", str(expect_file),
                           "--workdir", str(blocker / "sub")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stdout == "" and "cannot create work folder" in proc.stderr


def test_unknown_option_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, str(build_agent(tmp_path)), "--bogus"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stdout == ""


PY38_FILES = sorted(AGENT_DIR.rglob("*.py")) + [AGENT_DIR.parents[1] / "sim" / "guests" / "standin.py"]


@pytest.mark.parametrize("path", PY38_FILES, ids=lambda p: p.name)
def test_agent_module_is_python38_syntax(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 8))


def test_vermin_finds_nothing_newer_than_python38_in_the_agent():
    pytest.importorskip("vermin")
    code = "import sys, vermin; sys.argv = ['vermin'] + sys.argv[1:]; sys.exit(vermin.main())"
    run = subprocess.run([sys.executable, "-c", code, "-t=3.8-", "--no-tips", "--violations", "-q",
                          *map(str, PY38_FILES)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
