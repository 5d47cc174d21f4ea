"""rocminfo parser: every rocminfo fixture, plus whitespace/line-ending/edge cases."""

from pathlib import Path

import pytest

from vgpu.guest.agent.parsers.common import ParseError
from vgpu.guest.agent.parsers.rocminfo import parse_rocminfo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> str:
    """The fixture's text without its '# fixture:' header line."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert text.startswith("# fixture:"), name
    return text.split("\n", 1)[1]


GUEST = "rocminfo/guest-mi300x-vf-droplet-rocm7.2.txt"
BAREMETAL = "rocminfo/baremetal-4x-mi300x-epyc9474f.txt"
ABRIDGED = "rocminfo/baremetal-mi325x-abridged-issue6023.txt"


def test_guest_mi300x_vf_droplet_gpu_agent_values():
    info = parse_rocminfo(fixture(GUEST))
    assert info.rock_loaded and info.rock_version == "6.16.13"
    assert info.runtime_version == "1.18" and info.runtime_ext_version == "1.15"
    assert [a.device_type for a in info.agents] == ["CPU", "GPU"]
    (gpu,) = info.gpus
    assert gpu.name == "gfx942" and gpu.gfx_target == "gfx942"
    assert gpu.marketing_name == "AMD Instinct MI300X VF"
    assert gpu.vendor_name == "AMD"
    assert gpu.compute_units == 304 and gpu.simds_per_cu == 4
    assert gpu.chip_id == 29877 and gpu.chip_id_hex == "0x74b5"
    assert gpu.node == 1 and gpu.uuid == "GPU-1000000000010100"
    assert gpu.bdf == "83:00.0"  # BDFID 33536 = 0x8300
    assert gpu.vram_kb == 200998912 and gpu.vram_mb == 196288.0
    assert gpu.isas == ["amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
                        "amdgcn-amd-amdhsa--gfx9-4-generic:sramecc+:xnack-"]
    assert gpu.sections["Cache Info"]["L2"] == "4096(0x1000) KB"
    assert gpu.fields["Max Clock Freq. (MHz)"] == "2100"
    assert gpu.fields["Packet Processor uCode"] == "189"


def test_guest_mi300x_vf_droplet_cpu_agent_and_pools():
    info = parse_rocminfo(fixture(GUEST))
    (cpu,) = info.cpus
    assert cpu.name == "INTEL(R) XEON(R) PLATINUM 8568Y+" and cpu.compute_units == 20
    assert cpu.gfx_target is None and cpu.bdf is None
    assert len(cpu.pools) == 4
    assert cpu.pools[2].flags == ["KERNARG", "FINE GRAINED"] and cpu.pools[2].size_kb == 247409212
    gpu_pools = info.gpus[0].pools
    assert [p.segment for p in gpu_pools] == ["GLOBAL", "GLOBAL", "GLOBAL", "GROUP"]
    assert gpu_pools[3].size_kb == 64


def test_baremetal_4x_mi300x_agents():
    info = parse_rocminfo(fixture(BAREMETAL))
    # "ROCk module is loaded" without a version, Runtime 1.1, no "Runtime Ext Version" line.
    assert info.rock_loaded and info.rock_version is None
    assert info.runtime_version == "1.1" and info.runtime_ext_version is None
    assert len(info.cpus) == 2 and info.cpus[0].name == "AMD EPYC 9474F 48-Core Processor"
    assert [g.index for g in info.gpus] == [3, 4, 5, 6]
    assert {g.marketing_name for g in info.gpus} == {"AMD Instinct MI300X"}
    assert {g.chip_id_hex for g in info.gpus} == {"0x74a1"}
    assert {g.compute_units for g in info.gpus} == {304}
    assert [g.node for g in info.gpus] == [2, 3, 4, 5]
    assert [g.bdf for g in info.gpus] == ["26:00.0", "46:00.0", "65:00.0", "85:00.0"]
    assert {g.vram_kb for g in info.gpus} == {201310208}
    assert all(g.isas == ["amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"] for g in info.gpus)


def test_abridged_mi325x_one_line_pools_and_isas():
    info = parse_rocminfo(fixture(ABRIDGED))
    assert info.rock_version == "6.14.14" and info.runtime_ext_version == "1.11"
    (gpu,) = info.agents
    assert gpu.index == 3  # header "Agent 3 (first GPU — all 8 are identical)"
    assert gpu.marketing_name == "AMD Instinct MI325X" and gpu.chip_id_hex == "0x74a5"
    assert gpu.compute_units == 304 and gpu.gfx_target == "gfx942"
    assert [(p.segment, p.flags, p.size_kb) for p in gpu.pools] == [
        ("GLOBAL", ["COARSE GRAINED"], 268419072),
        ("GLOBAL", ["EXTENDED FINE GRAINED"], 268419072),
        ("GLOBAL", ["FINE GRAINED"], 268419072),
        ("GROUP", [], 64),
    ]
    assert gpu.vram_mb == 262128.0
    assert gpu.isas[1] == "amdgcn-amd-amdhsa--gfx9-4-generic:sramecc+:xnack-"


def test_tabs_and_crlf_give_the_same_agents():
    text = fixture(GUEST)
    # Indentation as TABs (one per two spaces) and Windows line endings.
    tabbed = "\r\n".join(
        "\t" * ((len(line) - len(line.lstrip(" "))) // 2) + line.lstrip(" ") + "\t "
        for line in text.split("\n"))
    original, mangled = parse_rocminfo(text), parse_rocminfo(tabbed)
    assert [(a.name, a.compute_units, a.vram_kb, a.isas) for a in mangled.agents] == \
        [(a.name, a.compute_units, a.vram_kb, a.isas) for a in original.agents]
    assert mangled.rock_version == "6.16.13"


def test_rock_module_not_loaded_gives_no_agents():
    info = parse_rocminfo("ROCk module is NOT loaded, possibly no GPU devices\n")
    assert not info.rock_loaded and info.agents == []


def test_hsa_failure_lines_are_collected_as_errors():
    text = ("ROCk module version 6.16.13 is loaded\n"
            "hsa api call failure at: /long/path/rocminfo.cc:1306\n"
            "Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate\n")
    info = parse_rocminfo(text)
    assert info.rock_loaded and info.gpus == []
    assert info.errors[0].startswith("hsa api call failure at:")
    assert "HSA_STATUS_ERROR_OUT_OF_RESOURCES" in info.errors[1]


def test_truncated_agent_keeps_what_was_printed():
    text = fixture(GUEST)
    cut = text[: text.index("  Pool Info:", text.index("Agent 2"))] + "...\n"
    (gpu,) = parse_rocminfo(cut).gpus
    assert gpu.compute_units == 304 and gpu.pools == [] and gpu.vram_kb is None


def test_unknown_agent_keys_are_kept():
    text = fixture(GUEST).replace("  Compute Unit:", "  Future Key:              42\n  Compute Unit:")
    assert parse_rocminfo(text).gpus[0].fields["Future Key"] == "42"


@pytest.mark.parametrize("text", ["", "   \n\n", "bash: rocminfo: command not found\n"])
def test_empty_or_foreign_text_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_rocminfo(text)
