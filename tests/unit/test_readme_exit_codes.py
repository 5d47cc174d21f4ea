"""README's exit-code table says what each command's --help says (and the help what the code returns): the
codes of every row whose command documents them in its help are the same set."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from vgpu.cli import cli

README = Path(__file__).resolve().parents[2] / "README.md"
CODE = re.compile(r"(?<![\w.-])(\d{1,3})(?![\w%.-])")


def readme_rows() -> dict[str, set[int]]:
    """command -> the codes its row of README's "| command | exit codes |" table names."""
    rows: dict[str, set[int]] = {}
    table = README.read_text().split("| command | exit codes |", 1)[1].split("\n\n", 1)[0]
    for line in table.splitlines()[2:]:
        first, text = line.strip("|").split("|", 1)
        for command in re.findall(r"`([^`]+)`", first):
            rows[command] = set(map(int, CODE.findall(text)))
    return rows


def help_codes(command: str) -> set[int] | None:
    """The codes of the "Exit ..." paragraph of `vgpu COMMAND --help`, None when it has none."""
    text = CliRunner().invoke(cli, [*command.split(), "--help"], terminal_width=200).output
    found = re.search(r"\n\s*(Exit (?:codes as for (\w+)|\d).*?)\n\s*\n", text, re.S)
    if found is None:
        return None
    if found.group(2):  # "Exit codes as for run."
        return help_codes(" ".join(command.split()[:-1] + [found.group(2)]))
    return set(map(int, CODE.findall(" ".join(found.group(1).split()))))


DOCUMENTED = ["plan", "provision", "release", "playbook run", "rollout run", "rollout resume"]


@pytest.mark.parametrize("command", DOCUMENTED)
def test_readme_and_help_name_the_same_exit_codes(command):
    rows = readme_rows()
    assert command in rows, f"README's exit-code table has no row for {command}"
    assert help_codes(command) == rows[command], command


def test_every_readme_row_with_help_codes_is_checked():
    checked = {c for c in readme_rows() if help_codes(c) is not None}
    assert checked <= set(DOCUMENTED), sorted(checked - set(DOCUMENTED))
