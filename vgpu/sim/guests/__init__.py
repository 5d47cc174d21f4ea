"""Simulated ROCm guests: a guest root folder plus stand-in tools that replay captured outputs.

``sim_guest_env(workdir, scenario=...)`` builds, under ``workdir``:

- ``root/``: the guest's /sys (PCI functions with vendor, device, class, driver links; loaded
  modules), /proc/sys/kernel/osrelease, /opt/rocm/.info/version, /etc/hostname;
- ``bin/``: stand-in tools (rocminfo, amd-smi, hipcc, hipblaslt-bench, dkms, lspci) replaying the
  scenario's files (vgpu/sim/guests/replay/<scenario>/, real captures from tests/fixtures with
  their provenance line, or ``replay_dir``), a stand-in python for the torch FP8 path, and python3;
- ``calls.jsonl``: every stand-in call, for tests.

It returns the environment that makes the production agent, run locally or over SSH on loopback
(same filesystem), see that guest: PATH (stand-ins first), VGPU_AGENT_ROOT and
VGPU_AGENT_TORCH_PYTHON. The agent code is exactly the production agent.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from vgpu.errors import InputError
from vgpu.inputs import load_json
from vgpu.guest.agent.guest import ROOT_ENV, TORCH_PYTHON_ENV

REPLAY_ROOT = Path(__file__).resolve().parent / "replay"
SCENARIOS: tuple[str, ...] = ("healthy", "slow", "throttling", "no-rocm", "missing-tools", "wrong-partition")
# What every scenario's guest is meant to be: expectations for the demo are built from this
# (vgpu.guest.expect.build_expectation(**SIM_TARGET)); "wrong-partition" deliberately differs.
SIM_TARGET = {"model": "MI300X", "compute": "SPX", "memory": "NPS1", "is_vf": True}
TORCH_STANDIN = "vgpu-sim-torch-python"
_TOOL_SCRIPT = ("#!/usr/bin/env python3\nimport sys\nsys.path.insert(0, {bin!r})\nimport vgpu_standin\n"
                "sys.exit(vgpu_standin.main({tool!r}, {replay!r}, {log!r}))\n")


def scenario_dir(scenario: str) -> Path:
    if scenario not in SCENARIOS:
        raise InputError(f"unknown simulated guest scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    return REPLAY_ROOT / scenario


def load_guest(replay_dir: Path, scenario: str) -> dict:
    """The guest description: ``replay_dir/guest.json`` if present, else the scenario's."""
    for path in (replay_dir / "guest.json", scenario_dir(scenario) / "guest.json"):
        if os.path.lexists(path):  # through vgpu.inputs: --replay-dir is the user's directory
            data = load_json(path, "replay file")
            if not isinstance(data, dict):
                raise InputError(f"replay file {path} is not a simulated guest description (a JSON object)")
            return data
    raise InputError(f"no guest.json in {replay_dir} or in scenario {scenario}")


def sim_guest_env(workdir: Path, *, replay_dir: Path | None = None, scenario: str = "healthy",
                  hostname: str | None = None) -> dict[str, str]:
    """Build a simulated guest under ``workdir`` and return the environment variables that select it.

    Raises InputError for an unknown scenario or a replay folder that does not exist.
    """
    workdir = Path(workdir).resolve()
    replay = Path(replay_dir).resolve() if replay_dir is not None else scenario_dir(scenario)
    if not replay.is_dir():
        raise InputError(f"replay folder {replay} does not exist", hint="pass a folder of captured outputs")
    guest = load_guest(replay, scenario)
    root, bin_dir = workdir / "root", workdir / "bin"
    for d in (root, bin_dir):
        if d.exists():
            shutil.rmtree(d)
    _build_root(root, guest, hostname or f"sim-{scenario}-{workdir.name}")
    log = workdir / "calls.jsonl"
    _install_tools(bin_dir, guest.get("tools", []), replay, log)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent)])
    return {"PATH": path, ROOT_ENV: str(root), TORCH_PYTHON_ENV: str(bin_dir / TORCH_STANDIN)}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _build_root(root: Path, guest: dict, hostname: str) -> None:
    """A sysfs-like tree: devices under sys/devices, links from sys/bus/pci/devices and to drivers."""
    _write(root / "etc" / "hostname", hostname + "\n")
    for name, text in guest.get("files", {}).items():
        _write(root / name.lstrip("/"), text)
    for module, version in guest.get("modules", {}).items():
        _write(root / "sys" / "module" / module / "initstate", "live\n")
        if version:
            _write(root / "sys" / "module" / module / "version", version + "\n")
    (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    for fn in guest.get("pci", []):
        dev = root / "sys" / "devices" / "pci0000:00" / fn["bdf"]
        for attr in ("vendor", "device", "class", "subsystem_vendor", "subsystem_device"):
            if fn.get(attr):
                _write(dev / attr, fn[attr] + "\n")
        (root / "sys" / "bus" / "pci" / "devices" / fn["bdf"]).symlink_to(
            os.path.relpath(dev, root / "sys" / "bus" / "pci" / "devices"))
        if fn.get("driver"):
            drv = root / "sys" / "bus" / "pci" / "drivers" / fn["driver"]
            drv.mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(os.path.relpath(drv, dev))


def _install_tools(bin_dir: Path, tools: list, replay: Path, log: Path) -> None:
    bin_dir.mkdir(parents=True)
    shutil.copyfile(Path(__file__).with_name("standin.py"), bin_dir / "vgpu_standin.py")
    # The guest's python3: this interpreter without site-packages (-S), like a bare guest python
    # (no host torch leaks in), and 10x faster to start for the many stand-in calls.
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    python.chmod(0o755)
    for tool, name in [(t, t) for t in tools] + [("fp8_torch", TORCH_STANDIN)]:
        script = bin_dir / name
        script.write_text(_TOOL_SCRIPT.format(bin=str(bin_dir), tool=tool, replay=str(replay), log=str(log)))
        script.chmod(0o755)
