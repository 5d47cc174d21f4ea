"""The production agent (as the zipapp) against simulated guests: each scenario gives the right verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu.errors import InputError
from vgpu.guest.agent import metrics
from vgpu.guest.agent.result import AgentResult
from vgpu.guest.bundle import build_agent
from vgpu.guest.expect import build_expectation
from vgpu.sim.guests import SCENARIOS, SIM_TARGET, sim_guest_env


@pytest.fixture(scope="module")
def agent(tmp_path_factory) -> Path:
    return build_agent(tmp_path_factory.mktemp("agent"))


@pytest.fixture(scope="module")
def expect_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("expect") / "expect.json"
    path.write_text(json.dumps(build_expectation(**SIM_TARGET)))
    return path


def run_agent(agent: Path, expect: Path, env: dict, *extra: str, cwd: Path | None = None) -> dict:
    proc = subprocess.run(["python3", "-S", str(agent), "--expect", str(expect), *extra], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def by_name(result: dict) -> dict[str, dict]:
    return {c["name"]: c for c in result["checks"]}


@pytest.fixture(scope="module")
def results(agent, expect_file, tmp_path_factory) -> dict[str, dict]:
    out = {}
    for scenario in SCENARIOS:
        work = tmp_path_factory.mktemp(scenario)
        out[scenario] = run_agent(agent, expect_file, sim_guest_env(work, scenario=scenario))
        out[scenario]["_work"] = str(work)
    return out


def test_healthy_guest_passes_every_check(results):
    checks = by_name(results["healthy"])
    assert {n: c["status"] for n, c in checks.items() if c["status"] != "pass"} == {}
    # BF16 is judged against AMD's RVS target (581 TFLOPS on MI300X SPX), not only measured
    assert checks["bf16.hipblaslt"]["measured"] == 612.0 and checks["bf16.hipblaslt"]["expected"] == 581.0
    assert checks["fp8.hipblaslt"]["measured"] == 1290.0 and checks["fp8.hipblaslt"]["expected"] == 1215.0
    assert checks["rocminfo.compute_units"]["measured"] == 304
    assert checks["rocminfo.vram"]["measured"] == pytest.approx(191.69, abs=0.01)  # 200998912 KB in the fixture
    assert checks["pci.function"]["measured"] == "0000:09:00.0 [1002:74b5]"
    assert checks["amdsmi.partition"]["measured"] == "SPX/NPS1"


def test_agent_output_parses_with_the_result_contract(results):
    parsed = AgentResult.from_dict({k: v for k, v in results["healthy"].items() if k != "_work"})
    assert parsed.hostname.startswith("sim-healthy-")
    assert len(parsed.checks) == len(metrics.CHECKS) == 19


def test_slow_guest_fails_the_fp8_and_bandwidth_thresholds_only(results):
    checks = by_name(results["slow"])
    failed = sorted(n for n, c in checks.items() if c["status"] == "fail")
    assert failed == ["bf16.hipblaslt", "fp8.hipblaslt", "fp8.torch", "hip.bandwidth"]
    assert checks["fp8.hipblaslt"]["measured"] == 520.0 and checks["fp8.hipblaslt"]["expected"] == 1215.0
    assert checks["fp8.hipblaslt"]["detail"].startswith("below 1215.0 TFLOPS in every window (median 520.0)")
    # what hipblaslt-bench's banner says about where it ran goes into the report (issue 9)
    assert "(device 0 of 1: AMD Instinct MI300X VF gfx942)" in checks["fp8.hipblaslt"]["detail"]
    assert checks["hip.bandwidth"]["measured"] < checks["hip.bandwidth"]["expected"]


def test_no_rocm_guest_reports_missing_tools_with_reasons(results):
    checks = by_name(results["no-rocm"])
    assert checks["pci.function"]["status"] == "pass"
    assert checks["driver.amdgpu"]["status"] == "fail"
    assert checks["rocm.version"]["status"] == "error" and ".info/version missing" in checks["rocm.version"]["detail"]
    assert checks["rocminfo.gfx_target"]["status"] == "error"
    assert "rocminfo not found" in checks["rocminfo.gfx_target"]["detail"]
    assert "hipcc not found" in checks["hip.compile"]["detail"]
    assert checks["fp8.hipblaslt"]["status"] == "error" and "hipblaslt-bench not found" in checks["fp8.hipblaslt"]["detail"]
    assert checks["fp8.torch"]["status"] == "error" and "torch" in checks["fp8.torch"]["detail"]
    assert all(c["detail"] for c in checks.values() if c["status"] in ("error", "skip"))
    assert not [n for n, c in checks.items() if c["status"] == "skip"]  # nothing silently unjudged


def test_missing_tools_guest_fails_with_what_to_install(results):
    """Issue 23: no hipblaslt-bench and no torch used to be skips, and skips never failed a guest."""
    checks = by_name(results["missing-tools"])
    bad = {n: c for n, c in checks.items() if c["status"] != "pass"}
    assert sorted(bad) == ["bf16.hipblaslt", "fp8.hipblaslt", "fp8.hipblaslt.verify", "fp8.torch", "fp8.torch.error"]
    assert {c["status"] for c in bad.values()} == {"error"}
    for name in ("fp8.hipblaslt", "fp8.hipblaslt.verify", "bf16.hipblaslt"):
        assert "hipblaslt-bench not found" in bad[name]["detail"] and "install hipBLASLt's clients" in bad[name]["detail"]
    assert "No module named 'torch'" in bad["fp8.torch"]["detail"] and "install a ROCm PyTorch" in bad["fp8.torch"]["detail"]


def test_missing_tools_pass_only_when_made_optional_and_say_not_judged(agent, tmp_path):
    optional = {n: "profile lab: no hipBLASLt clients" for n in ("fp8.hipblaslt", "fp8.hipblaslt.verify",
                                                                 "bf16.hipblaslt", "fp8.torch", "fp8.torch.error")}
    expect = tmp_path / "optional.json"
    expect.write_text(json.dumps(build_expectation(**SIM_TARGET, optional=optional)))
    checks = by_name(run_agent(agent, expect, sim_guest_env(tmp_path / "g", scenario="missing-tools")))
    assert {checks[n]["status"] for n in optional} == {"skip"}
    assert checks["fp8.hipblaslt"]["detail"].startswith("not judged (optional: profile lab: no hipBLASLt clients): "
                                                        "hipblaslt-bench not found")
    assert {c["status"] for n, c in checks.items() if n not in optional} == {"pass"}


def test_throttling_guest_fails_with_a_sentence_that_says_so(results):
    checks = by_name(results["throttling"])
    assert sorted(n for n, c in checks.items() if c["status"] != "pass") == ["bf16.hipblaslt", "fp8.hipblaslt"]
    fp8 = checks["fp8.hipblaslt"]
    assert fp8["measured"] == 987.0 and fp8["expected"] == 1215.0
    assert fp8["detail"].startswith("throughput fell from 1290.0 TFLOPS in the first window to 987.0 in window 5 of "
                                    "5: the VF throttles after a few seconds")
    assert "lowest 987.0, median 1002.0, first 1290.0 TFLOPS; SCLK lowest 1475 MHz, median 1510 MHz" in fp8["detail"]


def test_every_reported_check_declares_its_direction_and_unit(results):
    """compare.py judges a change by the direction defined in metrics.CHECKS: an unknown one is an error here."""
    for scenario, result in results.items():
        for c in result["checks"]:
            definition = metrics.metric(c["name"])
            assert definition is not None, (scenario, c["name"])
            assert definition.better in metrics.DIRECTIONS
            if isinstance(c["measured"], (int, float)) and c["unit"]:
                assert c["unit"] == definition.unit, (scenario, c["name"], c["unit"])


def test_wrong_partition_guest_fails_cu_vram_and_partition(results):
    checks = by_name(results["wrong-partition"])
    for name in ("rocminfo.compute_units", "rocminfo.vram", "amdsmi.static", "amdsmi.partition", "hip.device"):
        assert checks[name]["status"] == "fail", name
    assert checks["rocminfo.compute_units"]["measured"] == 38
    assert checks["amdsmi.partition"]["measured"] == "CPX/NPS4"


def test_wrong_partition_guest_passes_when_the_profile_asks_for_cpx_nps4(agent, tmp_path):
    expect = tmp_path / "cpx.json"
    expect.write_text(json.dumps(build_expectation("MI300X", compute="CPX", memory="NPS4", is_vf=True)))
    checks = by_name(run_agent(agent, expect, sim_guest_env(tmp_path / "g", scenario="wrong-partition"),
                               "--skip-workloads"))
    for name in ("rocminfo.compute_units", "rocminfo.vram", "amdsmi.static", "amdsmi.partition"):
        assert checks[name]["status"] == "pass", (name, checks[name])


def test_hipcc_and_hipblaslt_get_the_arch_specific_arguments(results):
    calls = [json.loads(line) for line in (Path(results["healthy"]["_work"]) / "calls.jsonl").read_text().splitlines()]
    hipcc = [c["argv"] for c in calls if c["tool"] == "hipcc"]
    assert len(hipcc) == 1 and "--offload-arch=gfx942" in hipcc[0]
    bench = [c["argv"] for c in calls if c["tool"] == "hipblaslt-bench"]
    common = ["--c_type", "bf16_r", "--d_type", "bf16_r", "--compute_type", "f32_r", "--function", "matmul",
              "--initialization", "rand_int"]
    fp8 = ["-m", "4864", "-n", "4096", "-k", "8192", "--transA", "T", "--transB", "N", "--a_type", "f8_fnuz_r",
           "--b_type", "f8_fnuz_r", *common, "--rotating", "512", "--use_gpu_timer", "-j", "744", "-i", "7445"]
    bf16 = ["-m", "4864", "-n", "4096", "-k", "8192", "--transA", "T", "--transB", "N", "--a_type", "bf16_r",
            "--b_type", "bf16_r", *common, "--rotating", "512", "--use_gpu_timer", "-j", "356", "-i", "3560"]
    verify = ["-m", "1024", "-n", "1024", "-k", "1024", "--transA", "T", "--transB", "N", "--a_type", "f8_fnuz_r",
              "--b_type", "f8_fnuz_r", *common, "-v", "-i", "1", "-j", "0"]
    # 5 windows of about 2 s each at AMD's target rate (10 s per dtype), then one verification run
    assert bench == [fp8] * 5 + [verify] + [bf16] * 5


def test_skip_workloads_runs_no_workload(agent, expect_file, tmp_path):
    env = sim_guest_env(tmp_path, scenario="healthy")
    checks = by_name(run_agent(agent, expect_file, env, "--skip-workloads"))
    workload = [n for n in metrics.CHECKS if n.startswith(metrics.WORKLOAD_PREFIXES)]
    assert {checks[n]["status"] for n in workload} == {"skip"}
    assert all(checks[n]["detail"].startswith("not judged: workloads turned off") for n in workload)
    tools = {json.loads(line)["tool"] for line in (tmp_path / "calls.jsonl").read_text().splitlines()}
    assert not tools & {"hipcc", "hipblaslt-bench", "fp8_torch"}


def test_replay_dir_override_replaces_the_tool_outputs(agent, expect_file, tmp_path):
    replay = tmp_path / "replay"
    replay.mkdir()
    src = Path(__file__).resolve().parents[2] / "vgpu" / "sim" / "guests" / "replay" / "healthy"
    for f in src.iterdir():
        (replay / f.name).write_text(f.read_text())
    (replay / "rocminfo").write_text((src / "rocminfo").read_text().replace("gfx942", "gfx950"))
    checks = by_name(run_agent(agent, expect_file, sim_guest_env(tmp_path / "g", replay_dir=replay),
                               "--skip-workloads"))
    assert checks["rocminfo.gfx_target"]["status"] == "fail"
    assert checks["rocminfo.gfx_target"]["measured"] == "gfx950"


def test_sim_refuses_unknown_scenario_and_missing_replay_dir(tmp_path):
    with pytest.raises(InputError, match="unknown simulated guest scenario 'broken'"):
        sim_guest_env(tmp_path, scenario="broken")
    with pytest.raises(InputError, match="does not exist"):
        sim_guest_env(tmp_path, replay_dir=tmp_path / "nowhere")


def test_agent_runs_from_the_source_tree_too(expect_file, tmp_path):
    env = sim_guest_env(tmp_path, scenario="healthy")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-m", "vgpu.guest.agent", "--expect", str(expect_file),
                           "--skip-workloads"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert by_name(json.loads(proc.stdout))["rocminfo.gfx_target"]["status"] == "pass"
