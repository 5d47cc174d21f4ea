"""Tier 4: build (or reuse) the Debian root, boot it once under QEMU TCG, hand the result to tests.

Skips with the reason when this machine cannot do it (not root, no QEMU with SR-IOV NVMe, no
debootstrap, mirror unreachable); VGPU_REQUIRE_REALKERNEL=1 turns those skips into failures.
Fails when the root cannot be built for another reason, the guest hangs, or it writes no result.
Artifacts (console.log, guest.log, dmesg.txt, result.json) stay in pytest's tmp directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools" / "realkernel"
CACHE = Path(os.environ.get("VGPU_REALKERNEL_CACHE", "/var/cache/vgpu-realkernel"))
BUILD_TIMEOUT = 1200  # debootstrap ~2.5 min on a fast mirror; a slow one takes longer
BOOT_TIMEOUT = float(os.environ.get("VGPU_REALKERNEL_BOOT_TIMEOUT", "600"))  # TCG run ~80 s on 2 cores
SCHEMA = "vgpu-realkernel/1"


def _load_boot_module():
    spec = importlib.util.spec_from_file_location("vgpu_realkernel_boot", TOOLS / "boot.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


boot_tool = _load_boot_module()


def _unavailable(reason: str):
    if os.environ.get("VGPU_REQUIRE_REALKERNEL") == "1":
        pytest.fail(f"realkernel required but unavailable: {reason}")
    pytest.skip(f"realkernel: {reason}")


def _build_root() -> Path:
    try:
        proc = subprocess.run([str(TOOLS / "build-root.sh"), str(CACHE)], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        _unavailable(f"building the root took over {BUILD_TIMEOUT}s (slow mirror?); see {CACHE}/build.log")
    if proc.returncode == 3:
        _unavailable(proc.stderr.strip().splitlines()[-1].removeprefix("realkernel: "))
    if proc.returncode != 0:
        pytest.fail(f"build-root.sh failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def guest_result(tmp_path_factory) -> dict:
    """Boot the guest once per session; returns result.json with ``_out`` pointing at the artifacts."""
    reuse = os.environ.get("VGPU_REALKERNEL_REUSE")
    if reuse:  # check the artifacts of an earlier run (boot.py --out DIR) without booting again
        return _load_result(Path(reuse), seconds=None)
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        _unavailable("needs root on Linux (debootstrap, 9p passthrough of a root-owned tree)")
    try:
        boot_tool.check_qemu()
    except boot_tool.Unavailable as exc:
        _unavailable(str(exc))
    root = _build_root()
    out = tmp_path_factory.mktemp("realkernel")
    run = boot_tool.boot(root, out, timeout=BOOT_TIMEOUT)
    if run.returncode is None or not (out / "result.json").exists():
        what = "timed out" if run.returncode is None else f"exited {run.returncode} without a result"
        pytest.fail(f"guest {what} after {run.seconds}s; artifacts in {out}\n"
                    f"--- guest.log\n{boot_tool.tail(out / 'guest.log')}\n"
                    f"--- console.log\n{boot_tool.tail(out / 'console.log')}\n"
                    f"--- qemu.log\n{boot_tool.tail(out / 'qemu.log')}")
    print(f"\nrealkernel: guest ran {run.seconds}s, artifacts in {out}")
    return _load_result(out, seconds=run.seconds)


def _load_result(out: Path, seconds: float | None) -> dict:
    result = out / "result.json"
    try:
        doc = json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        pytest.fail(f"cannot read the guest's result {result}: {exc}")
    assert doc.get("schema") == SCHEMA, f"unexpected result schema {doc.get('schema')!r} in {result}"
    doc["_out"] = str(out)
    doc["_seconds"] = seconds
    return doc


def step(doc: dict, name: str) -> dict:
    """What the named guest step observed; fails the test with the guest's error if it failed."""
    for record in doc["steps"]:
        if record["name"] == name:
            if not record["ok"]:
                pytest.fail(f"guest step {name} failed: {record['error']}\n{record.get('traceback', '')}"
                            f"\nartifacts in {doc['_out']}")
            return record["observed"]
    failed = [s for s in doc["steps"] if not s["ok"]]
    cause = f"an earlier step failed: {failed[0]['name']}: {failed[0]['error']}" if failed else "not run"
    pytest.fail(f"guest step {name} did not run ({cause}); artifacts in {doc['_out']}")


@pytest.fixture(scope="session")
def guest_step(guest_result):
    """``guest_step("bind_vfs")`` -> that step's observations (the test fails if the step failed)."""
    return lambda name: step(guest_result, name)


def _opted_in(config) -> bool:
    """Tier 4 runs when asked for: `-m realkernel`, a path under tests/realkernel, or VGPU_REALKERNEL=1.

    A bare `pytest` in the tree must not boot a VM for minutes on a shared 2-core machine.
    """
    if os.environ.get("VGPU_REALKERNEL") == "1" or os.environ.get("VGPU_REQUIRE_REALKERNEL") == "1":
        return True
    markexpr = config.getoption("markexpr") or ""
    if "realkernel" in markexpr and "not realkernel" not in markexpr:
        return True
    here = Path(__file__).resolve().parent
    for arg in config.args:
        path = Path(str(arg).split("::")[0]).resolve()
        if path == here or here in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config, items):
    if _opted_in(config):
        return
    skip = pytest.mark.skip(reason="realkernel: tier 4 boots a QEMU guest (~80 s, first run builds a root "
                                   "~2.5 min); run `make test-realkernel` or set VGPU_REALKERNEL=1")
    for item in items:
        if item.get_closest_marker("realkernel"):
            item.add_marker(skip)
