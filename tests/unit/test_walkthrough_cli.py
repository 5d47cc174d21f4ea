"""Help texts and notes a newcomer reads (issue 20's walk-through), through the real click commands."""

from click.testing import CliRunner

from vgpu.cli import cli
from vgpu.sim.guests import SCENARIOS, SIM_TARGET


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_validate_help_lists_the_simulators_scenarios():
    text = " ".join(invoke("validate", "--help").output.split())
    assert f"(one of: {', '.join(SCENARIOS)})" in text


def test_validate_simulate_without_a_profile_says_what_it_judges_against(tmp_path):
    result = CliRunner().invoke(cli, ["validate", "--simulate", "--guests", "1", "--skip-workloads", "--report-dir",
                                      str(tmp_path / "r"), "-q"])
    assert result.exit_code == 0, result.output
    note = f"note: no --profile: the simulated guests are judged as {SIM_TARGET['model']} " \
           f"{SIM_TARGET['compute']}/{SIM_TARGET['memory']} VFs"
    assert note in result.stderr
    with_profile = CliRunner().invoke(cli, ["validate", "--simulate", "--guests", "1", "--skip-workloads",
                                            "--profile", "mi300x-1vf", "--report-dir", str(tmp_path / "p"), "-q"])
    assert "note: no --profile" not in with_profile.stderr
