"""The catalog must say what docs/hardware.md says: ids, partitions, formats, support levels."""

import pytest

from vgpu.catalog import DEFAULT, ComputePartition as C, Fp8Format, MemoryPartition as M, Mode, Hypervisor, Support


@pytest.mark.parametrize("device,name,is_vf", [
    (0x74A1, "MI300X", False), (0x74B5, "MI300X", True), (0x74A9, "MI300X-HF", False), (0x74BD, "MI300X-HF", True),
    (0x74A2, "MI308X", False), (0x74A8, "MI308X", False), (0x74B6, "MI308X", True), (0x74BC, "MI308X", True),
    (0x74A5, "MI325X", False), (0x74B9, "MI325X", True), (0x75A0, "MI350X", False), (0x75B0, "MI350X", True),
    (0x75A3, "MI355X", False), (0x75B3, "MI355X", True), (0x74A0, "MI300A", False), (0x740F, "MI210", False),
    (0x740C, "MI250X", False), (0x7408, "MI250X", False),
])
def test_ids_map_to_models(device, name, is_vf):
    match = DEFAULT.match(0x1002, device)
    assert match is not None and match.model.name == name and match.is_vf is is_vf


def test_unknown_amd_and_other_vendors_do_not_match():
    assert DEFAULT.match(0x1002, 0x73BF) is None  # Radeon RX 6900
    assert DEFAULT.match(0x10DE, 0x74A1) is None  # same id, other vendor


def test_mi300x_figures():
    m = DEFAULT.by_name("mi300x")
    assert (m.arch, m.compute_units, m.xcds, m.hbm_gb, m.fp8) == ("gfx942", 304, 8, 192, Fp8Format.FNUZ)
    assert m.measured_fp8_tflops == 1273.0 and m.peak_fp8_tflops == 2614.9
    assert m.cus_per_partition(C.CPX) == 38 and m.hbm_gb_per_partition(M.NPS4) == 48


def test_unverified_figures_stay_unknown():
    assert DEFAULT.by_name("MI308X").compute_units is None
    assert DEFAULT.by_name("MI355X").measured_fp8_tflops is None
    assert DEFAULT.by_name("MI300X").measured_bf16_tflops is None


@pytest.mark.parametrize("vf,compute,memory", [
    (1, C.SPX, M.NPS1), (1, C.CPX, M.NPS1), (1, C.CPX, M.NPS4), (2, C.DPX, M.NPS1),
    (4, C.QPX, M.NPS1), (4, C.QPX, M.NPS4), (8, C.CPX, M.NPS1), (8, C.CPX, M.NPS4)])
def test_mi300_valid_combos_from_gim_nbio(vf, compute, memory):
    assert DEFAULT.by_name("MI300X").combo(vf, compute, memory) is not None


@pytest.mark.parametrize("vf,compute,memory", [(1, C.SPX, M.NPS4), (2, C.DPX, M.NPS4), (4, C.CPX, M.NPS1),
                                               (8, C.QPX, M.NPS4), (3, C.SPX, M.NPS1)])
def test_mi300_invalid_combos_are_absent(vf, compute, memory):
    assert DEFAULT.by_name("MI300X").combo(vf, compute, memory) is None


def test_support_levels_follow_amd_matrix():
    m = DEFAULT.by_name("MI300X")
    assert m.combo(1, C.SPX, M.NPS1).support is Support.SUPPORTED
    assert m.combo(4, C.QPX, M.NPS1).support is Support.UNVALIDATED
    assert m.combo(8, C.CPX, M.NPS4).support is Support.PREVIEW
    assert DEFAULT.by_name("MI325X").combo(4, C.QPX, M.NPS1).support is Support.UNSUPPORTED
    assert m.mode_support(Mode.PASSTHROUGH, Hypervisor.ESXI).support is Support.SUPPORTED
    assert m.mode_support(Mode.SRIOV, Hypervisor.ESXI).support is Support.UNSUPPORTED


def test_gim_vf_counts_and_fp8_formats():
    assert DEFAULT.by_name("MI300X").gim_vf_counts == {1, 2, 4, 8}
    assert DEFAULT.by_name("MI355X").fp8 is Fp8Format.OCP and Fp8Format.OCP.hipblaslt_type == "f8_r"
    assert Fp8Format.FNUZ.hipblaslt_type == "f8_fnuz_r"
    assert DEFAULT.by_name("MI50/MI60").rocm7 is Support.UNSUPPORTED
