"""FP8 reference math (vgpu/guest/agent/fp8ref.py) checked with ml_dtypes on the CPU.

The same functions judge torch._scaled_mm on the guest (fp8_torch.py): float8_e4m3fnuz for gfx942,
float8_e4m3fn (OCP) for gfx950 (docs/hardware.md §8).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from vgpu.guest.agent import fp8ref

FORMATS = ["float8_e4m3fnuz", "float8_e4m3fn"]


def cast_to(name):
    dtype = getattr(ml_dtypes, name)
    return lambda x: np.asarray(x, dtype=np.float32).astype(dtype)


def to_f32(q):
    return q.astype(np.float32)


@pytest.mark.parametrize("name", FORMATS)
def test_fp8_max_matches_ml_dtypes_finfo(name):
    assert fp8ref.FP8_MAX[name] == float(ml_dtypes.finfo(getattr(ml_dtypes, name)).max)


@pytest.mark.parametrize("name", FORMATS)
def test_raw_cast_of_out_of_range_gives_nan_which_is_why_we_clip(name):
    assert np.isnan(cast_to(name)(np.array([1e4])).astype(np.float32)).all()


@pytest.mark.parametrize("name", FORMATS)
def test_quantize_saturates_out_of_range_values_to_the_format_max(name):
    x = np.array([-1e6, -300.0, 0.0, 300.0, 1e6, 500.0], dtype=np.float32)
    q, scale = fp8ref.quantize(x, name, cast_to(name), scale=1.0)
    back = to_f32(q)
    assert scale == 1.0 and not np.isnan(back).any()
    fmax = fp8ref.FP8_MAX[name]
    assert back.max() == fmax and back.min() == -fmax
    assert back[2] == 0.0


@pytest.mark.parametrize("name", FORMATS)
def test_roundtrip_error_is_within_half_an_e4m3_ulp(name):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(10000).astype(np.float32) * 3
    q, scale = fp8ref.quantize(x, name, cast_to(name))
    back = fp8ref.dequantize(q, scale, to_f32)
    assert scale == pytest.approx(float(np.abs(x).max()) / fp8ref.FP8_MAX[name])
    big = np.abs(x) > 0.1 * np.abs(x).max()  # normal range; subnormals have coarser relative steps
    rel = np.abs(back[big] - x[big]) / np.abs(x[big])
    assert rel.max() <= fp8ref.FP8_UNIT_ROUNDOFF + 1e-6
    assert rel.max() > fp8ref.FP8_UNIT_ROUNDOFF / 4  # rounding really happened


def test_the_two_formats_differ_in_range_not_only_in_name():
    x = np.array([416.0], dtype=np.float32)  # exact in OCP E4M3, beyond FNUZ
    fnuz, _ = fp8ref.quantize(x, "float8_e4m3fnuz", cast_to("float8_e4m3fnuz"), scale=1.0)
    ocp, _ = fp8ref.quantize(x, "float8_e4m3fn", cast_to("float8_e4m3fn"), scale=1.0)
    assert to_f32(fnuz)[0] == 240.0 and to_f32(ocp)[0] == 416.0


@pytest.mark.parametrize("name", FORMATS)
def test_exact_fp8_gemm_output_in_bf16_passes_the_judge(name):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 256)).astype(np.float32)
    b_t = rng.standard_normal((48, 256)).astype(np.float32)
    ref = fp8ref.reference_gemm(a, b_t, name, cast_to(name), to_f32)
    hardware = ref["ref_q"].astype(ml_dtypes.bfloat16).astype(np.float32)  # bf16 output like _scaled_mm
    verdict = fp8ref.judge(hardware, ref)
    assert verdict["ok"] and verdict["rel_error"] < 0.005
    assert 0.01 < verdict["quant_error"] < fp8ref.QUANT_ERROR_BOUND  # quantization costs a few percent


@pytest.mark.parametrize("name", FORMATS)
def test_wrong_gemm_results_fail_the_judge(name):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((32, 128)).astype(np.float32)
    b_t = rng.standard_normal((32, 128)).astype(np.float32)
    ref = fp8ref.reference_gemm(a, b_t, name, cast_to(name), to_f32)
    transposed = ref["ref_q"].T.copy()  # a layout bug
    assert not fp8ref.judge(transposed, ref)["ok"]
    scaled_twice = ref["ref_q"] * 1.05  # a scale applied wrongly
    assert not fp8ref.judge(scaled_twice, ref)["ok"]
    unscaled = to_f32(ref["qa"]) @ to_f32(ref["qb_t"]).T  # scales forgotten
    assert not fp8ref.judge(unscaled, ref)["ok"]


def test_relative_error_of_zero_reference():
    zero = np.zeros((2, 2), dtype=np.float32)
    assert fp8ref.relative_error(zero, zero) == 0.0
    assert fp8ref.relative_error(zero + 1, zero) == float("inf")


def test_the_format_probe_decodes_differently_in_fnuz_and_ocp():
    """vgpu_checks.hip's VGPU_FORMAT_PROBE and workloads.FORMAT_PROBE agree with ml_dtypes' encodings."""
    import re
    from pathlib import Path

    import ml_dtypes
    import numpy as np

    from vgpu.guest import agent
    from vgpu.guest.agent.workloads import FORMAT_PROBE

    source = (Path(agent.__file__).parent / "hip" / "vgpu_checks.hip").read_text()
    probe = np.float32(float(re.search(r"#define VGPU_FORMAT_PROBE (\S+)f", source).group(1)))
    assert float(probe.astype(ml_dtypes.float8_e4m3fnuz)) == FORMAT_PROBE["fnuz"]
    assert float(probe.astype(ml_dtypes.float8_e4m3fn)) == FORMAT_PROBE["ocp"]
    assert FORMAT_PROBE["fnuz"] != FORMAT_PROBE["ocp"]
