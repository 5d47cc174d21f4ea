"""amd-smi version, default summary, monitor, partition and aligned-table parsers on their fixtures."""

from pathlib import Path

import pytest

from vgpu.guest.agent.parsers.amdsmi_misc import (clock_mhz, parse_amdsmi_default,
                                                  parse_amdsmi_fragment, parse_amdsmi_monitor,
                                                  parse_amdsmi_partition, parse_amdsmi_tables,
                                                  parse_amdsmi_version)
from vgpu.guest.agent.parsers.common import ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> str:
    """The fixture's text without its '# fixture:' header line."""
    text = (FIXTURES / "amd-smi" / name).read_text(encoding="utf-8")
    assert text.startswith("# fixture:"), name
    return text.split("\n", 1)[1]


# --- version ------------------------------------------------------------------------------------

def test_version_rocm61_one_line_form_has_no_amdgpu_field():
    version = parse_amdsmi_version(fixture("changelog-version-6.1.txt"))
    assert version.tool_version == "23.4.2+505b858"
    assert version.library_version == "24.2.0.0" and version.rocm_version == "6.1.0"
    assert version.amdgpu_version is None


def test_version_rocm_newer_one_line_form_with_amdgpu():
    line = ("AMDSMI Tool: 24.6.3+9578815 | AMDSMI Library version: 24.6.3.0 | ROCm version: 6.2.1 | "
            "amdgpu version: 6.8.5 | hsmp version: N/A\r\n")
    version = parse_amdsmi_version(line)
    assert (version.rocm_version, version.amdgpu_version) == ("6.2.1", "6.8.5")


def test_version_gim_host_multi_line_block():
    version = parse_amdsmi_version(fixture("gim-host-version-doc-v32.txt"))
    assert version.tool_name == "AMD SMI tool"
    assert (version.tool_version, version.library_version) == ("29.0.0", "35.0.0")
    assert version.rocm_version is None


def test_version_json_root_and_nonroot():
    root = parse_amdsmi_version(fixture("dell-version-json-root.txt"))
    assert (root.tool_version, root.library_version) == ("26.2.2+e1a6bc5663", "26.2.2")
    assert (root.rocm_version, root.amdgpu_version) == ("7.2.1", "6.16.13")
    nonroot = parse_amdsmi_version(fixture("dell-version-json-nonroot.txt"))
    assert nonroot.rocm_version == "7.2.1"
    assert nonroot.amdgpu_version is None  # an error string, not a version, as non-root
    assert nonroot.fields["amdgpu_version"].startswith("AMDSMI_STATUS_FILE_ERROR")


# --- default summary ----------------------------------------------------------------------------

def test_default_summary_guest_mi300x_vf_droplet():
    summary = parse_amdsmi_default(fixture("guest-default-mi300x-vf-droplet.txt"))
    assert summary.tool_version == "26.2.2+97f5574fe2"
    assert (summary.amdgpu_version, summary.rocm_version) == ("6.16.13", "7.2.4")
    assert summary.vbios_version == "00123529" and summary.platform == "Linux Guest"
    (gpu,) = summary.gpus
    assert gpu.bdf == "0000:83:00.0" and gpu.market_name == "AMD Instinct MI300X VF"
    assert (gpu.index, gpu.hip_id, gpu.oam_id) == (0, 0, 3)
    assert (gpu.compute_partition, gpu.memory_partition) == ("SPX", "NPS1")
    assert gpu.vram_total_mb == 196288.0 and gpu.fields["vram_used_mb"] == 285.0
    assert (gpu.fields["power_w"], gpu.fields["power_cap_w"]) == (160.0, 750.0)


# --- monitor ------------------------------------------------------------------------------------

def test_monitor_ptumv_8gpu_vram_and_power():
    rows = parse_amdsmi_monitor(fixture("changelog-monitor-ptumv-8gpu.txt"))
    assert [r.gpu for r in rows] == list(range(8))
    assert {r.vram_total_mb for r in rows} == {196300.0}
    assert rows[4].vram_used_mb == 284.0 and rows[0].value("POWER") == 171.0
    assert rows[0].value("GPU_TEMP") == 32.0 and rows[7].value("GFX_CLOCK") == 113.0


def test_monitor_32_logical_gpus_each_report_full_vram():
    rows = parse_amdsmi_monitor(fixture("changelog-monitor-ptv-32-logical-gpus.txt"))
    assert len(rows) == 32 and rows[31].gpu == 31
    assert rows[4].value("POWER") == 221.0 and {r.vram_total_mb for r in rows} == {196300.0}


def test_monitor_cpx_nps4_xcp_rows_with_na_and_padded_usage():
    rows = parse_amdsmi_monitor(fixture("doc-monitor-mi300x-cpx-nps4-xcp.txt"))
    assert len(rows) == 8 and [r.xcp for r in rows[:4]] == [0, 1, 2, 3]
    assert rows[0].vram_total_mb == 192.0 * 1024 and rows[1].vram_total_mb == 48.0 * 1024
    assert rows[1].vram_used_mb == 512.0  # "0.5/ 48.0 GB"
    assert rows[1].value("POWER") is None and rows[4].value("GFX_CLK") == 1423.0


def test_monitor_reformatted_health_check_doc_with_markup():
    rows = parse_amdsmi_monitor(fixture("healthcheck-doc-monitor-putm-8gpu-reformatted.txt"))
    assert len(rows) == 8
    assert rows[2].value("GFX_CLOCK") == 141.0 and rows[2].value("GFX_UTIL") == 0.0
    assert rows[0].vram_total_mb is None  # no VRAM column in -putm


def test_monitor_row_with_wrong_cell_count_is_skipped():
    text = "GPU  POWER  VRAM_TOTAL\n  0  171 W  196300 MB\n  1  garbled\n"
    rows = parse_amdsmi_monitor(text)
    assert [r.gpu for r in rows] == [0]


# --- partition and tables -----------------------------------------------------------------------

def test_partition_mi325x_vf_spx_nps1_current_and_profiles():
    parts = parse_amdsmi_partition(fixture("guest-partition-mi325x-vf-spx-nps1.txt"))
    assert parts.compute_partition(0) == "SPX" and parts.memory_partition(0) == "NPS1"
    assert [(p.index, p.accelerator_type, p.num_partitions) for p in parts.profiles] == [
        (0, "SPX", 1), (1, "DPX", 2), (2, "QPX", 4), (3, "CPX", 8)]
    assert [p.current for p in parts.profiles] == [True, False, False, False]
    cpx = parts.profiles[3]
    assert [(r["RESOURCE_TYPE"], r["RESOURCE_INSTANCES"]) for r in cpx.resources] == [
        ("XCC", "1"), ("DECODER", "1"), ("DMA", "2"), ("JPEG", "8")]
    assert parts.tables["MEMORY_PARTITION"][0]["CURRENT_MEMORY_PARTITION"] == "NPS1"
    assert len(parts.tables["ACCELERATOR_PARTITION_RESOURCES"]) == 16


def test_ras_cper_table_after_warning_line():
    (rows,) = parse_amdsmi_tables(fixture("ras-cper-list.txt")).values()
    assert rows == [
        {"timestamp": "2025/10/07 09:58:04", "gpu_id": "0", "severity": "FATAL"},
        {"timestamp": "2025/10/09 05:09:13", "gpu_id": "0", "severity": "FATAL"},
    ]


def test_fragment_parses_cut_metric_clock_record():
    data = parse_amdsmi_fragment(fixture("guest-metric-clock-fragment-mi325x-vf.txt"))
    assert clock_mhz(data["gfx_7"]["clk"]) == 131.0 and clock_mhz("1300Mhz") == 1300.0
    assert clock_mhz("2.1 GHz") == 2100.0 and clock_mhz("N/A") is None


@pytest.mark.parametrize("parser,text", [
    (parse_amdsmi_version, ""),
    (parse_amdsmi_version, "something: else\n"),
    (parse_amdsmi_default, "GPU: 0\n    BDF: 0000:83:00.0\n"),
    (parse_amdsmi_monitor, "no table here\n"),
    (parse_amdsmi_partition, "timestamp            gpu_id  severity\n2025/10/07 09:58:04  0       FATAL\n"),
    (parse_amdsmi_tables, "just one line\n"),
    (parse_amdsmi_fragment, "\n\n"),
])
def test_foreign_or_empty_output_raises_parse_error(parser, text):
    with pytest.raises(ParseError):
        parser(text)


# --- issue 9: outputs of shapes the parsers had not seen -----------------------------------------

# `amd-smi monitor -p -t -v -w 1 -i 2` on two GPUs, as amdsmi_cli prints it: the watch banner, then
# per sample a header whose 'TIMESTAMP'.rjust(10) starts with a space, the rows, and print("\n").
MONITOR_WATCH = """'CTRL' + 'C' to stop watching output:
 TIMESTAMP  GPU  POWER  GPU_TEMP  MEM_TEMP  VRAM_USED  VRAM_TOTAL
1733226101    0  171 W     32 \u00b0C     33 \u00b0C     283 MB   196300 MB
1733226101    1    N/A     33 \u00b0C       N/A     283 MB   196300 MB


 TIMESTAMP  GPU  POWER  GPU_TEMP  MEM_TEMP  VRAM_USED  VRAM_TOTAL
1733226102    0  174 W     33 \u00b0C     33 \u00b0C    1283 MB   196300 MB
1733226102    1    N/A     33 \u00b0C       N/A     283 MB   196300 MB


"""


def test_monitor_watch_output_gives_every_sample_with_its_timestamp():
    rows = parse_amdsmi_monitor(MONITOR_WATCH)
    assert [(r.timestamp, r.gpu) for r in rows] == [(1733226101, 0), (1733226101, 1), (1733226102, 0),
                                                    (1733226102, 1)]
    assert rows[0].value("POWER") == 171.0 and rows[1].value("POWER") is None
    assert rows[2].vram_used_mb == 1283.0 and {r.vram_total_mb for r in rows} == {196300.0}
    assert rows[3].cells["MEM_TEMP"] == "N/A" and rows[3].cells["TIMESTAMP"] == "1733226102"


def test_monitor_watch_with_the_process_table_and_a_prompt_keeps_only_metric_rows():
    text = ("user@mi300x-host:~$ amd-smi monitor -p -q -w 5\n" + MONITOR_WATCH.split("\n\n\n")[0] + "\n\n"
            "PROCESS INFO:\n"
            " TIMESTAMP  GPU                  NAME      PID   GTT_MEM   CPU_MEM  VRAM_MEM  MEM_USAGE     GFX     ENC\n"
            "1733226101    0                python  1234567    2.0 MB   76.8 MB    1.5 GB     1.6 GB     0 ns    0 ns\n"
            "user@mi300x-host:~$ \n")
    rows = parse_amdsmi_monitor(text)
    assert [(r.timestamp, r.gpu) for r in rows] == [(1733226101, 0), (1733226101, 1)]
    assert all("PID" not in r.cells for r in rows)


def test_monitor_watch_stopped_before_its_first_sample_has_no_rows():
    assert parse_amdsmi_monitor("'CTRL' + 'C' to stop watching output:\n^C\n") == []


# What the GIM host's amd-smi printed in amd/MxGPU-Virtualization issue 13, prompts and all.
GIM_PARTITION_TRANSCRIPT = """ubuntu@gpu-host:~$ sudo amd-smi partition --accelerator

ubuntu@gpu-host:~$ sudo amd-smi partition --memory

ubuntu@gpu-host:~$
"""


@pytest.mark.parametrize("text", ["\n", "", GIM_PARTITION_TRANSCRIPT, "$ amd-smi partition --memory\n\n"])
def test_partition_on_a_gim_host_prints_no_tables_and_means_no_partition_data(text):
    parts = parse_amdsmi_partition(text)
    assert parts.empty and parts.note == "no partition data"
    assert parts.compute_partition(0) is None and parts.memory_partition(0) is None


def test_partition_memory_and_accelerator_forms_alone():
    memory = ("$ amd-smi partition --memory\n"
              "MEMORY_PARTITION:\n"
              "GPU_ID  MEMORY_PARTITION_CAPS  CURRENT_MEMORY_PARTITION\n"
              "0       NPS1, NPS4             NPS4\n"
              "1       NPS1, NPS4             N/A\n")
    parts = parse_amdsmi_partition(memory)
    assert parts.memory_partition(0) == "NPS4" and parts.memory_partition(1) is None
    assert parts.tables["MEMORY_PARTITION"][0]["MEMORY_PARTITION_CAPS"] == "NPS1, NPS4" and parts.note is None
    full = fixture("guest-partition-mi325x-vf-spx-nps1.txt")
    accelerator = full[full.index("ACCELERATOR_PARTITION_PROFILES:"):]
    parts = parse_amdsmi_partition(accelerator)
    assert "CURRENT_PARTITION" not in parts.tables and parts.compute_partition(0) == "SPX"
    assert [p.accelerator_type for p in parts.profiles] == ["SPX", "DPX", "QPX", "CPX"]


# The inbox amdgpu (no amdgpu-dkms): amd-smi reports the kernel's /proc/version string as the
# amdgpu version, in the one-line text form and in --json.
PROC_VERSION = ("Linux version 6.8.0-52-generic (buildd@lcy02-amd64-046) (x86_64-linux-gnu-gcc-13 "
                "(Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #53-Ubuntu SMP "
                "PREEMPT_DYNAMIC Sat Jan 11 00:06:25 UTC 2025")


@pytest.mark.parametrize("text", [
    "AMDSMI Tool: 24.7.1+0012a68 | AMDSMI Library version: 24.7.1.0 | ROCm version: 6.3.1 | "
    "amdgpu version: %s | hsmp version: N/A\n" % PROC_VERSION,
    '[\n    {\n        "tool": "AMDSMI Tool",\n        "version": "24.7.1+0012a68",\n'
    '        "amdsmi_library_version": "24.7.1.0",\n        "rocm_version": "6.3.1",\n'
    '        "amdgpu_version": "%s",\n        "amd_hsmp_driver_version": "N/A"\n    }\n]' % PROC_VERSION,
])
def test_version_with_the_inbox_driver_keeps_the_kernel_release(text):
    version = parse_amdsmi_version(text)
    assert version.amdgpu_version is None and version.kernel_release == "6.8.0-52-generic"
    assert version.rocm_version == "6.3.1" and version.fields["amdgpu_version"] == PROC_VERSION


def test_version_with_a_driver_version_has_no_kernel_release():
    assert parse_amdsmi_version(fixture("dell-version-json-root.txt")).kernel_release is None
