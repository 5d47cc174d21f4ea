"""The validation report model: verdicts, exit codes, JSON schema, reading back, merging."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest

from vgpu.errors import ExitCode, InputError
from report_factory import agent, every_outcome, guest, report

from vgpu.guest.report import json as json_report
from vgpu.guest.report.model import REPORT_SCHEMA, GuestReport, Outcome, ValidationReport, merge

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "vgpu" / "schemas"
                     / "validation-report-v1.json").read_text())


def test_report_with_every_outcome_validates_against_the_committed_schema():
    data = json.loads(json_report.render(every_outcome()))
    jsonschema.validate(data, SCHEMA)
    assert data["schema"] == REPORT_SCHEMA
    assert data["summary"]["outcomes"] == {o.value: 1 for o in Outcome} | {"ok": 2}
    assert data["summary"]["checks"] == {"pass": 2, "fail": 1, "skip": 1, "error": 1}


def test_schema_rejects_an_ok_guest_without_checks():
    data = json.loads(json_report.render(report(guest("a", Outcome.OK, "pass"))))
    data["guests"][0]["checks"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)


def test_verdict_is_fail_when_any_check_fails_or_errors_and_error_when_not_reached():
    assert guest("a", Outcome.OK, "pass", "skip").verdict == "pass"
    assert guest("a", Outcome.OK, "pass", "fail").verdict == "fail"
    assert guest("a", Outcome.OK, "error").verdict == "fail"
    assert guest("a", Outcome.TIMEOUT).verdict == "error"


@pytest.mark.parametrize("outcomes, code", [
    ((Outcome.OK,), ExitCode.OK),
    ((Outcome.OK, Outcome.AGENT_ERROR), ExitCode.FAILURE),
    ((Outcome.OK, Outcome.UNREACHABLE), ExitCode.REMOTE),
    ((Outcome.HOST_KEY_REFUSED,), ExitCode.REMOTE),
    ((Outcome.AUTH_FAILED, Outcome.AGENT_ERROR), ExitCode.REMOTE),
    ((Outcome.TIMEOUT,), ExitCode.REMOTE),
])
def test_exit_code_prefers_unreached_guests_over_failed_checks(outcomes, code):
    rep = report(*(guest(f"g{i}", o, "pass") for i, o in enumerate(outcomes)))
    assert rep.exit_code == code


def test_failed_check_gives_exit_code_one():
    assert report(guest("a", Outcome.OK, "pass"), guest("b", Outcome.OK, "fail")).exit_code == ExitCode.FAILURE


def test_report_reads_back_equal_to_what_was_written():
    original = every_outcome()
    again = ValidationReport.from_dict(json.loads(json_report.render(original)))
    assert again.to_dict() == original.to_dict()


def test_non_finite_measurement_is_kept_as_text_so_the_json_stays_valid():
    rep = report(GuestReport(name="a", address="a:22", outcome=Outcome.OK,
                             agent=agent("fail", measured=math.nan, expected=math.inf)))
    data = json.loads(json_report.render(rep))
    assert data["guests"][0]["checks"][0]["measured"] == "nan"
    assert data["guests"][0]["checks"][0]["expected"] == "inf"
    jsonschema.validate(data, SCHEMA)


def test_load_refuses_a_document_with_another_schema(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": "vgpu.inventory/v1"}))
    with pytest.raises(InputError, match="not a vgpu validation report"):
        json_report.load(path)


def test_load_names_the_missing_field(tmp_path):
    data = json.loads(json_report.render(every_outcome()))
    del data["guests"][0]["outcome"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="malformed.*outcome"):
        json_report.load(path)


def test_load_refuses_an_unknown_check_status(tmp_path):
    data = json.loads(json_report.render(every_outcome()))
    data["guests"][0]["checks"][0]["status"] = "great"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"checks\[0\]\.status: 'great' is not one of pass"):
        json_report.load(path)


def test_load_of_a_directory_without_report_says_so(tmp_path):
    with pytest.raises(InputError, match="no validation report at"):
        json_report.load(tmp_path)


def test_load_refuses_text_that_is_not_json(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("<html>")
    with pytest.raises(InputError, match="is not valid JSON"):
        json_report.load(path)


def test_merge_keeps_the_newest_result_of_a_guest_and_every_other_guest():
    old = report(guest("a", Outcome.TIMEOUT), guest("b", Outcome.OK, "pass"), generated="2025-01-01T00:00:00Z")
    new = report(guest("a", Outcome.OK, "pass"), guest("c", Outcome.OK, "fail"), generated="2025-02-01T00:00:00Z")
    merged = merge([new, old], generated="2025-03-01T00:00:00Z", vgpu_version="0.1.0")
    by_name = {g.name: g for g in merged.guests}
    assert sorted(by_name) == ["a", "b", "c"]
    assert by_name["a"].outcome is Outcome.OK
    assert merged.exit_code == ExitCode.FAILURE
