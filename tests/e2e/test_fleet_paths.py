"""The demo's fleet commands from a relative --dir and from another directory (issue 20): every path vgpu writes
for another program (the inventory, the fleet's sshd_config, the guests' environment) is absolute, and a path in an
inventory means what it means to Ansible, relative to the current directory, for `vgpu validate --inventory` and
for the playbooks alike (docs/validate.md, "Paths in an inventory"). Real sshd, real ansible-playbook.

HOME is an empty directory in every run here: no ~/.ssh/known_hosts or key of the caller can make a test pass.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

BIN = Path(sys.executable).parent
VGPU = BIN / "vgpu"
pytestmark = pytest.mark.skipif(not VGPU.exists() or shutil.which("sshd", path="/usr/sbin") is None,
                                reason="needs the venv's vgpu entry point and OpenSSH's sshd")


def run(cwd: Path, *args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "VGPU_", "SSH_"))}
    env.update(HOME=str(home), NO_COLOR="1", COLUMNS="200", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return subprocess.run([str(VGPU), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def dirs(tmp_path):
    """(where the fleet is made, another directory, an empty HOME)"""
    made, other, home = tmp_path / "made", tmp_path / "other", tmp_path / "home"
    for d in (made, other, home):
        d.mkdir()
    return made, other, home


@pytest.fixture
def fleet(dirs):
    """A one-host fleet made with the relative --dir .sim/fleet; its sshd stopped afterwards."""
    made, _, home = dirs
    r = run(made, "sim", "fleet", "create", "--dir", ".sim/fleet", "--hosts", "1", home=home)
    assert r.returncode == 0, r.stderr
    yield made / ".sim" / "fleet"
    run(made, "sim", "fleet", "stop", "--dir", ".sim/fleet", home=home)


def strings(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif isinstance(node, str):
        yield node


def test_a_fleet_made_from_a_relative_dir_writes_only_absolute_paths(fleet):
    inventory = yaml.safe_load((fleet / "inventory.yml").read_text())
    paths = [p for s in strings(inventory) if "/" in s for p in s.split(os.pathsep)]  # PATH: one per entry
    assert len(paths) >= 8 and all(p.startswith("/") for p in paths), paths
    guests = inventory["all"]["children"]["gpu_guests"]
    assert guests["vars"]["ansible_ssh_private_key_file"] == str(fleet / "ssh" / "client")
    assert inventory["all"]["vars"]["validate_known_hosts"] == str(fleet / "known_hosts")
    hosts = inventory["all"]["children"]["gim_hosts"]["hosts"]
    assert hosts["kvm-1"]["provision_sim_dir"] == str(fleet / "hosts" / "kvm-1")
    config = (fleet / "ssh" / "sshd_config").read_text()  # sshd works from /: a relative HostKey is not found
    named = re.findall(r"^(?:HostKey|PidFile|AuthorizedKeysFile) (.+)$", config, re.M)
    assert len(named) == 3 and all(p.startswith(str(fleet)) for p in named), config


def test_validate_reads_the_fleet_inventory_from_another_directory(fleet, dirs):
    """The demo's baseline command, run elsewhere and without --known-hosts: the key and the known_hosts file the
    inventory names are found (before: exit 5, the key looked for under the inventory's directory; then exit 9,
    the host key checked against ~/.ssh/known_hosts instead of the inventory's validate_known_hosts)."""
    made, other, home = dirs
    inv = os.path.relpath(fleet / "inventory.yml", other)
    r = run(other, "validate", "--inventory", inv, "--limit", "gpu_guests", "--profile", "mi300x-1vf",
            "--report-dir", "baseline", "--quiet", home=home)
    assert r.returncode == 0, r.stderr
    report = json.loads((other / "baseline" / "validation-report.json").read_text())
    assert [(g["name"], g["verdict"]) for g in report["guests"]] == [("vm-1", "pass")]
    assert not (home / ".ssh").exists()  # nothing recorded in the caller's known_hosts
    # the fleet's sshd is found from here too (its command line names the absolute sshd_config)
    stop = run(other, "sim", "fleet", "stop", "--dir", os.path.relpath(fleet, other), home=home)
    assert stop.returncode == 0 and stop.stdout.strip() == "stopped", stop.stdout + stop.stderr


def test_a_relative_key_in_an_inventory_is_read_from_the_current_directory_as_ansible_does(fleet, dirs):
    """An inventory in inv/ naming keys/client and known/known_hosts, relative to the directory it is used from (ctl/),
    not to inv/: vgpu validate and the validate playbook (real ansible-playbook) both reach the guest from ctl/;
    from inv/ vgpu refuses the missing key as ssh would not find it."""
    _, other, home = dirs
    ctl, inv_dir = other / "ctl", other / "inv"
    (ctl / "keys").mkdir(parents=True)
    (ctl / "known").mkdir()
    inv_dir.mkdir()
    shutil.copy(fleet / "ssh" / "client", ctl / "keys" / "client")
    os.chmod(ctl / "keys" / "client", 0o600)
    shutil.copy(fleet / "known_hosts", ctl / "known" / "known_hosts")
    data = yaml.safe_load((fleet / "inventory.yml").read_text())
    data["all"]["vars"]["validate_known_hosts"] = "known/known_hosts"
    data["all"]["children"]["gpu_guests"]["vars"]["ansible_ssh_private_key_file"] = "keys/client"
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))

    r = run(ctl, "validate", "--inventory", "../inv/hosts.yml", "--limit", "gpu_guests", "--profile", "mi300x-1vf",
            "--report-dir", "direct", "--quiet", home=home)
    assert r.returncode == 0, r.stderr
    played = other / "played"
    r = run(ctl, "playbook", "run", "validate", "--inventory", "../inv/hosts.yml", "--limit", "gpu_guests",
            "-e", "validate_profile=mi300x-1vf", "-e", f"validate_report_dir={played}", "--json", home=home)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert [h["status"] for h in json.loads(r.stdout)["hosts"]] in (["ok"], ["changed"])  # not failed
    report = json.loads((played / "validation-report.json").read_text())
    assert [(g["name"], g["verdict"]) for g in report["guests"]] == [("vm-1", "pass")]

    r = run(inv_dir, "validate", "--inventory", "hosts.yml", "--limit", "gpu_guests", "--profile", "mi300x-1vf",
            "--report-dir", str(other / "from-inv"), "--quiet", home=home)
    assert r.returncode == 5, r.stderr
    assert f"identity file {inv_dir / 'keys' / 'client'} does not exist" in r.stderr
    assert not (other / "from-inv").exists()


def walk_lines() -> list[str]:
    """The command lines of docs/rollout.md's "Walk it in simulation" block."""
    text = (REPO / "docs" / "rollout.md").read_text()
    block = text.split("### Walk it in simulation", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_documented_simulated_rollout_runs_as_shown_from_another_directory(dirs):
    """docs/rollout.md's walk, line by line, with its relative paths, from a directory that is not the repository:
    the baseline, the roll-out stopping at wave 2 (exit 1, as the comment says), resume, and the metrics of the
    roll-out's directory (wave 2's second run, the newest, counts)."""
    _, other, home = dirs
    lines = walk_lines()
    assert lines[0].startswith("vgpu sim fleet create") and lines[-1].startswith("vgpu sim fleet stop")
    try:
        for line in lines:
            want = 1 if "# exit 1" in line else 0
            args = line.split("#", 1)[0].split()
            assert args[0] == "vgpu"
            r = run(other, *args[1:], home=home, timeout=600)
            assert r.returncode == want, (line, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
            if args[1] == "metrics":
                metrics = r.stdout
    finally:
        run(other, "sim", "fleet", "stop", "--dir", ".sim/fleet", home=home)
    state = json.loads((other / ".sim" / "rollout" / "state.json").read_text())
    assert state["state"] == "done" and [w["runs"] for w in state["waves"]] == [1, 2]
    assert re.search(r'^vgpu_validation_passed\{guest="vm-2",model="MI300X"\} 1\.0$', metrics, re.M), metrics
    assert re.search(r'^vgpu_validation_passed\{guest="vm-1",model="MI300X"\} 1\.0$', metrics, re.M), metrics
