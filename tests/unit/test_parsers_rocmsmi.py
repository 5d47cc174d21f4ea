"""rocm-smi parser on every rocm-smi fixture, plus edge cases."""

from pathlib import Path

import pytest

from vgpu.guest.agent.parsers.common import ParseError
from vgpu.guest.agent.parsers.rocmsmi import parse_rocmsmi, parse_rocmsmi_version

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> str:
    """The fixture's text without its '# fixture:' header line."""
    text = (FIXTURES / "rocm-smi" / name).read_text(encoding="utf-8")
    assert text.startswith("# fixture:"), name
    return text.split("\n", 1)[1]


def test_concise_1x_mi300x_model_revision_layout():
    smi = parse_rocmsmi(fixture("baremetal-concise-1x-mi300x-model-revision.txt"))
    assert "Concise Info" in smi.sections
    (gpu,) = smi.gpus
    assert gpu.device_id_hex == "0x74a1" and gpu.revision == 0
    assert gpu.name == "AMD Instinct MI300X"  # printed on the line under the row
    assert (gpu.memory_partition, gpu.compute_partition) == ("NPS1", "SPX")
    assert (gpu.temperature_c, gpu.power_w, gpu.power_cap_w) == (41.0, 121.0, 750.0)
    assert gpu.fields["SCLK"] == "131Mhz" and gpu.fields["Perf"] == "auto"


def test_concise_4x_mi300x_model_revision_layout():
    smi = parse_rocmsmi(fixture("baremetal-concise-4x-mi300x-model-revision.txt"))
    assert [g.index for g in smi.gpus] == [0, 1, 2, 3]
    assert {g.name for g in smi.gpus} == {"AMD Instinct MI300X"}
    assert [g.power_w for g in smi.gpus] == [133.0, 131.0, 131.0, 137.0]
    assert smi.gpu(3).temperature_c == 38.0


def test_concise_8x_mi300x_rocm642_ids_and_partitions_layout():
    smi = parse_rocmsmi(fixture("baremetal-concise-8x-mi300x-rocm6.4.2.txt"))
    assert len(smi.gpus) == 8
    assert [g.node for g in smi.gpus] == list(range(2, 10))
    assert {g.device_id for g in smi.gpus} == {0x74A1}
    assert smi.gpu(0).guid == 55354 and smi.gpu(5).guid == 705
    assert smi.gpu(5).temperature_c == 46.0  # a short GUID must not shift the next column
    modes = {(g.memory_partition, g.compute_partition, g.partition_id) for g in smi.gpus}
    assert modes == {("NPS1", "SPX", 0)}
    assert smi.gpu(7).vram_percent == 0.0 and smi.gpu(7).gpu_percent == 0.0


def test_showall_4x_mi300x_tab_separated_sections():
    smi = parse_rocmsmi(fixture("baremetal-showall-4x-mi300x.txt"))
    assert smi.driver_version == "6.7.0"
    assert "Current Compute Partition" in smi.sections
    assert [g.bdf for g in smi.gpus] == ["0000:26:00.0", "0000:46:00.0", "0000:65:00.0", "0000:85:00.0"]
    gpu = smi.gpu(0)
    assert gpu.device_id_hex == "0x74a1" and gpu.name == "AMD Instinct MI300X OAM"
    assert (gpu.compute_partition, gpu.memory_partition) == ("SPX", "NPS1")
    assert gpu.fields["VBIOS version"] == "113-MI3SRIOV-001"
    assert gpu.fields["Card SKU"] == "MI3SRIOV"  # TABs inside the value are collapsed
    assert gpu.fields["SMC firmware version"] == "00.85.91.00"
    assert "Not supported" in gpu.notes


def test_id_mi300a():
    smi = parse_rocmsmi(fixture("changelog-id-mi300a.txt"))
    assert [g.guid for g in smi.gpus] == [60294, 35406, 10263, 52959]
    assert {g.device_id_hex for g in smi.gpus} == {"0x74a0"}
    assert smi.gpu(2).name == "Aqua Vanjaram [Instinct MI300A]"
    assert smi.gpu(1).fields["Subsystem ID"] == "0x74a0"


def test_showbus_partitioned_24_logical_gpus_share_functions():
    smi = parse_rocmsmi(fixture("changelog-showbus-partitioned-mi300.txt"))
    assert len(smi.gpus) == 24
    assert smi.gpu(0).bdf == "0000:01:00.0" and smi.gpu(4).bdf == "0000:01:00.1"
    assert smi.gpu(23).bdf == "0003:01:00.0"
    assert sum(1 for g in smi.gpus if g.bdf == "0000:01:00.5") == 4


def test_showhw_mi300a_tpx_12_logical_gpus():
    smi = parse_rocmsmi(fixture("changelog-showhw-mi300a-tpx.txt"))
    assert len(smi.gpus) == 12
    gpu = smi.gpu(4)
    assert (gpu.node, gpu.device_id_hex, gpu.guid, gpu.gfx_version) == (8, "0x74a0", 45692, "gfx942")
    assert (gpu.bdf, gpu.partition_id) == ("0001:01:00.0", 1)
    assert gpu.fields["UMC RAS"] == "DISABLED" and gpu.fields["VBIOS"] == "N/A"


def test_showproduct_mi300a_card_series_capital_s():
    smi = parse_rocmsmi(fixture("changelog-showproduct-mi300a.txt"))
    assert [g.node for g in smi.gpus] == [4, 5, 6, 7]
    assert {g.gfx_version for g in smi.gpus} == {"gfx942"}
    assert smi.gpu(0).name == "Aqua Vanjaram [Instinct MI300A]" and smi.gpu(0).device_id == 0x74A0
    assert smi.gpu(0).fields["Card SKU"] == "N/A"


def test_showmetrics_per_xcp_lines_with_truncation():
    smi = parse_rocmsmi(fixture("changelog-showmetrics-xcp.txt"))
    assert [g.index for g in smi.gpus] == [0, 1]
    assert smi.gpu(1).fields["vram_max_bandwidth (GB/s)"] == "1555"
    assert sorted(smi.gpu(0).xcp) == list(range(8))
    assert smi.gpu(1).xcp[7]["xcp_stats.gfx_below_host_limit_acc (%)"].startswith("['0'")


def test_version():
    version = parse_rocmsmi_version(fixture("changelog-version.txt"))
    assert (version.smi_version, version.lib_version) == ("2.0.0+8e78352", "6.0.0")


def test_crlf_input_parses_like_lf():
    text = fixture("baremetal-concise-8x-mi300x-rocm6.4.2.txt")
    crlf = parse_rocmsmi(text.replace("\n", "\r\n"))
    assert [(g.guid, g.power_w) for g in crlf.gpus] == [(g.guid, g.power_w) for g in parse_rocmsmi(text).gpus]


def test_na_partition_cells_become_none():
    text = ("Device  Node  IDs              Temp        Power     Partitions          SCLK\n"
            "0       2     0x74b5,   12345  N/A         N/A       N/A, N/A, N/A       N/A\n")
    (gpu,) = parse_rocmsmi(text).gpus
    assert gpu.device_id == 0x74B5 and gpu.compute_partition is None and gpu.power_w is None


@pytest.mark.parametrize("parser,text", [
    (parse_rocmsmi, ""),
    (parse_rocmsmi, "Traceback (most recent call last):\n  File x\n"),
    (parse_rocmsmi_version, "rocm-smi: command not found\n"),
])
def test_empty_or_foreign_output_raises_parse_error(parser, text):
    with pytest.raises(ParseError):
        parser(text)


# issue 9: a wrapper script echoes its own '=== ... ===' lines around rocm-smi's output.
def test_a_wrappers_echo_lines_are_not_rocm_smi_sections():
    real = fixture("baremetal-concise-8x-mi300x-rocm6.4.2.txt")
    text = ("=== rocm-smi on gpu-node-07 ===\n" + real + "\n=== exit code 0 ===\n"
            "========== collected by healthcheck.sh ==========\n")
    smi = parse_rocmsmi(text)
    assert smi.sections == ["ROCm System Management Interface", "Concise Info", "End of ROCm SMI Log"]
    assert len(smi.gpus) == 8 and smi.gpu(7).guid == 10985


def test_only_a_wrappers_echo_lines_is_not_rocm_smi_output():
    with pytest.raises(ParseError):
        parse_rocmsmi("=== rocm-smi ===\n=== done ===\n")


def test_concise_table_in_another_column_order_is_read_by_header_name():
    text = ("=============================== ROCm System Management Interface ===============================\n"
            "Temp        Device  Power     IDs              GPU%\n"
            "(Junction)          (Socket)  (DID,     GUID)\n"
            "51.0\u00b0C      0       N/A       0x74A1,   55354  0%\n")
    (gpu,) = parse_rocmsmi(text).gpus
    assert (gpu.index, gpu.temperature_c, gpu.power_w, gpu.device_id, gpu.guid) == (0, 51.0, None, 0x74A1, 55354)
