"""`vgpu playbook run`: the shipped playbooks through the real ansible-runner and ansible-playbook, with the
inventory checked by the one inventory reader first; typed per-host results, --json, exit codes, secrets."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import HANG, REPO, VENV_BIN, signal_at_pause, signalled, wait_until

VGPU = str(VENV_BIN / "vgpu")
SCHEMA = json.loads((REPO / "vgpu" / "schemas" / "playbook-run-v1.json").read_text())


def local_host() -> dict:
    return {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python")}


def inventory(tmp_path: Path, groups: dict) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({name: {"hosts": hosts} for name, hosts in groups.items()}))
    return path


def vgpu(*args, cwd: Path, timeout: float = HANG, **popen) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(NO_COLOR="1", COLUMNS="200")
    return subprocess.run([VGPU, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def sim_vars(tmp_path: Path) -> list[str]:
    sim_dir = tmp_path / "sim"
    subprocess.run([VGPU, "sim", "reset", "--sim-dir", str(sim_dir)], check=True, capture_output=True, timeout=HANG)
    return ["-e", "ansible_become=false", "-e", "provision_install=none", "-e", f"provision_executable={VGPU}",
            "-e", "provision_simulate=true", "-e", f"provision_sim_dir={sim_dir}", "-e", "vgpu_serial=[1]"]


def test_list_names_every_shipped_playbook(tmp_path):
    proc = vgpu("playbook", "list", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for book in (REPO / "playbooks").glob("*.yml"):
        assert book.stem in proc.stdout


def test_provision_runs_then_is_idempotent_with_typed_json_per_host(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    extra = sim_vars(tmp_path) + ["-e", "provision_profile=mi300x-4vf"]
    first = vgpu("playbook", "run", "provision", "-i", str(inv), *extra, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    doc = json.loads(first.stdout)
    jsonschema.validate(doc, SCHEMA)
    (host,) = doc["hosts"]
    assert (host["host"], host["status"], host["changed"], host["failed_task"]) == ("kvm-a", "changed", 1, None)
    assert doc["status"] == "successful" and doc["exit_code"] == 0
    second = json.loads(vgpu("playbook", "run", "provision", "-i", str(inv), *extra, "--json", cwd=tmp_path).stdout)
    assert [(h["status"], h["changed"]) for h in second["hosts"]] == [("ok", 0)]


def test_failed_and_unreachable_hosts_with_the_failing_task_and_exit_codes(tmp_path):
    closed = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh",
              "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=yes"}
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-ok": local_host(), "kvm-gone": closed}})
    extra = sim_vars(tmp_path) + ["-e", "provision_profile=mi300x-5vf"]  # no such profile: fails on kvm-ok
    proc = vgpu("playbook", "run", "provision", "-i", str(inv), *extra, "-e", "vgpu_serial=2", "--json",
                cwd=tmp_path)
    assert proc.returncode == 9, proc.stdout + proc.stderr  # unreachable outranks failed
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts["kvm-gone"]["status"] == "unreachable" and hosts["kvm-gone"]["message"]
    assert hosts["kvm-ok"]["status"] == "failed"
    assert hosts["kvm-ok"]["failed_task"].endswith("Apply the profile with vgpu (check mode shows the plan)")
    assert hosts["kvm-ok"]["message"].startswith("vgpu exited 5 (BAD_INPUT): mi300x-5vf")


def test_a_failed_host_alone_exits_8_and_the_table_names_it(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-ok": local_host()}})
    proc = vgpu("playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "-e",
                "provision_profile=mi300x-5vf", cwd=tmp_path)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    assert "kvm-ok" in proc.stdout and "failed" in proc.stdout and "BAD_INPUT" in proc.stdout
    assert "kvm-ok: failed" in proc.stderr  # the plain progress lines (stderr is not a terminal here)


def test_check_mode_runs_the_plan_and_secrets_never_reach_the_json(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    proc = vgpu("playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "-e",
                "provision_profile=mi300x-4vf", "-e", "vault_password=hunter2", "-e", "api_token=s3cr3t", "--check",
                "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["check"] and doc["hosts"][0]["status"] == "changed"
    assert doc["extra_vars"]["vault_password"] == "<redacted>" and doc["extra_vars"]["api_token"] == "<redacted>"
    assert "hunter2" not in proc.stdout + proc.stderr and "s3cr3t" not in proc.stdout + proc.stderr
    status = subprocess.run([VGPU, "status", "--json", "--simulate", "--sim-dir", str(tmp_path / "sim")],
                            capture_output=True, text=True, timeout=600)
    assert json.loads(status.stdout)["profile"] is None  # check mode changed nothing


@pytest.mark.parametrize("case", ["unknown playbook", "bad inventory", "executable inventory", "bad extra var",
                                  "templated extra var", "limit matches nothing"])
def test_refusals_before_anything_runs(tmp_path, case):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    marker = tmp_path / "ran"
    args = {"unknown playbook": ["../../etc/passwd", "-i", str(inv)],
            "bad inventory": ["provision", "-i", str(tmp_path / "inv.ini")],
            "executable inventory": ["provision", "-i", str(tmp_path / "hosts")],
            "bad extra var": ["provision", "-i", str(inv), "-e", "not a name=1"],
            "templated extra var": ["provision", "-i", str(inv), "-e",
                                    f"provision_profile={{{{ lookup('pipe', 'touch {marker}') }}}}"],
            "limit matches nothing": ["provision", "-i", str(inv), "--limit", "nope"]}[case]
    (tmp_path / "inv.ini").write_text("[g]\nvm[0:99999999]\n")
    script = tmp_path / "hosts"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{}}'\n")
    script.chmod(0o755)
    proc = vgpu("playbook", "run", *args, cwd=tmp_path)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert not marker.exists()
    assert not (tmp_path / "sim").exists()


def test_sigterm_mid_provision_rolls_the_host_back_and_exits_143(tmp_path):
    """SIGTERM to `vgpu playbook run` while the module's `vgpu provision` is between steps: the signal reaches
    vgpu on the host, which finishes the step and rolls back; then vgpu exits 143 and nothing is left running."""
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    extra = sim_vars(tmp_path) + ["-e", "provision_profile=mi300x-4vf"]
    sim_dir = tmp_path / "sim"
    pause, tmp = tmp_path / "pause", tmp_path / "tmp"
    pause.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(VGPU_SIM_PAUSE_AT="2:after", VGPU_SIM_PAUSE_DIR=str(pause), TMPDIR=str(tmp))  # the simulator's hook
    proc = subprocess.Popen([VGPU, "playbook", "run", "provision", "-i", str(inv), *extra, "--json"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = signal_at_pause(proc, pause, signal.SIGTERM)
    assert proc.returncode == 143, out + err
    assert "interrupted by SIGTERM" in err and "read back from each host after the stop: rolled back: kvm-a" in err
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    assert doc["interrupted"] == "SIGTERM" and doc["exit_code"] == 143
    (host,) = doc["hosts"]
    assert (host["outcome"], host["read_back"]["profile"], host["read_back"]["unfinished_run"]) == \
        ("rolled back", None, None), host
    assert not _left_under(tmp_path), "a process of the run outlived vgpu"
    assert_rolled_back(sim_dir)


def assert_rolled_back(sim_dir) -> None:
    """The interrupted provision left the simulated host as it was: no profile, no pending run, no vf_num."""
    status = subprocess.run([VGPU, "status", "--json", "--simulate", "--sim-dir", str(sim_dir)],
                            capture_output=True, text=True, timeout=HANG)
    doc = json.loads(status.stdout)
    assert status.returncode == 0 and doc["profile"] is None and doc["unfinished_run"] is None, status.stdout
    assert not (sim_dir / "root" / "etc" / "gim_config").exists() or \
        "vf_num" not in (sim_dir / "root" / "etc" / "gim_config").read_text()


def test_sighup_mid_provision_stops_like_sigterm_and_exits_129(tmp_path):
    """SIGHUP (the terminal or SSH session went away) to `vgpu playbook run` while the module's `vgpu provision` is
    between steps: passed on to the run's processes as SIGTERM, so vgpu on the host finishes its step and rolls back
    (SIGHUP itself would kill it mid-step); then vgpu exits 129 with one line saying so, and leaves nothing behind:
    no ansible process, no private data directory, no journal, the host as it was."""
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    extra = sim_vars(tmp_path) + ["-e", "provision_profile=mi300x-4vf"]
    sim_dir = tmp_path / "sim"
    pause, tmp = tmp_path / "pause", tmp_path / "tmp"
    pause.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(VGPU_SIM_PAUSE_AT="2:after", VGPU_SIM_PAUSE_DIR=str(pause), TMPDIR=str(tmp),
               ANSIBLE_LOCAL_TEMP=str(tmp / "local"), ANSIBLE_REMOTE_TMP=str(tmp / "remote"))  # all the run's files
    proc = subprocess.Popen([VGPU, "playbook", "run", "provision", "-i", str(inv), *extra], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = signal_at_pause(proc, pause, signal.SIGHUP)
        assert proc.returncode == 129, out + err
        assert "after the stop" in out and "rolled back" in out  # the table's column, read back
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: interrupted by SIGHUP (the terminal went away): "
                                                         "passed on as SIGTERM to ansible-playbook"), err
        assert "Traceback" not in err
        assert not _left_under(tmp_path), "a process of the run outlived vgpu"
    finally:  # a failed case must not leave the run's processes working on after the test
        for pid in _left_under(tmp_path):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    # vgpu's private data directory is gone; what remains is Ansible's own, as after any interrupted task: the
    # module's temporary files on the managed host (remote_tmp, its unpacked payload) and the controller's cache
    left = sorted(p.name for p in tmp.iterdir())
    assert all(n in ("local", "remote") or (n.startswith("ansible_") and "_payload_" in n) for n in left), left
    assert_rolled_back(sim_dir)


def _left_under(where: Path) -> dict[int, str]:
    """pid -> command line of living processes (other than this one) that mention ``where``: ansible-playbook (its
    private data directory under TMPDIR), the module (remote_tmp), vgpu on the host (its simulated host), ... Asked
    once vgpu has exited, which it does only after every process of its run has (interrupt.StopOnSignal.drain)."""
    left = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            alive = cmdline.parent.name != str(os.getpid()) and \
                (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            continue
        if alive and str(where) in text:
            left[int(cmdline.parent.name)] = text
    return left


def test_a_site_ansible_cfg_in_the_working_directory_is_used(tmp_path):
    """vgpu no longer forces its own ansible.cfg over the operator's: ./ansible.cfg (here one that writes a log)
    applies, and vgpu.instinct is still found (its collections path is set apart)."""
    log = tmp_path / "site-ansible.log"
    (tmp_path / "ansible.cfg").write_text(f"[defaults]\nlog_path = {log}\n")
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    proc = vgpu("playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "-e",
                "provision_profile=mi300x-4vf", "--check", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Apply the profile with vgpu" in log.read_text()
