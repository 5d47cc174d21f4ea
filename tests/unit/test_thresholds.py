"""Thresholds: AMD's RVS targets from the shipped data file, derived partition rows, profile overrides."""

from __future__ import annotations

import copy

import pytest
import yaml

from vgpu.catalog import DEFAULT, ComputePartition as C, MemoryPartition as M
from vgpu.errors import InputError
from vgpu.guest import thresholds
from vgpu.guest.thresholds import (DEFAULT_TOLERANCE, describe, load_table, parse_table, partition_shares,
                                   thresholds_for)

MI300X = DEFAULT.by_name("MI300X")


def test_spx_fp8_threshold_is_amds_rvs_target_with_its_source_and_method():
    t = thresholds_for(MI300X, C.SPX, M.NPS1)["fp8_tflops"]
    assert t.value == 1215.0 and t.reference == 1215.0 and t.tolerance == 1.0 and t.unit == "TFLOPS"
    assert t.source.startswith("RVS rvs/conf/MI300X/gst_single.conf, action gst-1215Tflops-8K-rand-fp8")
    assert t.method == {"m": 4864, "n": 4096, "k": 8192, "transA": "T", "transB": "N", "init": "rand_int",
                        "seconds": 15}
    assert t.derived == ""


@pytest.mark.parametrize("model, compute, memory, dtype, value", [
    ("MI300X", C.SPX, M.NPS1, "bf16", 581.0), ("MI300X", C.DPX, M.NPS2, "fp8", 719.0),
    ("MI300X", C.CPX, M.NPS4, "fp8", 179.8), ("MI300X", C.CPX, M.NPS4, "bf16", 83.6),
    ("MI325X", C.SPX, M.NPS1, "fp8", 1438.0), ("MI325X", C.DPX, M.NPS2, "fp8", 652.0),
    ("MI325X", C.SPX, M.NPS1, "bf16", 669.0), ("MI355X", C.SPX, M.NPS1, "fp8", 2061.0),
    ("MI355X", C.SPX, M.NPS1, "bf16", 956.0), ("MI350X", C.SPX, M.NPS1, "fp8", 2061.0),
    ("MI308X", C.SPX, M.NPS1, "fp8", 343.4), ("MI300X", C.SPX, M.NPS1, "fp16", 639.0),
])
def test_amd_published_rows(model, compute, memory, dtype, value):
    t = thresholds_for(DEFAULT.by_name(model), compute, memory)[dtype + "_tflops"]
    assert t.value == value and t.derived == "" and t.source.startswith("RVS ")


def test_every_validated_model_has_fp8_and_bf16_rows():
    """Or it is named as one AMD publishes no target for, and then its checks have no threshold (never a pass)
    and say which profile field to set."""
    from vgpu.guest.thresholds import unpublished

    rows = {(r.model, r.dtype) for r in load_table()[0] if (r.compute, r.memory) == ("SPX", "NPS1")}
    for model in DEFAULT.targets():
        for dtype in ("fp8", "bf16"):
            t = thresholds_for(model)[dtype + "_tflops"]
            if model.name in unpublished():
                assert (model.name, dtype) not in rows and t.value is None
                assert f"validation.{dtype}_tflops_min" in t.reason, t.reason
                continue
            assert (model.name, dtype) in rows, (model.name, dtype)
            assert t.value is not None
    assert set(unpublished()) <= {m.name for m in DEFAULT.targets()}  # no stale names


def test_mi35x_rows_use_amds_own_shape_and_trig_initialisation():
    t = thresholds_for(DEFAULT.by_name("MI355X"), C.SPX, M.NPS1)["fp8_tflops"]
    assert (t.method["m"], t.method["n"], t.method["k"], t.method["init"]) == (8192, 8192, 16384, "trig_float")


@pytest.mark.parametrize("compute, memory, share", [(C.DPX, M.NPS1, 0.5), (C.QPX, M.NPS1, 0.25), (C.CPX, M.NPS1, 0.125)])
def test_partition_without_an_amd_row_is_derived_and_says_how(compute, memory, share):
    t = thresholds_for(MI300X, compute, memory)["fp8_tflops"]
    assert t.share == share
    assert t.value == pytest.approx(1215.0 * share * 0.9, abs=0.051)
    assert t.derived.startswith(f"derived: AMD's whole-GPU 1215 TFLOPS x CU share 1/{compute.count} x 0.9")
    assert f"AMD publishes no {compute.value}/{memory.value} target" in t.derived


def test_derive_factor_is_the_lowest_amd_partition_ratio():
    """0.9 is not a guess: the lowest ratio of an AMD partition target to its CU share is MI325X DPX's."""
    rows = {(r.model, r.compute, r.memory, r.dtype): r.tflops for r in load_table()[0]}
    ratios = [value / (rows[(model, "SPX", "NPS1", dtype)] / C(compute).count)
              for (model, compute, memory, dtype), value in rows.items() if compute != "SPX"]
    assert min(ratios) == pytest.approx(652 / 719, abs=1e-3) and load_table()[1] <= min(ratios)


def test_bandwidth_uses_peak_hbm_with_its_own_tolerance_and_the_smaller_share():
    t = thresholds_for(MI300X, C.CPX, M.NPS4)["hbm_gbps"]
    assert t.reference == 5300.0 * 0.125 and t.tolerance == DEFAULT_TOLERANCE["hbm_gbps"] == 0.5
    assert t.share == 0.125 and t.value == pytest.approx(5300 * 0.125 * 0.5, abs=0.051)
    assert partition_shares(C.QPX, M.NPS4) == (0.25, 0.25)


def test_model_without_a_figure_gives_no_threshold_and_a_reason():
    t = thresholds_for(DEFAULT.by_name("MI210"))["fp8_tflops"]
    assert t.value is None and t.reason == "no AMD FP8 GEMM target for MI210 in gemm-thresholds.yaml"
    assert "the check fails unless made optional" in describe({"fp8_tflops": t})[0]


def test_describe_prints_value_source_method_and_derivation():
    lines = describe(thresholds_for(MI300X, C.CPX, M.NPS1))
    assert lines[0].startswith("fp8_tflops: >= 136.7 TFLOPS; RVS rvs/conf/MI300X/gst_single.conf")
    assert "derived: AMD's whole-GPU 1215 TFLOPS x CU share 1/8 x 0.9" in lines[0]
    assert lines[0].endswith("GEMM 4864x4096x8192 TN, rand_int, AMD ran 15 s")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema="v0"), "schema is not vgpu.gemm-thresholds/v1"),
    (lambda d: d["rows"][0].update(tflops=float("inf")), "row 0: tflops must be a positive number"),
    (lambda d: d["rows"][0].update(tflops=0), "row 0: tflops must be a positive number"),
    (lambda d: d["rows"][0].update(source=" "), "row 0: names no source"),
    (lambda d: d["rows"][0].update(method="nope"), "row 0: needs a dtype"),
    (lambda d: d["rows"].append(dict(d["rows"][0])), "appears twice"),
    (lambda d: d["derive"].update(factor=1.5), "derive.factor"),
    (lambda d: d["methods"]["rvs-gst-4864x4096x8192-rand"].pop("init"), "needs m, n, k"),
])
def test_a_malformed_table_is_refused(edit, message):
    from importlib import resources
    data = yaml.safe_load(resources.files("vgpu.guest").joinpath("data", thresholds.TABLE).read_text())
    data = copy.deepcopy(data)
    edit(data)
    with pytest.raises(InputError, match=message):
        parse_table(data, "test")


def test_profile_override_wins_even_without_a_catalog_figure():
    t = thresholds_for(DEFAULT.by_name("MI210"), C.SPX, M.NPS1, {"fp8_tflops": 1500})["fp8_tflops"]
    assert t.value == 1500.0 and t.source == "profile override"


def test_tolerance_override_for_one_metric_or_all():
    one = thresholds_for(MI300X, C.SPX, M.NPS1, {"tolerance": {"fp8_tflops": 0.5}})
    assert one["fp8_tflops"].value == pytest.approx(607.5) and one["hbm_gbps"].tolerance == 0.5
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
