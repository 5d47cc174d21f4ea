"""Help texts and notes a newcomer reads (issue 20's walk-through), through the real click commands."""

from click.testing import CliRunner

from vgpu.cli import cli
from vgpu.sim.guests import SCENARIOS, SIM_TARGET  # noqa: F401


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


def test_sim_vm_takes_simulate_like_every_host_command(tmp_path):
    from vgpu.hypervisor.sim import SimHypervisor
    from vgpu.sim import SimHost
    from vgpu.vms import sim_hypervisor_dir

    state = tmp_path / "sim"
    missing = CliRunner().invoke(cli, ["sim", "vm", "vm-a", "--sim-dir", str(state)])
    assert "or give --simulate" in missing.exception.hint and missing.exception.exit_code == 5
    made = CliRunner().invoke(cli, ["sim", "vm", "vm-a", "--simulate", "--sim-dir", str(state)])
    assert made.exit_code == 0, made.output
    again = CliRunner().invoke(cli, ["sim", "vm", "vm-b", "--running", "--sim-dir", str(state), "--simulate"])
    assert again.exit_code == 0, again.output
    domains = {d.name: d.active for d in SimHypervisor(sim_hypervisor_dir(SimHost.open(state).root)).domains()}
    assert domains == {"vm-a": False, "vm-b": True}


def test_host_check_json_has_its_own_versioned_schema(tmp_path):
    import json
    from pathlib import Path

    import jsonschema

    result = CliRunner().invoke(cli, ["host", "check", "--json", "--simulate", "--sim-dir", str(tmp_path / "s")])
    doc = json.loads(result.stdout)
    schema = json.loads((Path(__file__).parents[2] / "vgpu/schemas/host-check-v1.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["schema"] == "vgpu.host-check/v1" and result.exit_code == (0 if doc["ready"] else 1)
