"""The host amd-smi (GIM build) as a second source of truth, through the real CLI on simulated hosts whose
machine spec installs it (state.amdsmi): a 1-VF firmware refuses a multi-VF profile before any reload;
without amd-smi the plan says what it could not check."""

from __future__ import annotations

import json

import yaml

from conftest import run_cli, plan_from_snapshot

from vgpu.sim import SimHost, load_spec


def spec(tmp_path, *, amdsmi: bool, vbios: str | None = None) -> str:
    data = load_spec("8xmi300x").model_dump(mode="json", exclude_none=True)
    data["name"] = f"8xmi300x-smi{int(amdsmi)}{'-1vf' if vbios else ''}"
    data["state"]["amdsmi"] = amdsmi
    if vbios:
        data["functions"][1]["vbios"] = vbios  # 0000:26:00.0
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def plan(tmp_path, machine: str, profile: str):
    sim_dir = tmp_path / "sim"
    return run_cli("plan", "--profile", profile, "--json", "--simulate", machine, "--sim-dir", str(sim_dir),
                   sim_dir=sim_dir)


def test_a_1vf_firmware_refuses_a_multi_vf_profile_before_any_reload(tmp_path):
    machine = spec(tmp_path, amdsmi=True, vbios="AMD MI300X_HW_SRIOV_CVS_1VF")
    proc = plan(tmp_path, machine, "mi300x-8vf")
    assert proc.returncode == 4, proc.stderr
    problem, = json.loads(proc.stdout)["problems"]
    assert problem["subject"] == "0000:26:00.0 (MI300X)"
    assert problem["message"] == ("its firmware 'AMD MI300X_HW_SRIOV_CVS_1VF' (amd-smi static --ifwi) is a 1-VF "
                                  "build, so GIM would refuse 8 VFs at load")
    host = SimHost.open(tmp_path / "sim")
    before = host.state.generation
    prov = run_cli("provision", "--profile", "mi300x-8vf", "--yes", "--simulate", machine, "--sim-dir",
                   str(tmp_path / "sim"), sim_dir=tmp_path / "sim")
    assert prov.returncode == 4 and host.state.generation == before  # refused, gim never reloaded
    assert plan(tmp_path, machine, "mi300x-1vf").returncode == 3  # 1 VF is what that firmware does


def test_multi_vf_firmware_plans_and_amdsmi_agrees_with_sysfs(tmp_path):
    proc = plan(tmp_path, spec(tmp_path, amdsmi=True), "mi300x-8vf")
    assert proc.returncode == 3, proc.stderr
    assert not [w for w in json.loads(proc.stdout)["warnings"] if "amd-smi" in w]


def test_without_amdsmi_a_multi_vf_plan_says_the_firmware_was_not_checked(tmp_path):
    proc = plan(tmp_path, spec(tmp_path, amdsmi=False), "mi300x-8vf")
    assert proc.returncode == 3
    assert "amd-smi (GIM build) is not installed on this host: the GPUs' firmware (a 1-VF or a multi-VF build) " \
           "was not checked, only their TotalVFs" in json.loads(proc.stdout)["warnings"]
    one = plan(tmp_path, spec(tmp_path, amdsmi=False), "mi300x-1vf")
    assert not [w for w in json.loads(one.stdout)["warnings"] if "amd-smi" in w]  # 1 VF: nothing to check


def test_a_snapshot_says_its_amdsmi_could_not_be_asked(tmp_path):
    proc = plan_from_snapshot(tmp_path, "8xmi355x", "mi355x-8vf")
    assert any("is a capture: its amd-smi could not be asked" in w for w in json.loads(proc.stdout)["warnings"])
