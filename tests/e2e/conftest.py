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


def no_gim_spec(machine: str) -> str:
    """``machine`` with gim not installed: the host a whole-GPU passthrough profile starts from."""
    import yaml
    from vgpu.sim import load_spec
    data = load_spec(machine).model_dump(mode="json")
    data["name"] = f"{machine}-nogim"
    state = data.setdefault("state", {})
    state["modules"] = {k: v for k, v in (state.get("modules") or {}).items() if k != "gim"}
    return yaml.safe_dump(data)


def kvm_profiles() -> list[str]:
    """Every shipped profile a Linux KVM host applies (the ESXi ones are refused here, and tested so) on a GPU the
    simulator can build: MI350P's PCI ids have no public source (docs/hardware.md §1), so no machine has one and
    mi350p-1vf is tested by what it says on other hosts (test_provision_sim)."""
    from vgpu.catalog import DEFAULT
    from vgpu.profiles import load_profile, shipped_names
    named = [(n, load_profile(n)) for n in shipped_names()]
    return [n for n, p in named if p.hypervisor.value == "kvm" and DEFAULT.by_name(p.gpu.model).pf_ids]


# The fault matrix (a failure or a kill at every step boundary) costs one simulated host per step, so it runs on a
# cover of the shipped KVM profiles rather than all of them: every kind of step on each GPU architecture (gfx942,
# gfx950: their partition and VF rules differ) in each mode. The steps of, say, mi355x-1vf and mi350x-8vf differ
# in their values, not in the code that applies and rolls them back. Every profile still provisions, verifies and
# re-plans in test_provision_sim, and test_faults_sim.test_the_fault_profiles_cover_every_step_kind_on_every_arch
# fails when a new step kind, architecture or mode is not reached by this list.
FAULT_PROFILES = ["mi300x-4vf", "mi300x-passthrough", "mi355x-2vf", "mi355x-passthrough"]


def plan_features(name: str, tmp_root: Path) -> set[tuple]:
    """What the fault matrix must reach in ``name``'s plan: its step kinds, per architecture and mode."""
    from vgpu.catalog import DEFAULT
    from vgpu.profiles import load_profile
    from vgpu.provision import plan_profile
    profile = load_profile(name)
    host = SimHost.create(tmp_root / name, machine=machine_for(name, tmp_root))
    kinds = {type(s).__name__ for s in plan_profile(host.target(), profile).plan.steps}
    arch = DEFAULT.by_name(profile.gpu.model).arch
    return {(arch, profile.gpu.mode.value)} | {(arch, k) for k in kinds}


def machine_for(profile_name: str, tmp_path: Path) -> str:
    """The shipped simulated machine a profile fits: 8x<model>, without gim for passthrough."""
    from vgpu.profiles import load_profile
    profile = load_profile(profile_name)
    machine = f"8x{profile.gpu.model.lower()}"
    if profile.gpu.mode.value != "passthrough":
        return machine
    spec = tmp_path / f"{machine}-nogim.yaml"
    spec.write_text(no_gim_spec(machine))
    return str(spec)


def plan_from_snapshot(tmp_path: Path, machine: str, profile: str) -> subprocess.CompletedProcess:
    """`vgpu plan --json` of ``profile`` against a `vgpu host snapshot` of a fresh simulated ``machine``."""
    from vgpu.sim.host import SimHost

    sim_dir, snap = tmp_path / "sim", tmp_path / "snap.tar.gz"
    SimHost.create(sim_dir, machine)
    run_cli("host", "snapshot", "--simulate", machine, "--sim-dir", str(sim_dir), "--output", str(snap),
            sim_dir=sim_dir, check_rc=0)
    return run_cli("plan", "--profile", profile, "--snapshot", str(snap), "--json", sim_dir=sim_dir)


def hypervisor_of(host):
    """The simulated host's libvirt (the real test:/// driver), where tests define and start VMs."""
    from vgpu.hypervisor.sim import SimHypervisor
    from vgpu.vms import sim_hypervisor_dir
    return SimHypervisor(sim_hypervisor_dir(host.root))


def target_of(host) -> HostTarget:
    return host.target()


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
