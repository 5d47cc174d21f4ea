"""Every "next command" hint names the host of the command that printed it (vgpu.cli.common.next_command)."""

import shlex
from pathlib import Path

import click
from click.testing import CliRunner

from vgpu.cli.common import HostChoice, host_argv, host_options, next_command


def test_esxi_options_are_reproduced_and_no_password_ever():
    choice = HostChoice(esxi="https://esx 1.example:443", esxi_user="ops@vsphere.local",
                        esxi_password_file=Path("/run/secrets/esx pw"), esxi_thumbprint="AA:BB",
                        esxi_ca=Path("ca.pem"), esxi_host="esx-07", insecure=True)
    argv = host_argv(choice)
    assert argv == ["--esxi", "https://esx 1.example:443", "--esxi-user", "ops@vsphere.local",
                    "--esxi-password-file", "/run/secrets/esx pw", "--esxi-thumbprint", "AA:BB",
                    "--esxi-ca", "ca.pem", "--esxi-host", "esx-07", "--insecure"]
    assert not any("password" in a and "file" not in a for a in argv)


def test_default_simulate_comes_last_and_a_machine_is_kept():
    assert host_argv(HostChoice(simulate="__default__", sim_dir="d")) == ["--sim-dir", "d", "--simulate"]
    assert host_argv(HostChoice(simulate="8xmi325x")) == ["--simulate", "8xmi325x"]
    assert host_argv(None) == [] and host_argv(HostChoice()) == []


def test_a_command_hint_is_shell_quoted_and_parses_back_to_the_same_host():
    @click.command()
    @host_options
    def show(host):
        click.echo(next_command("provision", "--profile", "my profile.yaml"))

    out = CliRunner().invoke(show, ["--simulate", "--sim-dir", "/tmp/a dir; rm -rf ~"]).output.strip()
    assert shlex.split(out) == ["vgpu", "provision", "--profile", "my profile.yaml", "--sim-dir",
                                "/tmp/a dir; rm -rf ~", "--simulate"]
    parsed = {}

    @click.command()
    @click.option("--profile")
    @host_options
    def provision(profile, host):
        parsed.update(profile=profile, host=host)

    assert CliRunner().invoke(provision, shlex.split(out)[2:]).exit_code == 0
    assert parsed["host"] == HostChoice(simulate="__default__", sim_dir="/tmp/a dir; rm -rf ~")
