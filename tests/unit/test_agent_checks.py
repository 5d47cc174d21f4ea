"""Single agent checks, run in-process against simulated guests and small hand-built roots."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from vgpu.guest.agent import gpu_checks, system_checks, workloads
from vgpu.guest.agent.base import Context, against, run_check
from vgpu.guest.agent.guest import Guest
from vgpu.guest.agent.main import archive_root
from vgpu.guest.expect import build_expectation
from vgpu.sim.guests import REPLAY_ROOT, SIM_TARGET, sim_guest_env


def context(tmp_path: Path, scenario: str = "healthy", replay: Path | None = None, **expect_kw) -> Context:
    env = dict(os.environ)
    env.update(sim_guest_env(tmp_path / "guest", scenario=scenario, replay_dir=replay))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    expect = build_expectation(**{**SIM_TARGET, **expect_kw})
    return Context(Guest(env=env), expect, str(work), archive_root())


TORCH_REPLAY = "fp8_torch_-m_vgpu.guest.agent.fp8_torch_--dtype_float8_e4m3fnuz_-m_4864_-n_4096_-k_8192"


def replay_copy(tmp_path: Path, scenario: str = "healthy") -> Path:
    dest = tmp_path / "replay"
    shutil.copytree(REPLAY_ROOT / scenario, dest)
    return dest


def test_tool_run_is_killed_at_its_timeout(tmp_path):
    start = time.monotonic()
    run = Guest(root=str(tmp_path)).run(["sleep", "3600"], timeout=0.3)
    # killed, not waited for: far below the hour it would take, whatever the load
    assert run.timed_out and not run.ok and time.monotonic() - start < 600
    assert "timed out after" in run.why()


def test_missing_tool_and_failing_tool_say_why(tmp_path):
    guest = Guest(root=str(tmp_path), env={"PATH": str(tmp_path)})
    assert guest.run(["rocminfo"], timeout=5).why() == "rocminfo not found on PATH or in /opt/rocm/bin"
    failing = Guest(root=str(tmp_path)).run(["sh", "-c", "echo boom >&2; exit 3"], timeout=5)
    assert failing.why() == "sh -c echo boom >&2; exit 3 exited with 3: boom"


def test_tools_are_also_found_in_the_guest_opt_rocm_bin(tmp_path):
    tool = tmp_path / "opt" / "rocm" / "bin" / "rocminfo"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    run = Guest(root=str(tmp_path), env={"PATH": "/usr/bin:/bin"}).run(["rocminfo"], timeout=5)
    assert run.ok and run.stdout == "hi\n"


@pytest.mark.parametrize("found, wanted, ok", [
    ("7.0.2-56", "7.0", True), ("7.0.0", "7.0", True), ("7.0.2", "7.0.2", True),
    ("7.10.0", "7.1", False), ("6.4.3-127", "7.0", False), ("7.2.4", "7.0", False),
])
def test_rocm_version_matching(found, wanted, ok):
    assert system_checks.rocm_version_matches(found, wanted) is ok


def test_threshold_without_figure_is_an_error_unless_the_check_is_optional(tmp_path):
    ctx = context(tmp_path)
    ctx.expect["thresholds"]["fp8_tflops"] = {"metric": "fp8_tflops", "unit": "TFLOPS", "value": None,
                                              "reason": "no AMD FP8 GEMM target for MI999X"}
    r = against(ctx, "fp8.hipblaslt", 1900.04, "fp8_tflops")
    assert r.status == "error" and r.measured == 1900.0 and r.expected is None
    assert r.detail.startswith("no AMD FP8 GEMM target for MI999X: measured 1900.0 TFLOPS but there is nothing to "
                               "judge it against")
    ctx.expect["optional"] = {"fp8.hipblaslt": "--optional"}
    r = against(ctx, "fp8.hipblaslt", 1900.04, "fp8_tflops")
    assert r.status == "skip" and r.detail.startswith("not judged (optional: --optional): no AMD FP8 GEMM target")


def test_optional_does_not_hide_a_measured_failure(tmp_path):
    ctx = context(tmp_path, optional={"fp8.hipblaslt": "lab"})
    assert against(ctx, "fp8.hipblaslt", 10.0, "fp8_tflops").status == "fail"


def test_a_crashing_check_becomes_an_error_result(tmp_path):
    def check_boom(ctx):
        raise KeyError("thresholds")

    [r] = run_check(check_boom, context(tmp_path))
    assert r.status == "error" and r.name == "check_boom" and "agent bug: KeyError" in r.detail


def test_pf_found_where_a_vf_is_expected_fails_and_names_it(tmp_path):
    replay = replay_copy(tmp_path)
    guest = json.loads((replay / "guest.json").read_text())
    guest["pci"][0]["device"] = "0x74a1"
    (replay / "guest.json").write_text(json.dumps(guest))
    [r] = system_checks.check_pci_function(context(tmp_path, replay=replay))
    assert r.status == "fail" and r.measured == "0000:09:00.0 [1002:74a1]" and r.expected == "1002:74b5"


def test_function_bound_to_another_driver_fails_amdgpu_check(tmp_path):
    replay = replay_copy(tmp_path)
    guest = json.loads((replay / "guest.json").read_text())
    guest["pci"][0]["driver"] = "vfio-pci"
    (replay / "guest.json").write_text(json.dumps(guest))
    ctx = context(tmp_path, replay=replay)
    system_checks.check_pci_function(ctx)
    [r] = system_checks.check_amdgpu(ctx)
    assert r.status == "fail" and "0000:09:00.0 is bound to vfio-pci" in r.detail


def test_dkms_module_built_for_another_kernel_fails(tmp_path):
    replay = replay_copy(tmp_path)
    (replay / "dkms_status").write_text("amdgpu/6.16.13-2238411.24.04, 6.8.0-31-generic, x86_64: installed\n")
    [r] = system_checks.check_dkms(context(tmp_path, replay=replay))
    assert r.status == "fail" and "running 6.8.0-79-generic" in r.detail


def test_rocm_6_4_on_the_guest_fails_the_version_check(tmp_path):
    ctx = context(tmp_path)
    (ctx.guest.path("/opt/rocm/.info/version")).write_text("6.4.3-127\n")
    [r] = system_checks.check_rocm_version(ctx)
    assert r.status == "fail" and r.measured == "6.4.3-127" and "7.0.x expected" in r.detail


def test_garbage_rocminfo_is_an_error_not_a_crash(tmp_path):
    replay = replay_copy(tmp_path)
    (replay / "rocminfo").write_text("Segmentation fault\n")
    results = gpu_checks.check_rocminfo(context(tmp_path, replay=replay))
    assert results[0].status == "error" and "not understood" in results[0].detail


def test_hip_program_mismatches_fail_vector_add(tmp_path):
    replay = replay_copy(tmp_path)
    text = (replay / "vgpu_checks_1024").read_text().replace('"mismatches":0,"first_bad":-1', '"mismatches":3,"first_bad":17')
    (replay / "vgpu_checks_1024").write_text(text)
    results = {r.name: r for r in workloads.check_hip(context(tmp_path, replay=replay))}
    assert results["hip.vector_add"].status == "fail" and "index 17" in results["hip.vector_add"].detail
    assert results["hip.bandwidth"].status == "pass"


def test_hip_program_that_dies_gives_errors_with_its_exit(tmp_path):
    replay = replay_copy(tmp_path)
    (replay / "vgpu_checks_1024").unlink()
    results = {r.name: r for r in workloads.check_hip(context(tmp_path, replay=replay))}
    assert results["hip.compile"].status == "pass"
    assert results["hip.vector_add"].status == "error" and "exited with 127" in results["hip.vector_add"].detail


def test_hipcc_targets_the_gfx_target_rocminfo_reported(tmp_path):
    ctx = context(tmp_path)
    ctx.state["gfx"] = "gfx950"
    results = workloads.check_hip(ctx)
    assert results[0].measured == "gfx950"
    calls = [json.loads(line) for line in (tmp_path / "guest" / "calls.jsonl").read_text().splitlines()]
    assert "--offload-arch=gfx950" in [c for c in calls if c["tool"] == "hipcc"][0]["argv"]


def bench_calls(tmp_path: Path) -> list[list[str]]:
    calls = [json.loads(line) for line in (tmp_path / "guest" / "calls.jsonl").read_text().splitlines()]
    return [c["argv"] for c in calls if c["tool"] == "hipblaslt-bench"]


FP8_TAIL = ["--c_type", "bf16_r", "--d_type", "bf16_r", "--compute_type", "f32_r", "--function", "matmul"]


def test_gfx950_runs_amds_mi355x_gemm_with_ocp_fp8_and_the_sim_refuses_what_it_has_no_capture_of(tmp_path):
    ctx = context(tmp_path, model="MI355X")
    perf, verify = workloads.check_hipblaslt(ctx)
    # no capture of the MI355X command in the MI300X replay: refused, never answered with another's output
    assert perf.status == "error" and "no capture of this exact command" in perf.detail
    [argv] = bench_calls(tmp_path)[:1]
    assert argv == ["-m", "8192", "-n", "8192", "-k", "16384", "--transA", "T", "--transB", "N", "--a_type", "f8_r",
                    "--b_type", "f8_r", *FP8_TAIL, "--initialization", "trig_float", "--rotating", "512",
                    "--use_gpu_timer", "-j", "187", "-i", "1875"]


@pytest.mark.parametrize("rocm, fp8_type", [("6.2.4", "f8_r"), ("6.3.1-48", "f8_r"), ("6.4.0", "f8_fnuz_r"),
                                            ("7.0.2", "f8_fnuz_r"), ("7.10.0", "f8_fnuz_r")])
def test_gfx942_fp8_type_name_follows_the_guests_rocm(tmp_path, rocm, fp8_type):
    """hipBLASLt <= ROCm 6.3 has no f8_fnuz_r; there f8_r is FNUZ on gfx942 (RELEASES-2026 §5)."""
    ctx = context(tmp_path)
    (ctx.guest.root / "opt" / "rocm" / ".info" / "version").write_text(rocm + "\n")
    workloads.check_hipblaslt(ctx)
    bench = bench_calls(tmp_path)
    assert bench[0][:14] == ["-m", "4864", "-n", "4096", "-k", "8192", "--transA", "T", "--transB", "N",
                             "--a_type", fp8_type, "--b_type", fp8_type]
    assert bench[-1][:6] == ["-m", "1024", "-n", "1024", "-k", "1024"] and bench[-1][11] == fp8_type


def test_torch_error_report_becomes_error_checks(tmp_path):
    replay = replay_copy(tmp_path)
    (replay / TORCH_REPLAY).write_text('{"status": "error", "reason": "RuntimeError: HIP out of memory"}\n')
    results = workloads.check_torch(context(tmp_path, replay=replay))
    assert [r.status for r in results] == ["error", "error"] and "out of memory" in results[0].detail


def test_torch_garbage_output_is_an_error(tmp_path):
    replay = replay_copy(tmp_path)
    (replay / TORCH_REPLAY).write_text("Illegal instruction\n")
    results = workloads.check_torch(context(tmp_path, replay=replay))
    assert [r.status for r in results] == ["error", "error"] and "no JSON result" in results[0].detail


def test_real_fp8_torch_worker_skips_without_torch(tmp_path):
    ctx = context(tmp_path)
    ctx.guest.env.pop("VGPU_AGENT_TORCH_PYTHON")
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here: the no-torch path cannot be exercised")
    except ImportError:
        pass
    results = workloads.check_torch(ctx)
    assert results[0].status == "error" and "no PyTorch importable" in results[0].detail
    assert "install a ROCm PyTorch" in results[0].detail


@pytest.mark.parametrize("expect_kw, status", [({}, "error"), ({"model": "MI210", "is_vf": False, "compute": None,
                                                                   "memory": None}, "skip")])
def test_fp8_tile_skipped_by_the_program_is_an_error_where_the_model_has_fp8(tmp_path, expect_kw, status):
    replay = replay_copy(tmp_path)
    lines = (replay / "vgpu_checks_1024").read_text().splitlines(keepends=True)
    lines = [ln for ln in lines if '"fp8_mfma"' not in ln]
    lines.append('{"test":"fp8_mfma","skipped":"no FP8 instructions on gfx90a:sramecc+:xnack-"}\n')
    (replay / "vgpu_checks_1024").write_text("".join(lines))
    results = {r.name: r for r in workloads.check_hip(context(tmp_path, replay=replay, **expect_kw))}
    assert results["hip.fp8_mfma"].status == status and "gfx90a" in results["hip.fp8_mfma"].detail


def test_partition_without_memory_mode_is_judged_on_the_compute_mode(tmp_path):
    replay = replay_copy(tmp_path)
    text = (replay / "amd-smi").read_text().replace("SPX/NPS1", "     SPX")
    (replay / "amd-smi").write_text(text)
    ctx = context(tmp_path, replay=replay)
    results = {r.name: r for r in gpu_checks.check_amdsmi(ctx)}
    part = results["amdsmi.partition"]
    assert part.expected == "SPX/NPS1"
    assert part.status == "pass" and part.measured == "SPX", part


def test_a_rocm_6_4_guest_gives_baseline_numbers(tmp_path):
    """The ROCm 6.4 -> 7.x comparison needs 6.4's numbers: right FP8 type name, amd-smi read as JSON."""
    ctx = context(tmp_path, rocm="6.4")
    (ctx.guest.root / "opt" / "rocm" / ".info" / "version").write_text("6.4.3-127\n")
    perf, verify = workloads.check_hipblaslt(ctx)
    assert (perf.status, perf.measured, verify.status) == ("pass", 1290.0, "pass")
    static, partition = gpu_checks.check_amdsmi(ctx)
    assert static.status == "pass" and static.measured == "0x74b5 gfx942 304 CU"
    calls = [json.loads(line) for line in (tmp_path / "guest" / "calls.jsonl").read_text().splitlines()]
    assert ["static", "--json"] in [c["argv"] for c in calls if c["tool"] == "amd-smi"]


@pytest.mark.parametrize("probe, model, status, says", [
    ("0.0009765625", "MI300X", "pass", "decoded as 0.000976562: FNUZ encoding"),
    ("0.001953125", "MI300X", "fail", "decoded as 0.00195312: OCP encoding, but MI300X uses FNUZ"),
    ("0", "MI300X", "fail", "decoded as 0: neither, but MI300X uses FNUZ"),
])
def test_the_fp8_tile_tells_fnuz_from_ocp(tmp_path, probe, model, status, says):
    """Issue 23: small integers are exact in both encodings; 1.25 * 2^-10 is not."""
    replay = replay_copy(tmp_path)
    path = replay / "vgpu_checks_1024"
    path.write_text(path.read_text().replace('"format_probe":0.0009765625', '"format_probe":' + probe))
    r = {r.name: r for r in workloads.check_hip(context(tmp_path, replay=replay, model=model))}["hip.fp8_mfma"]
    assert r.status == status and says in r.detail, r.detail


def test_a_program_without_the_format_probe_proves_nothing_about_the_encoding(tmp_path):
    replay = replay_copy(tmp_path)
    path = replay / "vgpu_checks_1024"
    path.write_text(path.read_text().replace(',"format_probe":0.0009765625', ""))
    r = {r.name: r for r in workloads.check_hip(context(tmp_path, replay=replay))}["hip.fp8_mfma"]
    assert r.status == "error" and "cannot tell FNUZ from OCP" in r.detail


def test_hip_device_checks_the_cus_and_vram_hip_itself_sees(tmp_path):
    """Issue 23: the HIP program's own CU count and memory size were printed and ignored."""
    ok = {r.name: r for r in workloads.check_hip(context(tmp_path / "a"))}["hip.device"]
    assert ok.status == "pass" and ok.measured == "304 CU, 191.69 GiB" and ok.expected == "304 CU, 192 GiB"
    replay = replay_copy(tmp_path / "b")
    path = replay / "vgpu_checks_1024"
    path.write_text(path.read_text().replace('"cus":304,"vram_bytes":205822885888', '"cus":152,"vram_bytes":1073741824'))
    bad = {r.name: r for r in workloads.check_hip(context(tmp_path / "b", replay=replay))}["hip.device"]
    assert bad.status == "fail"
    assert bad.detail == "HIP sees 152 CUs, the partition has 304; HIP sees 1.00 GiB, accepted 182.4-195.8 GiB"
