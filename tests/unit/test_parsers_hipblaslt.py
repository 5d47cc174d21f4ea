"""hipblaslt-bench parser on every hipblaslt-bench fixture, plus edge cases."""

from pathlib import Path

import pytest

from vgpu.guest.agent.parsers.common import ParseError
from vgpu.guest.agent.parsers.hipblaslt import parse_hipblaslt_bench

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> str:
    """The fixture's text without its '# fixture:' header line."""
    text = (FIXTURES / "bench" / name).read_text(encoding="utf-8")
    assert text.startswith("# fixture:"), name
    return text.split("\n", 1)[1]


def test_mi350x_bf16_print_kernel_info_banner_and_row():
    run = parse_hipblaslt_bench(fixture("hipblaslt-bench-mi350x-bf16-print-kernel-info.txt"))
    assert (run.version, run.git_version) == ("100200", "de5c1aebb6-dirty")
    assert (run.device_name, run.gfx_target, run.memory_gb) == ("AMD Instinct MI350X", "gfx950", 270.6)
    (row,) = run.rows
    assert row.gflops == 1.30708e06 and row.tflops == pytest.approx(1307.08)
    assert row.us == 21871.2 and row.gbps == 234.327
    assert row.shape == (106496, 8192, 16384)
    assert row.values["transA"] == "T" and row.values["a_type"] == "bf16_r"
    assert row.values["swizzle_a"] == 0 and row.values["use_gpu_timer"] == 1
    assert row.solution_index == 302128
    assert row.solution_name.startswith("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64")
    assert row.kernel_name.endswith("_WG32_8_1")
    assert row.norm_error is None  # no -v
    assert run.best is row


def test_readme_f32_validate_norm_error_atol_rtol():
    (row,) = parse_hipblaslt_bench(fixture("hipblaslt-bench-readme-f32-validate.txt")).rows
    assert row.gflops == 403.298 and row.us == 10.4
    assert (row.norm_error, row.atol, row.rtol) == (2.44879e-07, 1e-05, 1e-05)
    assert row.values["CPU-Gflops"] == 0.0960059 and row.values["CPU-us"] == 43688
    assert row.values["bias_type"] == "non-supported type" and row.shape == (128, 128, 128)


def test_readme_freq_columns():
    (row,) = parse_hipblaslt_bench(fixture("hipblaslt-bench-readme-freq.txt")).rows
    assert row.values["lowest-avg-freq"] == 136 and row.values["avg-MCLK"] == 900
    assert row.gflops == 192.399 and row.us == 10.9


def test_readme_freq_all_8xcd_columns():
    (row,) = parse_hipblaslt_bench(fixture("hipblaslt-bench-readme-freq-all-8xcd.txt")).rows
    assert [row.values["avg-freq_%d" % i] for i in range(8)] == [143, 141, 143, 143, 142, 143, 141, 141]
    assert row.values["median-MCLK"] == 900 and row.gflops == 148.734 and row.us == 14.1


def test_several_blocks_and_unprefixed_header_with_crlf():
    header = "transA,transB,m,n,k,a_type,hipblaslt-Gflops,us"
    text = "\r\n".join([header, "    N,N,4096,4096,4096,f8_fnuz_r,1.1e+06,125.1",
                        "[1]:" + header, "    N,N,8192,8192,8192,f8_fnuz_r,1.2e+06,916.4", ""])
    run = parse_hipblaslt_bench(text)
    assert [row.index for row in run.rows] == [0, 1]
    assert run.best.shape == (8192, 8192, 8192) and run.best.values["a_type"] == "f8_fnuz_r"


def test_cut_values_line_is_skipped_not_misread():
    text = fixture("hipblaslt-bench-readme-f32-validate.txt")
    cut = text[: text.rindex(",0.0960059")] + "\n"
    run = parse_hipblaslt_bench(cut)
    assert run.rows == [] and run.skipped and run.best is None


def test_banner_without_result_gives_empty_rows():
    run = parse_hipblaslt_bench("hipBLASLt version: 100200\nNo solution found!\n")
    assert run.version == "100200" and run.rows == []


@pytest.mark.parametrize("text", ["", "\n \n", "Segmentation fault (core dumped)\n"])
def test_empty_or_foreign_output_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_hipblaslt_bench(text)


# issue 9: what the banner says about the run belongs in the report (a throttled clock explains a
# slow result). hipblaslt-bench prints it as in the MI350X fixture; here on an 8-GPU host.
MULTI_DEVICE_BANNER = """hipBLASLt version: 1000
hipBLASLt git version: 8c3e7a1
Query device success: there are 8 devices. (Target device ID is 3)
Device ID 3 : AMD Instinct MI300X gfx942:sramecc+:xnack-
with 191.7 GB memory, max. SCLK 2100 MHz, max. MCLK 1300 MHz, compute capability 9.4
maxGridDimX 2147483647, sharedMemPerBlock 65.5 KB, maxThreadsPerBlock 1024, warpSize 64

Is supported 1 / Total solutions: 1
[0]:transA,transB,m,n,k,a_type,hipblaslt-Gflops,hipblaslt-GB/s,us
    N,N,4096,4096,4096,f8_fnuz_r,1.2e+06,420.1,114.5
"""


def test_banner_device_count_target_device_and_clocks():
    run = parse_hipblaslt_bench(MULTI_DEVICE_BANNER)
    assert (run.device_count, run.target_device, run.device_id) == (8, 3, 3)
    assert (run.device_name, run.gfx_target, run.memory_gb) == ("AMD Instinct MI300X", "gfx942", 191.7)
    assert (run.max_sclk_mhz, run.max_mclk_mhz, run.compute_capability) == (2100.0, 1300.0, "9.4")
    assert run.device_summary == "device 3 of 8: AMD Instinct MI300X gfx942, max SCLK 2100 MHz, max MCLK 1300 MHz"
    assert run.banner[2].startswith("Query device success") and run.rows[0].gflops == 1.2e06


def test_fixture_banner_and_a_run_without_banner():
    run = parse_hipblaslt_bench(fixture("hipblaslt-bench-mi350x-bf16-print-kernel-info.txt"))
    assert (run.device_count, run.target_device, run.max_sclk_mhz, run.max_mclk_mhz) == (1, 0, 2200.0, 1900.0)
    bare = parse_hipblaslt_bench(fixture("hipblaslt-bench-readme-freq.txt"))
    assert bare.device_count is None and bare.device_summary == ""
