"""`vgpu profiles list|show|validate|schema` through click's CliRunner and the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from vgpu.cli import cli, main
from vgpu.errors import ExitCode
from vgpu.profiles import load_profile, load_profile_text

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str):
    return CliRunner().invoke(cli, ["profiles", *args], catch_exceptions=False)


def test_list_shows_every_shipped_profile_with_its_support_level():
    result = _run("list")
    assert result.exit_code == 0
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in result.output.splitlines() if line.startswith("│")}
    assert rows["mi300x-4vf"] == ["MI300X", "sriov", "4", "QPX/NPS1", "kvm", "unvalidated"]
    assert rows["mi300x-8vf"] == ["MI300X", "sriov", "8", "CPX/NPS4", "kvm", "preview"]
    assert rows["mi300x-esxi-passthrough"] == ["MI300X", "passthrough", "-", "-", "esxi", "supported"]
    assert len(rows) == 12


def test_list_json_carries_support_and_warnings():
    import jsonschema
    data = json.loads(_run("list", "--json").output)
    schema = json.loads((Path(__file__).parents[2] / "vgpu/schemas/profile-list-v1.json").read_text())
    jsonschema.validate(data, schema)
    assert data["schema"] == "vgpu.profile-list/v1"
    by_name = {p["name"]: p for p in data["profiles"]}
    assert by_name["mi300x-1vf"]["support"] == "supported" and by_name["mi300x-1vf"]["warnings"] == []
    assert by_name["mi300x-8vf"]["gpu"]["memory_partition"] == "NPS4"


def test_show_prints_the_resolved_profile_that_loads_back():
    result = _run("show", "mi300x-4vf")
    assert result.exit_code == 0
    assert result.stdout.startswith("# mi300x-4vf: resolved from profiles/mi300x-4vf.yaml <- profiles/mi300x-1vf.yaml")
    assert "extends" not in result.stdout
    again = load_profile_text(result.stdout, source="shown.yaml")
    assert again.to_dict() == load_profile("mi300x-4vf").to_dict()
    assert "warning: mi300x-4vf: 4 VFs per GPU (QPX/NPS1) on MI300X is accepted by GIM but not in AMD's " \
           "validated matrix" in result.stderr


def test_show_json():
    data = json.loads(_run("show", "mi355x-passthrough", "--json").stdout)
    assert data["gpu"] == {"model": "MI355X", "mode": "passthrough", "select": {"all": True}}


def test_show_of_a_bad_file_is_one_error_line_with_exit_5(tmp_path, capsys):
    bad = tmp_path / "x.yaml"
    bad.write_text("version: v1\ngpu: {model: MI300X, vfs_per_gpu: 3}\n")
    with pytest.raises(SystemExit) as caught:
        main(["profiles", "show", str(bad)])
    err = capsys.readouterr().err.splitlines()
    assert caught.value.code == ExitCode.BAD_INPUT
    assert err[0] == f"error: {bad}: gpu.vfs_per_gpu: 3 VFs per GPU is not allowed for MI300X (GIM accepts 1, 2, 4, 8)"
    assert err[1].startswith("hint: see docs/profiles.md")


def test_validate_reports_one_line_per_problem_and_exits_5(tmp_path):
    good = REPO / "profiles" / "mi300x-1vf.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nhypervisor: hyperv\ngpu: {model: MI300X, mode: sriovv}\n")
    result = _run("validate", str(good), str(bad))
    assert result.exit_code == ExitCode.BAD_INPUT
    lines = result.output.splitlines()
    assert lines[0] == f"ok: {good} (mi300x-1vf, supported)"
    assert lines[1:] == [f"invalid: {bad}: hypervisor: should be 'kvm' or 'esxi' (got 'hyperv')",
                         f"invalid: {bad}: gpu.mode: should be 'sriov' or 'passthrough' (got 'sriovv')"]


def test_validate_all_shipped_files_exits_0_with_warnings():
    files = sorted(str(p) for p in (REPO / "profiles").glob("*.yaml"))
    result = _run("validate", *files)
    assert result.exit_code == 0
    assert sum(line.startswith("ok: ") for line in result.output.splitlines()) == 12
    assert any(line.startswith("warning: ") and "mi300x-8vf" in line for line in result.output.splitlines())


def test_validate_needs_a_file():
    assert _run("validate").exit_code == ExitCode.USAGE


def test_schema_command_prints_the_committed_schema():
    result = _run("schema")
    assert result.output == (REPO / "vgpu" / "schemas" / "profile-v1.json").read_text()
    assert json.loads(result.output)["required"] == ["version"]


def test_show_output_is_yaml_a_human_can_edit():
    body = _run("show", "mi300x-8vf").stdout.split("\n", 1)[1]
    data = yaml.safe_load(body)
    assert data["gpu"]["vfs_per_gpu"] == 8 and data["guest"]["rocm"] == "7.0"


def test_show_prints_the_validation_thresholds_that_apply_and_still_loads_back():
    import yaml

    result = _run("show", "mi325x-1vf")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("# guest validation thresholds (vgpu/guest/data/gemm-thresholds.yaml, docs/agent.md):")
    fp8 = lines[start + 1]
    assert fp8.startswith("#   fp8_tflops: >= 1438 TFLOPS; RVS rvs/conf/MI325X/gst_single.conf")
    assert fp8.endswith("GEMM 4864x4096x8192 TN, rand_int, AMD ran 15 s")
    assert lines[start + 2].startswith("#   bf16_tflops: >= 669 TFLOPS")
    assert yaml.safe_load(result.output)["name"] == "mi325x-1vf"
