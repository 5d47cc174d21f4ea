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
