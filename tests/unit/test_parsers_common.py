"""Shared parser helpers (numbers, units, JSON payloads, blocks) and the fixture coverage guard."""

from pathlib import Path

import pytest

from vgpu.guest.agent.parsers import amdsmi, amdsmi_misc, hipblaslt, lspci, rocminfo, rocmsmi
from vgpu.guest.agent.parsers.blocks import parse_blocks, records, to_dict
from vgpu.guest.agent.parsers.common import (ParseError, Quantity, is_na, is_truncation,
                                             json_payload, normalize_bdf, parse_float, parse_int,
                                             parse_list, parse_quantity, size_mb)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("text,expected", [
    ("304", 304), ("304(0x130)", 304), ("29877(0x74b5)", 29877), ("0x74a1", 0x74A1), ("0x74A1", 0x74A1),
    (" 64 ", 64), ("1,024", 1024), ("N/A", None), ("n/a", None), ("Not supported", None), ("1.5", None),
    ("abc", None), (None, None), (True, None), (7, 7), (8.0, 8), ({"value": 304, "unit": ""}, 304),
])
def test_parse_int_reads_tool_spellings(text, expected):
    assert parse_int(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("1.30708e+06", 1307080.0), ("41.0", 41.0), ("5300 GB/s", 5300.0), ("0x10", 16.0),
    ("N/A mV", None), ("", None), ({"value": 750, "unit": "W"}, 750.0),
])
def test_parse_float_reads_leading_number(text, expected):
    assert parse_float(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("196288 MB", Quantity(196288.0, "MB")), ("48.0 GB", Quantity(48.0, "GB")),
    ("5300 GB/s", Quantity(5300.0, "GB/s")), ("41.0\u00b0C", Quantity(41.0, "\u00b0C")),
    ("121.0W", Quantity(121.0, "W")), ("131Mhz", Quantity(131.0, "Mhz")), ("0 %", Quantity(0.0, "%")),
    ("32(0x20) KB", Quantity(32.0, "KB")), ({"value": 196592, "unit": "MB"}, Quantity(196592.0, "MB")),
    ("N/A", None), ("N/A C", None), ("SPX", None),
])
def test_parse_quantity_keeps_unit(text, expected):
    assert parse_quantity(text) == expected


def test_size_mb_uses_binary_multiples():
    assert size_mb("200998912(0xbfb0000) KB") == 196288.0
    assert size_mb("48.0 GB") == 49152.0 and size_mb("196592 MB") == 196592.0
    assert size_mb("512", default_unit="KB") == 0.5
    assert size_mb("5300 GB/s") is None and size_mb("N/A") is None


def test_helpers_for_lists_bdfs_and_markers():
    assert parse_list("[ 0 %, N/A, 0 % ]") == ["0 %", "N/A", "0 %"]
    assert parse_list("['1', '0']") == ["1", "0"]
    assert normalize_bdf("83:00.0") == "0000:83:00.0" and normalize_bdf("0000:0C:02.0") == "0000:0c:02.0"
    assert normalize_bdf("not-a-bdf") is None and normalize_bdf(None) is None
    assert all(is_truncation(m) for m in ("...", "\u2026", "---- snipped ----", " --- snipped --- "))
    assert not is_truncation("GPU: 0") and is_na("N/A") and not is_na(0)


def test_json_payload_skips_banner_and_trailing_text():
    assert json_payload("Permission denied [x]\n  {\"a\": [1]}\nbye\n", "tool") == {"a": [1]}
    assert json_payload("[1, 2]", "tool") == [1, 2]
    with pytest.raises(ParseError):
        json_payload("{broken", "tool")
    with pytest.raises(ParseError):
        json_payload("", "tool")


def test_blocks_nesting_repeated_keys_and_record_headers():
    text = "GPU 0:\n    RAS:\n        BLOCK: UMC\n        STATUS: ENABLED\n        BLOCK: GFX\n" \
           "        STATUS: DISABLED\n        BLOCK: DF\n        STATUS: ENABLED\n    VF 1:\n        BDF: x\n"
    ((index, gpu),) = records(parse_blocks(text), "GPU")
    data = to_dict(gpu.children)
    assert index == 0
    assert data["ras"] == {"block": ["UMC", "GFX", "DF"], "status": ["ENABLED", "DISABLED", "ENABLED"]}
    assert records(gpu.children, "VF")[0][0] == 1


# Every fixture of the tools these parsers cover, and the parser that reads it. The per-tool test
# files assert the values; this guard makes sure a new fixture is not silently left untested.
COVERED = {
    "rocminfo/": rocminfo.parse_rocminfo,
    "rocm-smi/changelog-version.txt": rocmsmi.parse_rocmsmi_version,
    "rocm-smi/": rocmsmi.parse_rocmsmi,
    "lspci/baremetal-vvv-devsta-lnksta-mi300x-8gpu-health-check-doc.txt": lspci.parse_link_status,
    "lspci/": lspci.parse_lspci,
    "bench/hipblaslt-bench-": lambda text: hipblaslt.parse_hipblaslt_bench(text).rows,
    "amd-smi/changelog-monitor-": amdsmi_misc.parse_amdsmi_monitor,
    "amd-smi/doc-monitor-": amdsmi_misc.parse_amdsmi_monitor,
    "amd-smi/healthcheck-doc-monitor-": amdsmi_misc.parse_amdsmi_monitor,
    "amd-smi/changelog-version-": amdsmi_misc.parse_amdsmi_version,
    "amd-smi/dell-version-json-": lambda text: amdsmi_misc.parse_amdsmi_version(text).fields,
    "amd-smi/gim-host-version-": amdsmi_misc.parse_amdsmi_version,
    "amd-smi/guest-default-": lambda text: amdsmi_misc.parse_amdsmi_default(text).gpus,
    "amd-smi/guest-partition-": lambda text: amdsmi_misc.parse_amdsmi_partition(text).profiles,
    "amd-smi/ras-cper-": amdsmi_misc.parse_amdsmi_tables,
    "amd-smi/guest-metric-clock-fragment-": amdsmi_misc.parse_amdsmi_fragment,
    "amd-smi/process-cu-occupancy-": amdsmi_misc.parse_amdsmi_fragment,
    "amd-smi/": amdsmi.parse_amdsmi,
}
NOT_PARSED = {
    "amd-smi/changelog-xgmi-8gpu.txt": "XGMI link metrics: not used by validation",
    "amd-smi/gim-host-help.txt": "help text, not data",
    "bench/rvs-gm-json-tail-fragment.txt": "RVS results: optional, not parsed yet",
    "bench/rvs-gst-json-schema.txt": "a JSON schema, not tool output",
    "bench/rvs-gst-mi355x-8gpu-text.txt": "RVS results: optional, not parsed yet",
}
TOOLS = ("rocminfo", "rocm-smi", "lspci", "bench", "amd-smi")


def _tool_fixtures():
    return sorted("%s/%s" % (tool, path.name) for tool in TOOLS for path in (FIXTURES / tool).iterdir())


def _parser_for(name):
    return next(parser for prefix, parser in COVERED.items() if name.startswith(prefix))


@pytest.mark.parametrize("name", [n for n in _tool_fixtures() if n not in NOT_PARSED])
def test_every_tool_fixture_parses_to_something(name):
    text = (FIXTURES / name).read_text(encoding="utf-8").split("\n", 1)[1]
    assert _parser_for(name)(text), name


def test_fixture_set_is_known():
    assert len(_tool_fixtures()) >= 59  # as of this commit; new files are covered by prefix
    assert set(NOT_PARSED) <= set(_tool_fixtures())
