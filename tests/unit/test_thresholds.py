"""Thresholds: AMD's figures scaled by the partition's share, times a tolerance; overrides win."""

from __future__ import annotations

import pytest

from vgpu.catalog import DEFAULT, ComputePartition as C, MemoryPartition as M
from vgpu.errors import InputError
from vgpu.guest.thresholds import DEFAULT_TOLERANCE, partition_shares, thresholds_for

MI300X = DEFAULT.by_name("MI300X")


def test_spx_fp8_threshold_is_amd_measured_figure_times_tolerance():
    t = thresholds_for(MI300X, C.SPX, M.NPS1)["fp8_tflops"]
    assert t.value == pytest.approx(MI300X.measured_fp8_tflops * DEFAULT_TOLERANCE["fp8_tflops"], abs=0.051)
    assert t.reference == 1273.0 and t.share == 1.0 and t.unit == "TFLOPS"
    assert "max-achievable" in t.source


@pytest.mark.parametrize("compute, share", [(C.SPX, 1.0), (C.DPX, 0.5), (C.QPX, 0.25), (C.CPX, 0.125)])
def test_fp8_threshold_scales_with_the_partition_share_of_cus(compute, share):
    t = thresholds_for(MI300X, compute, M.NPS1)["fp8_tflops"]
    assert t.share == share
    assert t.value == pytest.approx(1273.0 * share * 0.7, abs=0.051)


def test_bandwidth_uses_peak_hbm_with_its_own_tolerance_and_the_smaller_share():
    t = thresholds_for(MI300X, C.CPX, M.NPS4)["hbm_gbps"]
    assert t.reference == 5300.0 and t.tolerance == DEFAULT_TOLERANCE["hbm_gbps"]
    assert t.share == 0.125 and t.value == pytest.approx(5300 * 0.125 * 0.5, abs=0.051)
    assert partition_shares(C.QPX, M.NPS4) == (0.25, 0.25)


def test_unknown_figure_gives_no_threshold_and_names_the_model():
    t = thresholds_for(DEFAULT.by_name("MI355X"), C.SPX, M.NPS1)["fp8_tflops"]
    assert t.value is None and t.reason.startswith("no AMD reference figure for MI355X")
    assert thresholds_for(MI300X, C.SPX, M.NPS1)["bf16_tflops"].value is None  # the catalog has no BF16 figure


def test_profile_override_wins_even_without_a_catalog_figure():
    t = thresholds_for(DEFAULT.by_name("MI355X"), C.SPX, M.NPS1, {"fp8_tflops": 1500})["fp8_tflops"]
    assert t.value == 1500.0 and t.source == "profile override"


def test_tolerance_override_for_one_metric_or_all():
    one = thresholds_for(MI300X, C.SPX, M.NPS1, {"tolerance": {"fp8_tflops": 0.5}})
    assert one["fp8_tflops"].value == pytest.approx(636.5) and one["hbm_gbps"].tolerance == 0.5
    every = thresholds_for(MI300X, C.SPX, M.NPS1, {"tolerance": 0.9})
    assert every["hbm_gbps"].value == pytest.approx(4770.0)


@pytest.mark.parametrize("overrides, message", [
    ({"fp4_tflops": 10}, "unknown threshold 'fp4_tflops'"),
    ({"fp8_tflops": -1}, "must be a positive number"),
    ({"fp8_tflops": "fast"}, "must be a positive number"),
    ({"fp8_tflops": True}, "must be a positive number"),
    ({"tolerance": 7}, "must be <= 1.5"),
    ({"tolerance": {"int8_tops": 0.5}}, "unknown metric in tolerance: int8_tops"),
])
def test_bad_overrides_are_refused_with_one_line(overrides, message):
    with pytest.raises(InputError, match=message):
        thresholds_for(MI300X, C.SPX, M.NPS1, overrides)
