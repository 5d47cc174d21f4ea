"""The capability matrix through the real CLI on simulated hosts (docs/hardware.md §9): the plan names the
row it used (text and --json), refuses an unsupported combination in one sentence, warns for firmware-gated
modes, plans an unknown newer GIM with the newest rows; `provision` applies an allowed multi-VF MI355X mode."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_cli, plan_from_snapshot

from vgpu.sim import SimHost, load_spec


def machine(tmp_path, base: str, *, gim: str | None = None, os_id: str | None = None, version: str | None = None,
            kernel: str | None = None) -> str:
    """``base`` with another GIM version, host OS or kernel: a spec file path."""
    data = load_spec(base).model_dump(mode="json", exclude_none=True)
    data["name"] = f"{base}-{gim or 'g'}-{os_id or 'o'}{version or ''}-{(kernel or 'k').split('-')[0]}".lower()
    state = data["state"]
    if gim:
        state["module_versions"]["gim"] = gim
    if os_id:
        state["os_release"] = {"id": os_id, "version_id": version}
    if kernel:
        state["kernel_release"] = kernel
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def plan(tmp_path, spec: str, profile: str, *extra: str):
    sim_dir = tmp_path / "sim"
    return run_cli("plan", "--profile", profile, "--simulate", spec, "--sim-dir", str(sim_dir), *extra,
                   sim_dir=sim_dir)


def test_mi355x_8vf_plans_firmware_gated_on_the_shipped_8xmi355x_and_names_the_row(tmp_path):
    proc = plan(tmp_path, "8xmi355x", "mi355x-8vf", "--json")
    assert proc.returncode == 3, proc.stderr
    data = json.loads(proc.stdout)
    assert data["matrix"]["level"] == "firmware-gated"
    assert data["matrix"]["row"]["gim"] == "9.4.0.K" and data["matrix"]["row"]["host"] == {
        "os": "ubuntu", "version": "24.04", "kernel": "6.14"}
    assert data["matrix"]["host"] == {"gim": "9.4.0.K", "os": "ubuntu", "version": "24.04",
                                      "kernel": "6.14.0-27-generic"}
    assert any("firmware-gated" in w and "GIM 9.4.0.K / ubuntu 24.04 (kernel 6.14) / MI355X" in w
               for w in data["warnings"])
    gim_config = next(s for s in data["steps"] if s["kind"] == "write-file" and s["path"] == "gim_config")
    assert "memory_partition_mode=2\n" in gim_config["content"]  # NPS2, as 9.1.0.K lists it
    text = plan(tmp_path, "8xmi355x", "mi355x-8vf")
    assert "capability matrix: row GIM 9.4.0.K / ubuntu 24.04 (kernel 6.14) / MI355X, level firmware-gated" \
        in " ".join(text.stdout.split())


def test_mi355x_8vf_provisions_cpx_nps2_on_8xmi355x(tmp_path):
    sim_dir = tmp_path / "sim"
    SimHost.create(sim_dir, "8xmi355x")
    run_cli("provision", "--profile", "mi355x-8vf", "--yes", "--simulate", "8xmi355x", "--sim-dir", str(sim_dir),
            sim_dir=sim_dir, check_rc=0)
    host = SimHost.open(sim_dir)
    pf = host.state.functions["0000:05:00.0"]
    assert (pf.compute_partition, pf.memory_partition, pf.sriov.num_vfs) == ("CPX", "NPS2", 8)


def test_mi300x_8vf_is_refused_on_ubuntu_2604_in_one_sentence_with_what_works(tmp_path):
    spec = machine(tmp_path, "8xmi300x", gim="9.3.0.K", os_id="ubuntu", version="26.04", kernel="7.0.0-12-generic")
    proc = plan(tmp_path, spec, "mi300x-8vf", "--json")
    assert proc.returncode == 4, proc.stderr
    problem, = json.loads(proc.stdout)["problems"]
    assert problem["subject"] == "host (ubuntu 26.04 (kernel 7.0.0-12-generic), GIM 9.3.0.K)"
    assert problem["message"].startswith("8 VFs CPX/NPS4 on MI300X is not allowed by matrix row GIM 9.3.0.K / "
                                         "ubuntu 26.04 (kernel 7.0) / MI300X, which allows only 1 VF SPX/NPS1")
    assert "ubuntu 24.04 (kernel 6.14)" in problem["fix"]
    assert plan(tmp_path, spec, "mi300x-1vf").returncode == 3  # what the row allows plans


@pytest.mark.parametrize("os_id, version, kernel", [("ubuntu", "22.04", "6.8.0-79-generic"),
                                                    ("ubuntu", "24.04", "6.14.0-27-generic"),
                                                    ("rhel", "9.4", "5.14.0-427.13.1.el9_4.x86_64")])
def test_mi300x_8vf_plans_cpx_nps4_on_the_hosts_the_matrix_allows(tmp_path, os_id, version, kernel):
    spec = machine(tmp_path, "8xmi300x", gim="9.1.0.K", os_id=os_id, version=version, kernel=kernel)
    proc = plan(tmp_path, spec, "mi300x-8vf", "--json")
    assert proc.returncode == 3, proc.stderr
    data = json.loads(proc.stdout)
    assert data["matrix"]["level"] == "firmware-gated" and data["matrix"]["row"]["host"]["os"] == os_id
    assert "memory_partition_mode=4\n" in next(s["content"] for s in data["steps"] if s.get("path") == "gim_config")


def test_an_unknown_newer_gim_plans_with_the_newest_rows_and_a_warning(tmp_path):
    spec = machine(tmp_path, "8xmi355x", gim="9.9.0.K")
    proc = plan(tmp_path, spec, "mi355x-2vf", "--json")
    assert proc.returncode == 3, proc.stderr
    data = json.loads(proc.stdout)
    assert data["matrix"]["row"]["gim"] == "9.4.0.K"
    assert any("GIM 9.9.0.K is not in vgpu's capability matrix" in w for w in data["warnings"])


def test_the_demo_machine_plans_mi300x_4vf_with_a_not_in_amds_matrix_warning(tmp_path):
    proc = plan(tmp_path, "8xmi300x", "mi300x-4vf", "--json")
    assert proc.returncode == 3, proc.stderr
    data = json.loads(proc.stdout)
    assert data["matrix"]["level"] == "unlisted"
    assert any("not in AMD's validated matrix: row GIM 8.4.0.K / ubuntu 22.04 / MI300X" in w
               for w in data["warnings"])


def test_mi355x_multi_vf_on_the_24_04_ga_kernel_is_refused_naming_the_kernel(tmp_path):
    spec = machine(tmp_path, "8xmi355x", kernel="6.8.0-79-generic")
    proc = plan(tmp_path, spec, "mi355x-8vf")
    assert proc.returncode == 4
    assert "only with kernel 6.14, and this host runs 6.8.0-79-generic" in " ".join(proc.stderr.split())
    assert "boot a 6.14 kernel and plan again" in " ".join(proc.stderr.split())


def test_a_snapshot_carries_os_release_and_kernel_release_into_the_plan(tmp_path):
    proc = plan_from_snapshot(tmp_path, "8xmi355x", "mi355x-8vf")
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["matrix"]["host"] == {"gim": "9.4.0.K", "os": "ubuntu", "version": "24.04",
                                                         "kernel": "6.14.0-27-generic"}
