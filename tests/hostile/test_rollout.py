"""Hostile input to `vgpu rollout`: its state file (a FIFO, /dev/zero, a directory, huge, binary, deep, the wrong
shape, or crafted: inconsistent waves, report paths outside the directory), its state directory and lock file,
and every bad option of `run`. Each case: the documented exit code, one error line, nothing changed (no state
directory created by a refused `run`)."""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from vgpu.guest.report.compare import CHECK_NAMES

from .conftest import Watch, assert_refused, vgpu
from .test_outside_files import HOW, hostile

TIMEOUT = 60
INVENTORY = """all:
  vars:
    ansible_connection: local
  children:
    gim_hosts:
      hosts:
        kvm-1: {}
        kvm-2: {}
        kvm-3: {}
    gpu_guests:
      hosts:
        vm-1: {vgpu_host: kvm-1}
        vm-2: {vgpu_host: kvm-2}
        vm-3: {vgpu_host: kvm-3}
"""


def run(*args: str) -> object:
    return vgpu("rollout", *args, timeout=TIMEOUT)


def state_doc(hosts=("kvm-1", "kvm-2")) -> dict:
    wave_hosts = [[hosts[0]], list(hosts[1:])]
    return {
        "schema": "vgpu.rollout/v1", "created": "2026-12-04T00:00:00Z", "updated": "2026-12-04T00:00:00Z",
        "state": "stopped", "reason": "wave 2 failed",
        "spec": {"inventory": "/nonexistent/inventory.yml", "inventory_sha256": "0" * 64,
                 "inventory_view_sha256": "0" * 64, "profile": "mi300x-1vf",
                 "hosts_pattern": "gim_hosts", "guests_pattern": "gpu_guests", "serial": ["1"],
                 "max_unavailable": "1"},
        "max_unavailable_hosts": 1,
        "waves": [{"index": i + 1, "canary": i == 0, "hosts": hs, "state": "pending"}
                  for i, hs in enumerate(wave_hosts)],
        "hosts": {h: {"wave": 1 if h == hosts[0] else 2, "state": "not_started"} for h in hosts},
    }


def valid_doc(area: Path) -> dict:
    """A state that passes every check of resume (its inventory, hash and hosts), to test what comes after."""
    import hashlib

    from vgpu.rollout.plan import read_fleet

    doc = state_doc()
    doc["spec"]["inventory"] = str(area / "inventory.yml")
    doc["spec"]["inventory_sha256"] = hashlib.sha256((area / "inventory.yml").read_bytes()).hexdigest()
    doc["spec"]["inventory_view_sha256"] = read_fleet(area / "inventory.yml", "gim_hosts", "gpu_guests").view_sha256
    doc["hosts"]["kvm-1"]["guests"], doc["hosts"]["kvm-2"]["guests"] = ["vm-1"], ["vm-2"]
    return doc


@pytest.fixture
def area(tmp_path) -> Path:
    (tmp_path / "inventory.yml").write_text(INVENTORY)
    return tmp_path


# dev-zero is a link to /dev/zero: resume trusts no link
STATE_NEEDLE = {"fifo": "FIFO", "dev-zero": "symbolic link", "directory": "a directory, not a regular file",
                "over-cap": "16 MiB", "nul": "binary data", "bad-utf8": "not UTF-8", "deep": "deeper than 64",
                "wrong-shape": "schema 'list'"}


@pytest.mark.parametrize("how,command", [(how, "resume") for how in HOW] + [("fifo", "status"), ("deep", "status")])
def test_state_file(area, how, command):
    state_dir = area / "rollout"
    state_dir.mkdir()
    hostile(state_dir / "state.json", how, "roll-out state", text=b'{"schema": ', wrong=b"[1, 2]")
    watch = Watch(area)
    proc = run(command, "--state-dir", str(state_dir))
    assert_refused(proc, 5, "roll-out state", "state.json", STATE_NEEDLE[how])
    watch.unchanged()


def crafted(doc: dict, case: str) -> dict:
    if case == "host-in-two-waves":
        doc["waves"][1]["hosts"].append("kvm-1")
    elif case == "report-outside":
        doc["waves"][0]["reports"] = {"validate": "../../../etc/shadow"}
    elif case == "report-absolute":
        doc["waves"][0]["reports"] = {"validate": "/etc/shadow"}
    elif case == "canary-not-first":
        doc["waves"][1]["canary"] = True
    elif case == "host-without-record":
        del doc["hosts"]["kvm-2"]
    elif case == "unknown-state":
        doc["hosts"]["kvm-1"]["state"] = "rm -rf /"
    elif case == "unknown-field":
        doc["spec"]["playbook"] = "/tmp/evil.yml"
    elif case == "negative-attempts":
        doc["hosts"]["kvm-1"]["attempts"] = -1
    elif case == "huge-reason":
        doc["reason"] = "x" * 100_000
    elif case == "template-extra-var":
        doc["spec"]["extra_vars"] = {"x": {"nested": "{{ lookup('pipe', 'id') }}"}}
    elif case == "template-string-var":
        doc["spec"]["extra_vars"] = {"x": "{{ lookup('pipe', 'touch /tmp/pwned') }}"}
    elif case == "template-in-list-var":
        doc["spec"]["extra_vars"] = {"x": ["ok", "{% for x in range(9) %}{% endfor %}"]}
    elif case == "secret-var":
        doc["spec"]["extra_vars"] = {"ansible_become_password": "hunter2"}
    elif case == "own-var":
        doc["spec"]["extra_vars"] = {"vgpu_provision_hosts": "all"}
    elif case == "template-profile":
        doc["spec"]["profile"] = "{{ lookup('env', 'HOME') }}"
    elif case == "template-pattern":
        doc["spec"]["hosts_pattern"] = "{{ groups.all | join(',') }}"
    elif case == "host-all":
        doc["waves"][1]["hosts"] = ["all"]
        doc["hosts"]["all"] = doc["hosts"].pop("kvm-2")
    elif case == "host-pattern":
        doc["waves"][1]["hosts"] = ["kvm-*"]
        doc["hosts"]["kvm-*"] = doc["hosts"].pop("kvm-2")
    elif case == "escape-host":
        doc["waves"][1]["hosts"] = ["kvm\x1b]0;pwned\x07"]
        doc["hosts"]["kvm\x1b]0;pwned\x07"] = doc["hosts"].pop("kvm-2")
    elif case == "passed-wave-not-started":
        doc["waves"][1]["state"] = "passed"
    elif case == "nan-threshold":
        doc["spec"]["thresholds"] = {"fp8": float("nan")}
    elif case == "huge-integer":
        pass  # written as text below: Python itself will not convert a 5000-digit integer
    elif case == "other-schema":
        doc["schema"] = "vgpu.rollout/v9"
    elif case == "wrong-type":
        doc["max_unavailable_hosts"] = "all"
    return doc


CRAFTED = {"host-in-two-waves": "in two waves", "report-outside": "outside the state directory",
           "report-absolute": "outside the state directory", "canary-not-first": "only the first wave",
           "host-without-record": "no matching host record", "unknown-state": "hosts.kvm-1.state",
           "unknown-field": "spec.playbook", "negative-attempts": "attempts", "huge-reason": "reason",
           "template-extra-var": "extra_vars", "other-schema": "vgpu.rollout/v9", "wrong-type": "max_unavailable_hosts",
           "template-string-var": "Jinja template", "template-in-list-var": "Jinja template",
           "secret-var": "looks like a secret", "own-var": "sets this variable itself",
           "template-profile": "Jinja template", "template-pattern": "Jinja template",
           "host-all": "not an inventory host name", "host-pattern": "not an inventory host name",
           "escape-host": "not an inventory host name", "passed-wave-not-started": "wave 2 is passed but its hosts",
           "nan-threshold": "holds NaN", "huge-integer": "number too long"}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_state_is_refused_before_a_resume_trusts_it(area, case):
    state_dir = area / "rollout"
    state_dir.mkdir()
    doc = crafted(state_doc(), case)
    text = json.dumps(doc) if case != "huge-integer" else json.dumps({**doc, "max_unavailable_hosts": 0}).replace(
        '"max_unavailable_hosts": 0', '"max_unavailable_hosts": ' + "9" * 5000)
    (state_dir / "state.json").write_text(text)
    watch = Watch(area)
    proc = run("resume", "--state-dir", str(state_dir))
    line = assert_refused(proc, 5, "roll-out state", CRAFTED[case])
    assert len(line) < 600 and "\x1b" not in proc.stderr and "hunter2" not in proc.stderr
    watch.unchanged()


def test_a_missing_roll_out_is_named(area):
    (area / "empty").mkdir()
    watch = Watch(area)
    assert_refused(run("status", "--state-dir", str(area / "nowhere")), 5, "no roll-out in")
    assert_refused(run("resume", "--state-dir", str(area / "empty")), 5, "state.json is missing")
    watch.unchanged()


def test_a_lock_file_that_is_a_symlink_or_fifo_is_never_written_through(area):
    victim = area / "victim"
    victim.write_text("precious\n")
    state_dir = area / "rollout"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps(valid_doc(area)))
    (state_dir / "lock").symlink_to(victim)
    watch = Watch(area)
    assert_refused(run("resume", "--state-dir", str(state_dir)), 5, "lock file", "symbolic link")
    (state_dir / "lock").unlink()
    os.mkfifo(state_dir / "lock")
    watch = Watch(area)
    assert_refused(run("resume", "--state-dir", str(state_dir)), 5, "lock file", "not a regular file")
    watch.unchanged()
    assert victim.read_text() == "precious\n"


def test_a_second_run_on_the_same_state_directory_is_locked_out(area):
    state_dir = area / "rollout"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps(valid_doc(area)))
    with open(state_dir / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("vgpu pid 1 since 00:00:00\n")
        held.flush()
        watch = Watch(area)
        proc = run("resume", "--state-dir", str(state_dir))
        assert_refused(proc, 7, "roll-out in", "locked by vgpu pid 1")
        watch.unchanged()


def test_the_holder_of_a_roll_out_is_shown_with_its_date_and_utc_offset(area):
    """The lock a run takes (StateDir.lock, held here by this process): resume is refused and status says a run
    holds it, both naming it with the full ISO 8601 time it took the lock (date, time, UTC offset); nothing changes."""
    import datetime
    import re

    from vgpu.rollout.state import StateDir

    state_dir = area / "rollout"
    state_dir.mkdir(mode=0o700)
    (state_dir / "state.json").write_text(json.dumps(valid_doc(area)))
    with StateDir(state_dir).lock():
        watch = Watch(area)
        refused = assert_refused(run("resume", "--state-dir", str(state_dir)), 7, "roll-out in", "locked by vgpu pid")
        status = run("status", "--state-dir", str(state_dir))
        shown = [ln for ln in status.stdout.splitlines() if ln.startswith("running now")]
        assert len(shown) == 1, status.stdout + status.stderr
        watch.unchanged()
    for line in (refused, shown[0]):
        found = re.search(r"vgpu pid (\d+) since (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d)", line)
        assert found and int(found.group(1)) == os.getpid(), line
        since = datetime.datetime.fromisoformat(found.group(2))
        assert abs((datetime.datetime.now(datetime.timezone.utc) - since).total_seconds()) < 120, line


def run_args(area: Path, *extra: str) -> list[str]:
    return ["run", "--inventory", str(area / "inventory.yml"), "--profile", "mi300x-1vf",
            "--state-dir", str(area / "rollout"), "--hosts", "gim_hosts", *extra]


BAD_RUNS = {
    "unknown-profile": (["--profile", "mi300x-99vf"], "mi300x-99vf"),
    "bad-serial": (["--serial", "1,0"], "--serial entry '0'"),
    "bad-max-unavailable": (["--max-unavailable", "150%"], "--max-unavailable '150%'"),
    "unknown-canary": (["--canary", "kvm-9"], "--canary kvm-9: not one of the roll-out's 3 host(s)"),
    "hostile-canary": (["--canary", "kvm-1\x1b[2J;rm"], "--canary"),
    "canary-over-budget": (["--canary", "kvm-1", "--canary", "kvm-2", "--max-unavailable", "1"],
                           "canary has 2 hosts but at most 1"),
    "secret-var": (["-e", "vault_password=hunter2"], "looks like a secret"),
    "own-var": (["-e", "provision_profile=mi300x-8vf"], "sets this variable itself"),
    "template-var": (["-e", "x={{ lookup('pipe','id') }}"], "Jinja template"),
    "bad-threshold": (["--threshold", "fp8=-3"], "--threshold"),
    "baseline-fifo": (["--baseline", "FIFO"], "FIFO"),
    "baseline-not-a-report": (["--baseline", "INVENTORY"], "report"),
    "no-such-hosts": (["--hosts", "esxi_hosts"], "no hosts match --limit esxi_hosts"),
    "host-without-guests": (["--guests", "vm-1,vm-2"], "1 of the roll-out's 3 hosts have no guest to validate (kvm-3)"),
    "guests-typo": (["--guests", "gpu_gusts", "--canary", "kvm-1"], "3 of the roll-out's 3 hosts have no guest"),
    "gate-var-skip-workloads": (["-e", "validate_skip_workloads=true"], "what its gate checks"),
    "gate-var-ansible-host": (["-e", "ansible_host=10.9.9.9"], "which hosts a wave reaches"),
    "gate-var-baseline": (["-e", "validate_baseline=/dev/null"], "validate_baseline"),
    "infinite-var": (["-e", "x=.inf"], "not a finite number"),
    "profile-file": (["--profile", "./mine.yaml"], "shipped profiles by name"),
    "many-thresholds": ([a for p in sorted({n[:k] for n in CHECK_NAMES for k in range(1, len(n) + 1)})[:70]
                         for a in ("--threshold", f"{p}=1")], "thresholds"),  # 70 distinct prefixes of checks
}


@pytest.mark.parametrize("case", sorted(BAD_RUNS))
def test_a_bad_run_is_refused_before_anything_is_written(area, case):
    args, needle = BAD_RUNS[case]
    if "FIFO" in args:
        os.mkfifo(area / "baseline.fifo")
        args = [str(area / "baseline.fifo") if a == "FIFO" else a for a in args]
    args = [str(area / "inventory.yml") if a == "INVENTORY" else a for a in args]
    if args[0] == "--hosts":  # replaces the default
        base = [a for a in run_args(area) if a not in ("--hosts", "gim_hosts")]
        argv = base + args
    else:
        argv = run_args(area, *args)
    watch = Watch(area)
    proc = run(*argv)
    assert_refused(proc, 5, needle)
    assert "hunter2" not in proc.stdout + proc.stderr
    assert not (area / "rollout").exists()
    watch.unchanged()


@pytest.mark.parametrize("bad", ["fp9=3", "c0=1"])
def test_a_threshold_for_no_known_check_is_a_usage_error_before_anything_is_written(area, bad):
    watch = Watch(area)
    proc = run(*run_args(area, "--threshold", "fp8=3", "--threshold", bad))
    line = assert_refused(proc, 2, f"--threshold {bad!r}: no check is named {bad.partition('=')[0]!r}",
                          "the checks: " + ", ".join(CHECK_NAMES))
    assert proc.stderr == line + "\n"  # one line, no hint
    assert not (area / "rollout").exists()
    watch.unchanged()


def test_run_never_overwrites_a_recorded_roll_out_and_refuses_a_state_dir_that_is_not_a_directory(area):
    state_dir = area / "rollout"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps(state_doc()))
    watch = Watch(area)
    assert_refused(run(*run_args(area)), 5, "already recorded")
    watch.unchanged()
    for how in ("file", "symlink"):
        other = area / f"other-{how}"
        if how == "file":
            other.write_text("x")
        else:
            other.symlink_to(area)
        watch = Watch(area)
        argv = [a if a != str(state_dir) else str(other) for a in run_args(area)]
        assert_refused(run(*argv), 5, "not a directory")
        watch.unchanged()


def test_dry_run_writes_nothing_and_lists_the_waves(area):
    watch = Watch(area)
    proc = run(*run_args(area, "--dry-run", "--json", "--allow-unvalidated", "--guests", "vm-1,vm-2"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [w["hosts"] for w in plan["waves"]] == [["kvm-1"], ["kvm-2"], ["kvm-3"]]
    assert plan["warnings"] == ["kvm-3 (wave 3) has no guests: its gate is provisioning alone (give its guests "
                                "the host variable vgpu_host: kvm-3)"]
    assert plan["spec"]["allow_unvalidated"] is True
    watch.unchanged()
    assert not (area / "rollout").exists()


def test_a_state_naming_hosts_outside_its_inventory_is_refused(area):
    """A state file whose inventory hash matches but whose hosts are not the inventory's roll-out hosts (copied
    from another roll-out, or edited) never sends a playbook anywhere."""
    doc = valid_doc(area)
    doc["waves"][1]["hosts"] = ["kvm-9"]
    doc["hosts"]["kvm-9"] = doc["hosts"].pop("kvm-2")
    state_dir = area / "rollout"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps(doc))
    watch = Watch(area)
    assert_refused(run("resume", "--state-dir", str(state_dir)), 5, "host kvm-9 is not one of the inventory's")
    watch.unchanged()


@pytest.mark.parametrize("how", ["empty-string", "root", "non-empty", "world-writable", "foreign-owner", "file"])
def test_a_state_directory_that_is_not_a_new_private_one_is_refused(area, how):
    """A roll-out runs what its state file says: its directory is new, or empty, this user's and writable by
    nobody else (a file another user could write would choose what a root-run resume executes)."""
    target = {"empty-string": "", "root": "/", "file": str(area / "inventory.yml")}.get(how, str(area / "d"))
    if how in ("non-empty", "world-writable", "foreign-owner"):
        (area / "d").mkdir()
    if how == "non-empty":
        (area / "d" / "notes.txt").write_text("mine")
    if how == "world-writable":
        os.chmod(area / "d", 0o777)
    if how == "foreign-owner":
        os.chown(area / "d", 65534, 65534)
    watch = Watch(area)
    argv = [a if a != str(area / "rollout") else target for a in run_args(area)]
    needle = {"empty-string": "give a directory of its own", "root": "give a directory of its own",
              "non-empty": "is not empty", "world-writable": "writable by others", "foreign-owner": "belongs to uid",
              "file": "not a directory"}[how]
    assert_refused(run(*argv), 5, needle)
    watch.unchanged()


def test_a_state_another_user_could_write_is_never_resumed_but_can_be_read(area):
    state_dir = area / "rollout"
    state_dir.mkdir(mode=0o700)
    (state_dir / "state.json").write_text(json.dumps(valid_doc(area)))
    os.chmod(state_dir / "state.json", 0o666)
    watch = Watch(area)
    assert_refused(run("resume", "--state-dir", str(state_dir)), 5, "writable by others")
    shown = run("status", "--state-dir", str(state_dir))
    assert shown.returncode == 1 and "stopped" in shown.stdout  # looking is harmless
    watch.unchanged()


def test_status_of_a_run_that_died_says_interrupted_and_how_to_resume(area):
    doc = valid_doc(area)
    doc["state"], doc["reason"] = "running", None
    doc["waves"][0]["state"] = "running"
    doc["hosts"]["kvm-1"]["state"] = "in_progress"
    doc["waves"][0]["reports"] = {"validate\x1b[2J[red]x": "wave-01/run-1/x.html"}
    state_dir = area / "rollout"
    state_dir.mkdir(mode=0o700)
    (state_dir / "state.json").write_text(json.dumps(doc))
    proc = run("status", "--state-dir", str(state_dir))
    assert proc.returncode == 3
    assert "interrupted (no run holds it" in proc.stdout and "resume: vgpu rollout resume" in proc.stdout
    assert "\x1b" not in proc.stdout
