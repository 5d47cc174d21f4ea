"""`vgpu playbook run` leaves something to debug: a failed or interrupted run keeps ansible-runner's artifacts
(private, secrets out), `-v`, `--diff` per task in text and JSON, and Vault through `--vault-password-file`,
all with the real ansible-runner and ansible-playbook (docs/ansible.md, "Debugging a run")."""
from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import jsonschema

from conftest import HANG, VENV_BIN
from test_playbook_cli import SCHEMA, inventory, local_host, sim_vars, vgpu

SECRET = "hunter2-not-for-logs"
FAILING = ["-e", "provision_profile=mi300x-5vf"]  # no such profile: the provision task fails on the host


def kept_runs(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir()) if d.exists() else []


def every_file(run: Path) -> list[Path]:
    return [p for p in run.rglob("*") if p.is_file()]


def test_a_failed_run_keeps_its_artifacts_private_and_without_secrets(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    keep = tmp_path / "runs"
    proc = vgpu("playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), *FAILING,
                "-e", f"db_password={SECRET}", "--artifacts-dir", str(keep), "--json", cwd=tmp_path)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    (run,) = kept_runs(keep)
    assert doc["artifacts"] == str(run) and f"artifacts of this run (events, Ansible's output, command line): {run}" \
        in proc.stderr
    assert stat.S_IMODE(keep.stat().st_mode) == 0o700
    for p in [run, *run.rglob("*")]:
        assert stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600), p
    assert list((run / "job_events").glob("*.json")), "the run's events"
    assert "mi300x-5vf" in (run / "stdout").read_text()
    for p in every_file(run):
        assert SECRET not in p.read_text(errors="replace"), p
    command = json.loads((run / "command").read_text())
    assert "env" not in command and "PATH" in command["env_names"]  # names only: values can hold tokens
    summary = json.loads((run / "vgpu-run.json").read_text())
    assert summary["extra_vars"]["db_password"] == "<redacted>" and summary["exit_code"] == 8
    assert not (run / "env").exists() and not (run / "inventory").exists()


def test_a_successful_run_keeps_nothing_unless_asked_and_v_reaches_ansible(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    keep = tmp_path / "runs"
    args = ["playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "-e", "provision_profile=mi300x-4vf",
            "--artifacts-dir", str(keep)]
    first = vgpu(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert kept_runs(keep) == [] and "artifacts of this run" not in first.stderr
    second = vgpu(*args, "--keep-artifacts", "-vv", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    (run,) = kept_runs(keep)
    assert "-vv" in json.loads((run / "command").read_text())["command"]
    assert "Using " in (run / "stdout").read_text()  # -v and above: Ansible names its config file


def test_diff_is_shown_per_host_and_task_in_text_and_json(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    args = ["playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "-e", "provision_profile=mi300x-4vf",
            "--check", "--diff"]
    doc = json.loads(vgpu(*args, "--json", cwd=tmp_path).stdout)
    jsonschema.validate(doc, SCHEMA)
    (diff,) = doc["hosts"][0]["diffs"]
    assert diff["task"].endswith("Apply the profile with vgpu (check mode shows the plan)")
    assert "vf_num=4,4,4,4,4,4,4,4" in diff["diff"]
    text = vgpu(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "--- diff: kvm-a / " in text.stdout and "vf_num=4,4,4,4,4,4,4,4" in text.stdout
    plain = json.loads(vgpu("playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path),
                            "-e", "provision_profile=mi300x-4vf", "--check", "--json", cwd=tmp_path).stdout)
    assert "diffs" not in plain["hosts"][0]  # only when asked


def vault_inventory(tmp_path: Path) -> tuple[Path, Path]:
    """An inventory whose group_vars hold provision_profile encrypted with Ansible Vault."""
    password = tmp_path / "vault-pass"
    password.write_text("correct horse battery\n")
    password.chmod(0o600)
    enc = subprocess.run([str(VENV_BIN / "ansible-vault"), "encrypt_string", "--vault-password-file", str(password),
                          "mi300x-4vf", "--name", "provision_profile"], capture_output=True, text=True, check=True,
                         timeout=HANG).stdout
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gim_hosts.yml").write_text("---\n" + enc)
    return inv, password


def test_a_vault_encrypted_variable_is_read_with_the_password_file(tmp_path):
    inv, password = vault_inventory(tmp_path)
    args = ["playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "--check", "--diff", "--json"]
    doc = json.loads(vgpu(*args, "--vault-password-file", str(password), cwd=tmp_path).stdout)
    assert doc["exit_code"] == 0 and "mi300x-4vf" in doc["hosts"][0]["diffs"][0]["diff"], doc
    without = vgpu(*args, "--artifacts-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert without.returncode != 0 and "vault" in (without.stdout + without.stderr).lower()
    for p in every_file(kept_runs(tmp_path / "runs")[0]):
        assert "correct horse" not in p.read_text(errors="replace")


def test_bad_run_options_are_refused_before_anything_runs(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    base = ["playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "-e", "provision_profile=mi300x-4vf"]
    sim_before = sorted(str(p) for p in (tmp_path / "sim").rglob("*"))
    for extra, words in ((["--vault-password-file", str(tmp_path / "missing")], "no such regular file"),
                         (["--vault-password-file", str(tmp_path)], "no such regular file"),
                         (["--vault-password-file", str(a_file), "--ask-vault-pass"], "give one of them"),
                         (["--ask-vault-pass"], "needs a terminal"),
                         (["--artifacts-dir", str(a_file)], "not a directory"),
                         (["-vvvvvvv"], "at most")):
        proc = vgpu(*base, *extra, cwd=tmp_path)
        assert proc.returncode == 5, (extra, proc.stdout, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, (extra, proc.stderr)
    assert sorted(str(p) for p in (tmp_path / "sim").rglob("*")) == sim_before
    assert not (tmp_path / "sim" / "root" / "var" / "lib" / "vgpu" / "profile.json").exists()


def test_ask_vault_pass_is_answered_on_the_terminal_and_kept_nowhere(tmp_path):
    """On a terminal (a real pty) vgpu asks once; ansible-playbook's own prompt is answered from memory."""
    import os

    import pexpect

    inv, password = vault_inventory(tmp_path)
    keep = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(NO_COLOR="1", COLUMNS="200")
    child = pexpect.spawn(str(VENV_BIN / "vgpu"), ["playbook", "run", "provision", "-i", str(inv),
                                                   *sim_vars(tmp_path), "--check", "--diff", "--ask-vault-pass",
                                                   "--keep-artifacts", "--artifacts-dir", str(keep)],
                          cwd=str(tmp_path), env=env, encoding="utf-8", timeout=HANG)
    child.expect("Vault password: ")
    child.sendline("correct horse battery")
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    assert "vf_num=4,4,4,4,4,4,4,4" in out and "correct horse" not in out
    (run,) = kept_runs(keep)
    assert "--ask-vault-pass" in json.loads((run / "command").read_text())["command"]
    for p in every_file(run):
        assert "correct horse" not in p.read_text(errors="replace"), p


def test_a_success_creates_no_artifacts_directory_and_an_unwritable_one_only_warns(tmp_path):
    inv = inventory(tmp_path, {"gim_hosts": {"kvm-a": local_host()}})
    keep = tmp_path / "not-yet"
    ok = vgpu("playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), "-e", "provision_profile=mi300x-4vf",
              "--artifacts-dir", str(keep), cwd=tmp_path)
    assert ok.returncode == 0 and not keep.exists(), ok.stderr
    # a path under a regular file cannot be made by anyone, root included
    under_file = tmp_path / "a-file"
    under_file.write_text("x")
    bad = vgpu("playbook", "run", "provision", "-i", str(inv), *sim_vars(tmp_path), *FAILING,
               "--artifacts-dir", str(under_file / "runs"), cwd=tmp_path)
    assert bad.returncode == 8, bad.stdout + bad.stderr  # the run's own verdict stands
    assert "warning: the run's artifacts could not be kept in" in bad.stderr and "Traceback" not in bad.stderr
