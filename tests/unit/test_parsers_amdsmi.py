"""amd-smi per-GPU parsers (text, JSON, CSV; ROCm and GIM host flavours) on every fixture they apply to."""

import json
from pathlib import Path

import pytest

from vgpu.guest.agent.parsers.amdsmi import (parse_amdsmi, parse_amdsmi_csv, parse_amdsmi_json,
                                             parse_amdsmi_text)
from vgpu.guest.agent.parsers.blocks import parse_blocks, to_dict
from vgpu.guest.agent.parsers.common import ParseError, parse_list

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> str:
    """The fixture's text without its '# fixture:' header line."""
    text = (FIXTURES / "amd-smi" / name).read_text(encoding="utf-8")
    assert text.startswith("# fixture:"), name
    return text.split("\n", 1)[1]


# --- ROCm amd-smi, text -------------------------------------------------------------------------

def test_guest_static_mi325x_vf_asic_and_bus():
    (gpu,) = parse_amdsmi_text(fixture("guest-static-mi325x-vf-74b9.txt"))
    assert gpu.index == 0 and gpu.bdf == "0000:83:00.0"
    assert gpu.market_name == "AMD Instinct Mi325X VF"
    assert gpu.device_id_hex == "0x74b9" and gpu.subsystem_id == 0x74A5
    assert gpu.compute_units == 304 and gpu.gfx_target == "gfx942" and gpu.oam_id == 6
    assert gpu.fields["bus"]["max_pcie_speed"] == "32 GT/s"
    assert gpu.vram_total_mb is None  # the fixture is cut before the VRAM section


def test_changelog_static_asic_mi308x():
    (gpu,) = parse_amdsmi_text(fixture("changelog-static-asic-mi308x.txt"))
    assert gpu.market_name == "MI308X" and gpu.device_id == 0x74A2
    assert gpu.compute_units == 20 and gpu.gfx_target == "gfx942"
    assert gpu.fields["asic"]["asic_serial"] == "<redacted>"


def test_changelog_static_partition_cpx_nps4():
    (gpu,) = parse_amdsmi_text(fixture("changelog-static-partition-cpx-nps4.txt"))
    assert (gpu.compute_partition, gpu.memory_partition, gpu.partition_id) == ("CPX", "NPS4", 0)


def test_changelog_list_kfd_partition_two_gpus():
    gpus = parse_amdsmi_text(fixture("changelog-list-kfd-partition.txt"))
    assert [(g.index, g.bdf, g.kfd_id, g.node_id, g.partition_id) for g in gpus] == [
        (0, "0000:23:00.0", 45412, 1, 0), (1, "0000:26:00.0", 59881, 2, 0)]


def test_guest_list_mi325x_vf_snipped():
    gpus = parse_amdsmi_text(fixture("guest-list-mi325x-vf.txt"))
    assert [g.bdf for g in gpus] == ["0000:83:00.0", "0000:8b:00.0"]
    assert gpus[1].uuid == "10ff74b9-0000-1000-8000-000000001110" and gpus[1].node_id == 8


def test_guest_list_e_mi325x_vf_extra_ids():
    gpus = parse_amdsmi_text(fixture("guest-list-e-mi325x-vf.txt"))
    assert [g.hip_id for g in gpus] == [7, 6]
    assert gpus[0].fields["render"] == "renderD185" and gpus[0].fields["hip_uuid"] == "GPU-1000000000001101"
    assert gpus[1].fields["hsa_id"] == "8" and gpus[1].fields["card"] == "card49"


def test_changelog_metric_pcie_values_and_na():
    gpus = parse_amdsmi_text(fixture("changelog-metric-pcie.txt"))
    assert len(gpus) == 2
    pcie = gpus[1].fields["pcie"]
    assert pcie["width"] == "16" and pcie["speed"] == "32 GT/s"
    assert pcie["current_bandwidth_sent"] == "N/A"


def test_changelog_metric_usage_xcp_wrapped_lists():
    gpus = parse_amdsmi_text(fixture("changelog-metric-usage-xcp.txt"))
    usage = gpus[0].fields["usage"]
    assert usage["gfx_activity"] == "0 %" and usage["mm_activity"] == "N/A"
    jpeg = parse_list(usage["jpeg_activity"])  # wrapped over three lines in the fixture
    assert len(jpeg) == 32 and jpeg[:8] == ["0 %"] * 8 and jpeg[8:] == ["N/A"] * 24
    assert sorted(usage["gfx_busy_inst"]) == ["xcp_%d" % i for i in range(8)]
    assert len(parse_list(usage["jpeg_busy"]["xcp_7"])) == 32
    assert len(gpus) == 2 and "usage" in gpus[1].fields


def test_guest_metric_clock_fragment_without_gpu_header():
    text = fixture("guest-metric-clock-fragment-mi325x-vf.txt")
    with pytest.raises(ParseError):
        parse_amdsmi_text(text)
    data = to_dict(parse_blocks(text))
    assert data["gfx_7"]["max_clk"] == "2100 MHz" and data["mem_0"]["clk"] == "1198 MHz"
    assert data["vclk_0"] == {"clk": "40 MHz"}


def test_process_cu_occupancy_fragment_blocks():
    data = to_dict(parse_blocks(fixture("process-cu-occupancy-fragment.txt")))
    info = data["process_info"]
    assert info["pid"] == "230139" and info["cu_occupancy"] == "0"
    assert info["memory_usage"]["vram_mem"] == "503.9 MB"


# --- ROCm amd-smi, JSON -------------------------------------------------------------------------

def test_dell_static_json_root_eight_mi300x():
    gpus = parse_amdsmi_json(fixture("dell-static-json-8x-mi300x-root.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0].bdf == "0000:1b:00.0" and gpus[7].bdf == "0000:dd:00.0"
    assert {g.market_name for g in gpus} == {"AMD Instinct MI300X"}
    assert {g.device_id for g in gpus} == {0x74A1} and {g.compute_units for g in gpus} == {304}
    assert {g.vram_total_mb for g in gpus} == {196592.0}
    assert (gpus[0].driver_name, gpus[0].driver_version) == ("amdgpu", "6.16.13")
    assert gpus[0].vbios_version == "00159017" and gpus[1].oam_id == 0
    assert gpus[0].fields["vram"]["max_bandwidth"] == {"value": 5325, "unit": "GB/s"}


def test_dell_static_json_nonroot_banner_and_na_fields():
    gpus = parse_amdsmi_json(fixture("dell-static-json-8x-mi300x-nonroot.txt"))
    assert len(gpus) == 8 and gpus[3].bdf == "0000:5f:00.0"
    assert gpus[0].market_name is None and gpus[0].compute_units is None
    assert gpus[0].vram_total_mb is None and gpus[0].driver_version is None


def test_auto_dispatch_picks_json_text_and_csv():
    assert parse_amdsmi(fixture("dell-static-json-8x-mi300x-root.txt"))[0].compute_units == 304
    assert parse_amdsmi(fixture("guest-list-mi325x-vf.txt"))[0].kfd_id == 43855
    assert parse_amdsmi(fixture("gim-host-list-csv-mi300x.txt"))[0].vfs[0].index == 0


# --- GIM host amd-smi ---------------------------------------------------------------------------

def test_gim_host_list_text_vf_nested_under_gpu():
    (gpu,) = parse_amdsmi_text(fixture("gim-host-list-mi300x.txt"))
    assert gpu.bdf == "0000:0c:00.0" and gpu.uuid == "10ff74a1-0000-1000-8000-000000001010"
    assert [(vf.index, vf.bdf, vf.uuid) for vf in gpu.vfs] == [
        (0, "0000:0c:02.0", "100074a1-0000-1000-8000-000000001010")]
    assert "vf" not in gpu.fields  # the VF record is not mixed into the GPU's own keys


@pytest.mark.parametrize("name,parser", [
    ("gim-host-list-json-mi300x.txt", parse_amdsmi_json),
    ("gim-host-list-csv-mi300x.txt", parse_amdsmi_csv),
])
def test_gim_host_list_json_and_csv_agree_with_text(name, parser):
    (gpu,) = parser(fixture(name))
    assert (gpu.index, gpu.bdf) == (0, "0000:0c:00.0")
    assert [(vf.index, vf.bdf) for vf in gpu.vfs] == [(0, "0000:0c:02.0")]
    assert gpu.vfs[0].uuid == "100074a1-0000-1000-8000-000000001010"


def test_gim_host_discovery_windows_gpu_header_form():
    (gpu,) = parse_amdsmi_text(fixture("gim-host-discovery-windows.txt"))  # "GPU 0:" / "VF 0:"
    assert gpu.bdf == "0000:83:00.0" and gpu.vfs[0].bdf == "0000:83:02.0"
    assert gpu.vfs[0].uuid.startswith("100073c8")


def test_gim_host_static_doc_v32_compute_units_and_vbios():
    (gpu,) = parse_amdsmi_text(fixture("gim-host-static-mi300x-doc-v32.txt"))
    assert gpu.market_name == "MI300X" and gpu.device_id_hex == "0x74a1"
    assert gpu.compute_units == 304  # NUM_OF_COMPUTE_UNITS in the GIM flavour
    assert gpu.vbios_version == "022.040.003.036.000001"
    assert gpu.vram_total_mb == 196592.0 and gpu.bdf == "0000:0c:00.0"
    assert gpu.fields["vram"]["max_bandwidth"] == "5300 GB/s"
    assert gpu.fields["limit"]["slowdown_edge_temperature"] == "N/A C"


def test_gim_host_static_windows_older_layout():
    (gpu,) = parse_amdsmi_text(fixture("gim-host-static-mi300x-windows.txt"))
    assert gpu.market_name == "MI300" and gpu.compute_units is None
    assert (gpu.driver_name, gpu.driver_version) == ("AMDGPUV", "21.9.0")
    assert gpu.vram_total_mb == 196592.0
    assert gpu.fields["num_vf"] == {"num_vf_supported": "1", "num_vf_enabled": "1"}
    assert gpu.fields["fb_info"]["max_vf_fb_usable"] == "196056 MB"
    caps = gpu.fields["ras"]["caps"]
    assert caps["block"][:3] == ["UMC", "SDMA", "GFX"] and len(caps["block"]) == len(caps["status"])
    assert gpu.fields["cache_info"]["cache 4"]["cache_size"] == "262144 KB"


def test_gim_host_metric_usage_power_and_throttle():
    (gpu,) = parse_amdsmi_text(fixture("gim-host-metric-usage-power-mi300x.txt"))
    assert gpu.fields["power"]["average_socket_power"] == "224 W"
    assert len(parse_list(gpu.fields["usage"]["jpeg_activity"])) == 32
    assert parse_list(gpu.fields["usage"]["vcn_activity"]) == ["0 %"] * 4
    (throttle,) = parse_amdsmi_text(fixture("gim-host-metric-throttle-doc-v32.txt"))
    assert throttle.fields["throttle"]["accumulation_counter"] == "4872059"


def test_gim_host_metric_temperature_json_single_object():
    (gpu,) = parse_amdsmi_json(fixture("gim-host-metric-temperature-json.txt"))
    assert gpu.index == 0 and gpu.fields["temperature"]["hotspot_temperature"] == 43


# --- robustness ---------------------------------------------------------------------------------

def test_crlf_tabs_and_trailing_spaces_in_text():
    text = fixture("guest-static-mi325x-vf-74b9.txt")
    mangled = "\r\n".join(line.replace("    ", "\t") + "  " for line in text.split("\n"))
    (gpu,) = parse_amdsmi_text(mangled)
    assert gpu.compute_units == 304 and gpu.bdf == "0000:83:00.0" and gpu.device_id == 0x74B9


def test_unknown_keys_survive_version_drift():
    text = ("GPU: 0\n    ASIC:\n        MARKET_NAME: MI3XX\n        NEW_KEY: 7\n"
            "    NEW_SECTION:\n        A: b\n")
    (gpu,) = parse_amdsmi_text(text)
    assert gpu.fields["asic"]["new_key"] == "7" and gpu.fields["new_section"] == {"a": "b"}


def test_json_with_trailing_text_and_list_form():
    payload = json.dumps([{"gpu": 1, "bdf": "0000:0C:00.0", "asic": {"num_compute_units": "38"}}])
    (gpu,) = parse_amdsmi_json("warning: something\n" + payload + "\ntrailing noise\n")
    assert (gpu.index, gpu.bdf, gpu.compute_units) == (1, "0000:0c:00.0", 38)


@pytest.mark.parametrize("parser,text", [
    (parse_amdsmi_text, ""),
    (parse_amdsmi_text, "amd-smi: command not found\n"),
    (parse_amdsmi_json, "no json here"),
    (parse_amdsmi_json, '{"something": "else"}'),
    (parse_amdsmi_csv, "a,b\n1,2\n"),
    (parse_amdsmi, "   \n"),
])
def test_empty_or_foreign_output_raises_parse_error(parser, text):
    with pytest.raises(ParseError):
        parser(text)
