"""GIM refuses a configuration: the provision error quotes GIM's kernel-log reason in the plan's terms
(issue 9), and the host is rolled back.

The simulated host's firmware allows fewer VFs (``sriov.vf_limit``) than its SR-IOV capability
advertises (TotalVFs 8), so the planner accepts vf_num 4 and GIM, at load, refuses it exactly as
on a real host: it loads, leaves the PFs without VFs and writes
"gim error libgv: [0:5:0:0][amdgv_parse_config_opt:1020] VF number 4 to be enabled exceeds the vf limit 1."
"""

from __future__ import annotations

import yaml

from conftest import inventory, run_cli

from vgpu.sim import SimHost, load_spec


def limited_firmware_spec(tmp_path, vf_limit: int, gpus: int = 8) -> str:
    """8xmi300x whose first ``gpus`` GPUs' firmware allows only ``vf_limit`` VFs (TotalVFs stays 8)."""
    data = load_spec("8xmi300x").model_dump(mode="json", exclude_none=True)
    data["name"] = f"8xmi300x-vflimit{vf_limit}"
    limited = [f for f in data["functions"] if f.get("kind") == "gpu"][:gpus]
    for function in limited:
        function["sriov"]["vf_limit"] = vf_limit
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def etc_files(host: SimHost) -> dict[str, str]:
    etc = host.root / "etc"
    return {str(p.relative_to(etc)): p.read_text() for p in sorted(etc.rglob("*")) if p.is_file()}


def provision(host: SimHost, profile: str = "mi300x-4vf"):
    return run_cli("provision", "--profile", profile, "--yes", "--simulate", "--sim-dir", str(host.state_dir),
                   "--vf-timeout", "0.3", sim_dir=host.state_dir)


def error_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def test_gim_refusing_vf_num_is_explained_in_plan_terms_and_rolled_back(tmp_path):
    host = SimHost.create(tmp_path / "host", machine=limited_firmware_spec(tmp_path, vf_limit=1))
    before, files = inventory(host), etc_files(host)
    proc = provision(host)
    assert proc.returncode == 8, proc.stderr  # APPLY_FAILED: steps were rolled back
    (line,) = error_lines(proc)
    assert "reload gim with vf_num=4" in line and "gim did not create 4 VF(s) on 0000:05:00.0" in line
    # GIM's own reason, with the PF and the vf_num the plan gave it
    assert ("gim's kernel log: 0000:05:00.0 and 7 more GPU(s) (vf_num 4 in the plan): "
            "VF number 4 to be enabled exceeds the vf limit 1") in line
    assert "rolled back" in line and "Traceback" not in proc.stderr
    assert "dmesg | grep gim" in proc.stderr  # the hint
    assert inventory(host).gpus == before.gpus and etc_files(host) == files
    assert not (host.root / "var/lib/vgpu/journal.json").exists()


def test_only_the_refused_gpus_are_named(tmp_path):
    host = SimHost.create(tmp_path / "host", machine=limited_firmware_spec(tmp_path, vf_limit=2, gpus=1))
    before = inventory(host)
    proc = provision(host)
    assert proc.returncode == 8, proc.stderr
    (line,) = error_lines(proc)
    assert ("gim's kernel log: 0000:05:00.0 (vf_num 4 in the plan): "
            "VF number 4 to be enabled exceeds the vf limit 2") in line
    assert "more GPU(s)" not in line
    assert inventory(host).gpus == before.gpus


def test_a_reload_that_gim_accepts_quotes_no_kernel_log(tmp_path):
    host = SimHost.create(tmp_path / "host", machine="8xmi300x")
    proc = provision(host)
    assert proc.returncode == 0, proc.stderr
    assert "gim's kernel log" not in proc.stdout + proc.stderr
