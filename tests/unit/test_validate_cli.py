"""`vgpu validate --simulate` and `vgpu report` through click, and their exit codes for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from vgpu.cli import cli
from vgpu.errors import ExitCode, InputError, UsageError
from vgpu.guest.report import HTML_NAME, JSON_NAME, JUNIT_NAME

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "vgpu" / "schemas"
                     / "validation-report-v1.json").read_text())


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def test_simulate_defaults_to_four_healthy_guests_that_pass(tmp_path):
    result = run("validate", "--simulate", "--skip-workloads", "--report-dir", str(tmp_path), "--quiet")
    assert result.exit_code == ExitCode.OK, result.output
    data = json.loads((tmp_path / JSON_NAME).read_text())
    jsonschema.validate(data, SCHEMA)
    assert [g["name"] for g in data["guests"]] == ["sim-01", "sim-02", "sim-03", "sim-04"]
    assert {g["verdict"] for g in data["guests"]} == {"pass"}
    assert (tmp_path / JUNIT_NAME).is_file() and (tmp_path / HTML_NAME).is_file()


def test_simulate_with_a_failing_scenario_exits_one_and_names_the_failed_checks(tmp_path):
    result = run("validate", "--simulate", "--guests", "2", "--scenario", "healthy,wrong-partition",
                 "--skip-workloads", "--report-dir", str(tmp_path))
    assert result.exit_code == ExitCode.FAILURE, result.output
    data = json.loads((tmp_path / JSON_NAME).read_text())
    assert [g["verdict"] for g in data["guests"]] == ["pass", "fail"]
    failed = {c["name"] for c in data["guests"][1]["checks"] if c["status"] == "fail"}
    assert "rocminfo.compute_units" in failed and "rocminfo.compute_units" in result.output


@pytest.mark.parametrize("args, message", [
    (["--simulate", "--guests", "many"], "takes a number of guests"),
    (["--simulate", "--guests", "0"], "between 1 and 1024"),
    (["--simulate", "--scenario", "melted"], "unknown scenario 'melted'"),
    (["--simulate", "--replay-dir", "{tmp}/missing"], "is not a directory"),
    ([], "give exactly one of --guests FILE or --inventory FILE"),
    (["--guests", "/nonexistent.yaml"], "guests file /nonexistent.yaml does not exist"),
    (["--simulate", "--profile", "no-such-profile"], "no-such-profile"),
])
def test_bad_validate_input_is_exit_code_five(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = run("validate", "--report-dir", str(tmp_path / "r"), *args)
    assert isinstance(result.exception, InputError), result.output
    assert message in result.exception.message
    assert result.exception.exit_code == ExitCode.BAD_INPUT
    assert not (tmp_path / "r").exists()


def test_missing_identity_file_is_refused_before_any_connection(tmp_path):
    guests = tmp_path / "guests.yaml"
    guests.write_text("version: v1\nguests: [{host: 192.0.2.1, expect: {model: MI300X}}]\n")
    result = run("validate", "--guests", str(guests), "--identity", str(tmp_path / "nokey"),
                 "--report-dir", str(tmp_path / "r"))
    assert isinstance(result.exception, InputError) and "identity file" in result.exception.message


def test_guest_without_expectation_is_refused_before_any_connection(tmp_path):
    guests = tmp_path / "guests.yaml"
    guests.write_text("version: v1\nguests: [{host: 192.0.2.1}]\n")
    result = run("validate", "--guests", str(guests), "--report-dir", str(tmp_path / "r"))
    assert isinstance(result.exception, InputError)
    assert "guest 192.0.2.1: nothing to validate against" in result.exception.message


def test_report_merges_two_runs_and_rerenders_all_formats(tmp_path):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    assert run("validate", "--simulate", "--guests", "1", "--skip-workloads", "-q", "--report-dir", str(a)).exit_code == 0
    run("validate", "--simulate", "--guests", "2", "--scenario", "no-rocm", "--skip-workloads", "-q",
        "--report-dir", str(b))
    result = run("report", "--from", str(a), "--from", str(b / JSON_NAME), "--report-dir", str(out), "-q")
    assert result.exit_code == ExitCode.FAILURE, result.output
    data = json.loads((out / JSON_NAME).read_text())
    jsonschema.validate(data, SCHEMA)
    verdicts = {g["name"]: g["verdict"] for g in data["guests"]}
    assert verdicts == {"sim-01": "fail", "sim-02": "fail"}  # b is newer: its sim-01 wins
    assert (out / HTML_NAME).is_file() and (out / JUNIT_NAME).is_file()


def test_report_from_a_missing_directory_is_bad_input(tmp_path):
    result = run("report", "--from", str(tmp_path), "--report-dir", str(tmp_path / "out"))
    assert isinstance(result.exception, InputError) and "no validation report at" in result.exception.message


def test_missing_tools_guest_fails_and_passes_only_with_the_checks_made_optional(tmp_path):
    """Issue 23: no hipblaslt-bench and no torch is a failed guest, unless the operator says otherwise."""
    result = run("validate", "--simulate", "--guests", "1", "--scenario", "missing-tools", "--quick",
                 "--report-dir", str(tmp_path / "strict"))
    assert result.exit_code == ExitCode.FAILURE, result.output
    optional = ("fp8.hipblaslt", "fp8.hipblaslt.verify", "bf16.hipblaslt", "fp8.torch", "fp8.torch.error")
    args = [a for name in optional for a in ("--optional", name)]
    result = run("validate", "--simulate", "--guests", "1", "--scenario", "missing-tools", "--quick", *args,
                 "--report-dir", str(tmp_path / "lenient"))
    assert result.exit_code == ExitCode.OK, result.output
    assert "not judged: 5 check(s): sim-01 fp8.hipblaslt, sim-01 fp8.hipblaslt.verify" in result.output
    data = json.loads((tmp_path / "lenient" / JSON_NAME).read_text())
    jsonschema.validate(data, SCHEMA)
    assert [i["check"] for i in data["summary"]["not_judged"]] == list(optional)
    assert all(i["reason"].startswith("not judged (optional: vgpu validate --optional): ")
               for i in data["summary"]["not_judged"])


def test_optional_naming_no_check_is_a_usage_error(tmp_path):
    result = run("validate", "--simulate", "--optional", "fp8.torchh", "--report-dir", str(tmp_path / "r"))
    assert isinstance(result.exception, UsageError) and result.exception.exit_code == ExitCode.USAGE
    assert result.exception.message.startswith("--optional 'fp8.torchh': no such check; the checks: pci.function")
    assert not list((tmp_path / "r").glob("*"))


def test_a_profiles_validation_optional_reaches_the_expectation(tmp_path):
    from vgpu.guest.fanout import CheckOptions, build_for
    profile = tmp_path / "lab.yaml"
    profile.write_text("version: v1\nname: lab\ngpu: {model: MI300X, mode: sriov, vfs_per_gpu: 1}\n"
                       "validation: {optional: [fp8.torch, fp8.torch.error]}\n")
    expect, _ = build_for("vm", None, str(profile), options=CheckOptions(optional=("bf16.hipblaslt",), quick=True))
    assert expect["optional"] == {"fp8.torch": "profile lab validation.optional",
                                  "fp8.torch.error": "profile lab validation.optional",
                                  "bf16.hipblaslt": "vgpu validate --optional"}
    assert expect["seconds"] == 2.0
    profile.write_text(profile.read_text().replace("fp8.torch.error]", "fp8.torchh]"))
    with pytest.raises(InputError, match="unknown check 'fp8.torchh'"):
        build_for("vm", None, str(profile))
