"""`vgpu metrics`: the exposition parses with prometheus_client's own parser and says what the host
and the reports say: modes, VFs, holders, drift, the last validation per guest."""

from __future__ import annotations

import json
import os

from conftest import hypervisor_of, run_cli


def families(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(fams, name, **labels):
    hits = [s.value for s in fams[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, fams.get(name))
    return hits[0]


def test_metrics_of_a_provisioned_host_and_its_validated_guests(sim, tmp_path):
    host = sim()
    sim_dir = host.state_dir
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", [], running=False)
    run_cli("provision", "--profile", "mi300x-1vf", "--simulate", "--yes", sim_dir=sim_dir, check_rc=0)
    hv.set_state("gpu-vm-00", "running")
    reports = tmp_path / "reports"
    run_cli("validate", "--simulate", "--guests", "2", "--report-dir", str(reports), sim_dir=sim_dir, timeout=600)
    out = tmp_path / "vgpu.prom"
    r = run_cli("metrics", "--simulate", "--report", str(reports), "--textfile", str(out), sim_dir=sim_dir,
                check_rc=0)
    assert r.stdout == "" and oct(os.stat(out).st_mode & 0o777) == "0o644"
    fams = families(out.read_text())
    assert value(fams, "vgpu_gpu_info", gpu="0000:05:00.0", mode="sriov", model="MI300X", platform="linux") == 1
    assert value(fams, "vgpu_gpu_vfs", gpu="0000:05:00.0") == 1
    assert value(fams, "vgpu_vf_info", vf="0000:05:02.0", vm="gpu-vm-00", driver="vfio-pci") == 1
    assert value(fams, "vgpu_vf_info", vf="0000:26:02.0", vm="") == 1  # its VM is not defined
    assert value(fams, "vgpu_function_in_use", function="0000:05:02.0", vm="gpu-vm-00") == 1
    assert value(fams, "vgpu_hypervisor_up") == 1
    assert value(fams, "vgpu_profile_in_sync", profile="mi300x-1vf") == 1
    assert value(fams, "vgpu_profile_drift_items", profile="mi300x-1vf") == 0
    guests = {s.labels["guest"] for s in fams["vgpu_validation_passed"]}
    assert len(guests) == 2
    for s in fams["vgpu_validation_fp8_tflops"]:
        assert s.value > 100  # a simulated MI300X VF measures hundreds of TFLOPS
    assert all(s.value > 1.7e9 for s in fams["vgpu_validation_timestamp_seconds"])

    # drift: someone edits gim's config behind vgpu's back
    gim_config = host.root / "etc" / "gim_config"
    gim_config.write_text(gim_config.read_text() + "vf_num=8\n")
    fams = families(run_cli("metrics", "--simulate", sim_dir=sim_dir, check_rc=0).stdout)
    assert value(fams, "vgpu_profile_in_sync", profile="mi300x-1vf") == 0
    assert value(fams, "vgpu_profile_drift_items", profile="mi300x-1vf") >= 1


def test_an_unprovisioned_host_has_no_profile_metrics_but_says_so(sim):
    host = sim()
    fams = families(run_cli("metrics", "--simulate", sim_dir=host.state_dir, check_rc=0).stdout)
    assert value(fams, "vgpu_profile_recorded", profile="") == 0
    assert "vgpu_profile_in_sync" not in fams or not fams["vgpu_profile_in_sync"]


def test_hostile_metrics_inputs_change_nothing(sim, tmp_path):
    host = sim()
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    for bad in (str(fifo), "/dev/zero", str(tmp_path / "missing.json")):
        r = run_cli("metrics", "--simulate", "--report", bad, sim_dir=host.state_dir, timeout=600)
        assert r.returncode == 5 and r.stderr.startswith("error:") and r.stdout == "", (bad, r.stderr)
    for bad_out in ("/dev/null", str(tmp_path)):
        r = run_cli("metrics", "--simulate", "--textfile", bad_out, sim_dir=host.state_dir, timeout=600)
        assert r.returncode == 5 and r.stderr.startswith("error:"), (bad_out, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.fifo", "sim"]  # nothing written beside them


def test_a_rollouts_state_dir_gives_every_waves_validation_newest_run_first(sim, tmp_path):
    """`--report STATE-DIR`: the layout vgpu rollout writes (state.json, wave-NN/run-M/validate/, docs/rollout.md).
    Wave 1 ran twice within one second (run-9 failed, run-10 passed): by number, not by name, the later run wins;
    wave 2's guest comes from its own report; comparison reports beside them are not validation reports."""
    host = sim()
    rollout = tmp_path / "rollout"
    rollout.mkdir()
    (rollout / "state.json").write_text("{}")  # only marks the layout: metrics reads the reports, each checked

    def report(where: str, scenario: str, guests: int, generated: str) -> None:
        out = rollout / where / "validate"
        run_cli("validate", "--simulate", "--guests", str(guests), "--scenario", scenario, "--report-dir", str(out),
                "--quiet", sim_dir=host.state_dir, timeout=300)
        data = json.loads((out / "validation-report.json").read_text())
        data["generated"] = generated
        (out / "validation-report.json").write_text(json.dumps(data))

    report("wave-01/run-9", "slow", 1, "2026-12-04T10:00:00Z")
    report("wave-01/run-10", "healthy", 1, "2026-12-04T10:00:00Z")
    report("wave-02/run-1", "healthy,slow", 2, "2026-12-04T11:00:00Z")  # sim-01 again, newer; sim-02 slow
    (rollout / "wave-01" / "run-10" / "compare").mkdir()
    (rollout / "wave-01" / "run-10" / "compare" / "comparison.json").write_text("{}")
    fams = families(run_cli("metrics", "--simulate", "--report", str(rollout), sim_dir=host.state_dir,
                            check_rc=0).stdout)
    assert value(fams, "vgpu_validation_passed", guest="sim-01") == 1
    assert value(fams, "vgpu_validation_timestamp_seconds", guest="sim-01") == 1796382000  # wave 2's, the newest
    assert value(fams, "vgpu_validation_passed", guest="sim-02") == 0

    (rollout / "wave-02" / "run-1" / "validate" / "validation-report.json").unlink()
    fams = families(run_cli("metrics", "--simulate", "--report", str(rollout), sim_dir=host.state_dir,
                            check_rc=0).stdout)
    assert value(fams, "vgpu_validation_passed", guest="sim-01") == 1  # run-10 over run-9 (same second)
    assert value(fams, "vgpu_validation_timestamp_seconds", guest="sim-01") == 1796378400


def test_a_rollout_with_no_validation_yet_gives_the_host_metrics_and_a_warning(sim, tmp_path):
    host = sim()
    (tmp_path / "rollout").mkdir()
    (tmp_path / "rollout" / "state.json").write_text("{}")
    r = run_cli("metrics", "--simulate", "--report", str(tmp_path / "rollout"), sim_dir=host.state_dir, check_rc=0)
    assert r.stderr == f"warning: roll-out {tmp_path / 'rollout'} has no validation report yet\n"
    fams = families(r.stdout)
    assert fams["vgpu_gpu_info"] and not fams.get("vgpu_validation_passed")
