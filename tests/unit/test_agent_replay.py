"""The simulated guests' replay files: provenance headers, verbatim copies of the real fixtures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vgpu.sim.guests import REPLAY_ROOT, SCENARIOS
from vgpu.sim.guests.standin import find_replay, replay_name, replay_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPLAYS = sorted(p for s in SCENARIOS for p in (REPLAY_ROOT / s).iterdir() if p.name != "guest.json")
SOURCE = re.compile(r"; source: fixtures/(?P<path>\S+?); (?P<how>verbatim|flags: edited)")
FROM_FIXTURES = [p for p in REPLAYS if SOURCE.search(p.read_text().split("\n", 1)[0])]


def fixture_body(rel: str) -> str:
    return (FIXTURES / rel).read_text().split("\n", 1)[1]


def test_most_healthy_tool_outputs_are_real_captures():
    # rocminfo, lspci and the amd-smi table are real captures; amd-smi static --json of a VF has none in
    # fixtures/ (its replay carries the fields of the real text capture, flagged synthetic)
    real = {p.name for p in FROM_FIXTURES if p.parent.name == "healthy"}
    assert real == {"amd-smi", "lspci_-nnkk", "rocminfo"}


def test_every_scenario_has_a_guest_description_and_replays():
    for scenario in SCENARIOS:
        guest = json.loads((REPLAY_ROOT / scenario / "guest.json").read_text())
        assert guest["description"] and guest["pci"]


@pytest.mark.parametrize("path", REPLAYS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_replay_file_starts_with_a_provenance_header(path):
    header = path.read_text().split("\n", 1)[0]
    assert header.startswith("# replay: ")
    assert SOURCE.search(header) or "flags: synthetic" in header, header


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="tests/fixtures missing")
@pytest.mark.parametrize("path", FROM_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_replays_said_to_be_verbatim_equal_the_fixture(path):
    match = SOURCE.search(path.read_text().split("\n", 1)[0])
    body = fixture_body(match["path"])
    if match["how"] == "verbatim":
        assert replay_text(str(path)) == body
    else:  # edited: same number of lines, and the edits are few
        replay_lines, fixture_lines = replay_text(str(path)).splitlines(), body.splitlines()
        assert len(replay_lines) == len(fixture_lines)
        assert 0 < sum(a != b for a, b in zip(replay_lines, fixture_lines)) <= 6


def test_only_the_whole_command_line_matches(tmp_path):
    """A wrong argument must not be answered with another command's capture (issue 23)."""
    (tmp_path / "amd-smi_static").write_text("# replay: x\nout\n")
    assert find_replay(str(tmp_path), "amd-smi", ["static"]) == str(tmp_path / "amd-smi_static")
    assert find_replay(str(tmp_path), "amd-smi", ["static", "--json"]) is None
    assert find_replay(str(tmp_path), "amd-smi", []) is None
    assert replay_name(["x", "a/b c"]) == "x_a_b_c"


def test_long_command_lines_are_cut_and_hashed_so_their_tail_still_counts():
    one = replay_name(["hipblaslt-bench"] + ["-x"] * 100 + ["-i", "7445"])
    other = replay_name(["hipblaslt-bench"] + ["-x"] * 100 + ["-i", "7446"])
    assert len(one) == 150 + 1 + 16 and one[:150] == other[:150] and one != other


def test_a_replay_with_several_outputs_gives_them_in_turn_then_repeats_the_last(tmp_path):
    path = tmp_path / "r"
    path.write_text("# replay: provenance\nfirst\n# replay: next\nsecond\n")
    assert [replay_text(str(path), n) for n in range(3)] == ["first\n", "second\n", "second\n"]
