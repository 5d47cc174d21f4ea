"""build_expectation: what the agent compares against, from the catalog and the profile."""

from __future__ import annotations

import json

import pytest

from vgpu.errors import InputError
from vgpu.guest.agent.main import REQUIRED
from vgpu.guest.expect import build_expectation


def test_mi300x_vf_spx_expectation():
    e = build_expectation("MI300X", compute="SPX", memory="NPS1", is_vf=True)
    assert e["schema"] == "vgpu.agent-expect/v1"
    assert e["device_ids"] == ["0x74b5"] and e["arch"] == "gfx942"
    assert e["compute_units"] == 304 and e["vram_gib"] == 192.0
    assert e["fp8"] == {"format": "fnuz", "hipblaslt_type": "f8_fnuz_r", "torch_dtype": "float8_e4m3fnuz"}
    assert e["thresholds"]["fp8_tflops"]["value"] == 1215.0 and e["thresholds"]["bf16_tflops"]["value"] == 581.0
    # the GEMM of each threshold row goes to the agent, which runs it that way (10 s by default)
    assert e["gemm"]["fp8"] == {"m": 4864, "n": 4096, "k": 8192, "transA": "T", "transB": "N", "init": "rand_int",
                                "seconds": 15}
    assert e["seconds"] == 10.0 and e["optional"] == {}
    assert e["rocm"] == "7.0" and e["driver"] == "30.10" and e["workloads"] is True
    assert set(REQUIRED) <= set(e)
    json.dumps(e)  # JSON-able


def test_pf_ids_for_passthrough_and_ocp_fp8_for_gfx950():
    e = build_expectation("MI355X", compute=None, memory=None, is_vf=False)
    assert e["device_ids"] == ["0x75a3"] and e["arch"] == "gfx950"
    assert e["fp8"]["hipblaslt_type"] == "f8_r" and e["fp8"]["torch_dtype"] == "float8_e4m3fn"
    assert e["compute_units"] == 256 and e["thresholds"]["fp8_tflops"]["value"] == 2061.0


def test_cpx_nps4_partition_expects_an_eighth_of_cus_and_vram():
    e = build_expectation("mi300x", compute="cpx", memory="nps4", is_vf=True)
    assert e["compute_units"] == 38 and e["vram_gib"] == 24.0
    assert e["thresholds"]["fp8_tflops"]["share"] == 0.125


def test_vram_of_several_compute_partitions_sharing_nps1_is_left_unjudged():
    assert build_expectation("MI300X", compute="CPX", memory="NPS1", is_vf=True)["vram_gib"] is None


def test_model_without_cu_count_expects_none():
    assert build_expectation("MI308X", compute="SPX", memory="NPS1", is_vf=True)["compute_units"] is None


def test_overrides_reach_the_thresholds():
    e = build_expectation("MI300X", compute="SPX", memory="NPS1", is_vf=True, overrides={"hbm_gbps": 3000})
    assert e["thresholds"]["hbm_gbps"]["value"] == 3000.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(model="MI400X"), "unknown GPU model 'MI400X'"),
    (dict(compute="XPX"), "unknown compute partition 'XPX'"),
    (dict(memory="NPS8"), "unknown memory partition 'NPS8'"),
    (dict(model="MI355X", compute="QPX"), "MI355X has no compute partition QPX"),
    (dict(model="MI300X", memory="NPS2"), "MI300X has no memory partition NPS2"),
    (dict(model="MI300A"), "MI300A has no SR-IOV virtual function id"),
    (dict(rocm="seven"), "bad version"),
])
def test_bad_input_is_refused_with_one_line(kwargs, message):
    args = dict(model="MI300X", compute="SPX", memory="NPS1", is_vf=True)
    args.update(kwargs)
    model = args.pop("model")
    with pytest.raises(InputError, match=message):
        build_expectation(model, **args)


def test_quick_mode_and_optional_checks_go_into_the_expectation():
    e = build_expectation("MI300X", compute="SPX", memory="NPS1", is_vf=True, quick=True,
                          optional={"fp8.torch": "profile: no torch on this image"})
    assert e["seconds"] == 2.0 and e["optional"] == {"fp8.torch": "profile: no torch on this image"}


def test_an_unknown_optional_check_is_refused():
    with pytest.raises(InputError, match="unknown check 'fp8.torchh' made optional; the checks: pci.function"):
        build_expectation("MI300X", compute="SPX", memory="NPS1", is_vf=True, optional={"fp8.torchh": "x"})
