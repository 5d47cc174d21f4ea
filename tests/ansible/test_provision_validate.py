"""playbooks/provision.yml and validate.yml with the real ansible-playbook, the real vgpu CLI and a
simulated MI300X host (`--simulate`, a simulator directory under tmp_path): the module's contract
(check mode = plan, changed only when steps ran, --diff shows the plan, vgpu's sentences and exit codes on
failure), idempotence, and `vgpu status` afterwards."""
from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from conftest import PLAYBOOKS, REPO, VENV_BIN, build_vgpu_wheel



def _hostile_helpers():
    """The hostile tier's "nothing changed" digest (tests/hostile/conftest.py), one implementation."""
    spec = importlib.util.spec_from_file_location("vgpu_hostile_conftest", REPO / "tests" / "hostile" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tree_digest = _hostile_helpers().tree_digest


def assert_unchanged(sim_dir: Path, before: dict) -> None:
    """Nothing in the simulated host changed, except that vgpu's host lock (an empty file in
    /var/lib/vgpu, which `provision --dry-run` takes so it never plans from a half-applied host) may now exist."""
    # Also not compared: the simulated libvirt's node.xml, which it regenerates from domains/ and its
    # states file on every open (a cache, not state).
    lock, node = "root/var/lib/vgpu/lock", "root/var/lib/libvirt-sim/hypervisor/node.xml"
    after = {k: v for k, v in tree_digest(sim_dir).items() if k != node}
    before = {k: v for k, v in before.items() if k != node}
    extra = set(after) - set(before)
    assert extra <= {lock, "root/var/lib/vgpu"}, extra
    if lock in after:  # the lock holds the pid of the last run that took it
        after[lock], before[lock] = "file", "file"
    assert {k: v for k, v in after.items() if k in before} == before

VGPU = str(VENV_BIN / "vgpu")


def sim_host(tmp_path: Path, machine: str = "8xmi300x") -> Path:
    sim_dir = tmp_path / "sim"
    proc = subprocess.run([VGPU, "sim", "reset", "--machine", machine, "--sim-dir", str(sim_dir)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return sim_dir


def provision_vars(sim_dir: Path, **over) -> dict:
    return {"vgpu_provision_hosts": "all", "ansible_become": False, "vgpu_serial": [1],
            "provision_install": "none", "provision_executable": VGPU,
            "provision_simulate": True, "provision_sim_dir": str(sim_dir),
            "provision_profile": "mi300x-4vf", **over}


def status(sim_dir: Path) -> tuple[int, dict]:
    proc = subprocess.run([VGPU, "status", "--json", "--simulate", "--sim-dir", str(sim_dir)],
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, json.loads(proc.stdout)


def module_result(play) -> dict:
    return dict(play.tasks())["Apply the profile with vgpu (check mode shows the plan)"]


def test_provision_converges_then_changes_nothing_and_status_is_in_sync(run_play, tmp_path):
    sim_dir = sim_host(tmp_path)
    first = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir))
    assert first.rc == 0 and first.ok, first.stderr[-3000:]
    res = module_result(first)
    assert res["changed"] and res["outcome"] == "applied" and res["exit_code"] == 0 and "rc" not in res
    assert res["applied"] == [s["description"] for s in res["plan"]["steps"]]
    assert first.changed_tasks() == ["Apply the profile with vgpu (check mode shows the plan)"]
    assert status(sim_dir) == (0, status(sim_dir)[1]) and status(sim_dir)[1]["in_sync"]
    assert status(sim_dir)[1]["profile"] == "mi300x-4vf"

    before = tree_digest(sim_dir)
    second = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir))
    assert second.rc == 0 and second.ok
    assert second.changed_tasks() == []  # idempotent: a second converge changes nothing
    assert module_result(second)["outcome"] == "in-sync"
    assert_unchanged(sim_dir, before)


def test_check_mode_is_the_plan_shows_it_as_diff_and_changes_nothing(run_play, tmp_path):
    sim_dir = sim_host(tmp_path)
    before = tree_digest(sim_dir)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir), check=True, diff=True)
    assert play.rc == 0, [(n, r.get("msg")) for n, r in play.tasks() if r.get("failed")]
    res = module_result(play)
    assert res["changed"] and res["outcome"] == "planned" and res["exit_code"] == 3
    prepared = res["diff"]["prepared"]
    assert prepared.startswith("vgpu apply: mi300x-4vf on simulated 8xmi300x")
    assert "reload gim with vf_num=4,4,4,4,4,4,4,4" in prepared
    assert len(prepared.splitlines()) == 1 + len(res["plan"]["steps"])
    assert_unchanged(sim_dir, before)
    assert status(sim_dir)[1]["profile"] is None


def test_refused_profile_fails_with_vgpus_sentences_and_changes_nothing(run_play, tmp_path):
    sim_dir = sim_host(tmp_path, "8xmi300x-fw1")
    before = tree_digest(sim_dir)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir))
    assert play.rc != 0
    name, msg = play.failed()
    assert name == "Apply the profile with vgpu (check mode shows the plan)"
    assert "vgpu refused profile mi300x-4vf" in msg and "4 VFs exceed this PF's TotalVFs of 1" in msg
    assert "multi-VF firmware bundle" in msg
    res = module_result(play)
    assert (res["rc"], res["exit_code_name"], len(res["problems"])) == (4, "REFUSED", 8)
    assert_unchanged(sim_dir, before)


def test_unknown_profile_fails_with_bad_input(run_play, tmp_path):
    sim_dir = sim_host(tmp_path)
    before = tree_digest(sim_dir)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir, provision_profile="mi300x-5vf"))
    _, msg = play.failed()
    assert msg.startswith("vgpu exited 5 (BAD_INPUT): mi300x-5vf: no shipped profile")
    assert module_result(play)["result"]["error"]["kind"] == "ProfileError"
    assert_unchanged(sim_dir, before)


@pytest.mark.parametrize("profile", ["--force", "mi300x-4vf --force; $(touch /tmp/vgpu-pwned)"])
def test_a_profile_that_looks_like_an_option_or_a_shell_is_only_ever_a_profile_name(run_play, tmp_path, profile):
    sim_dir = sim_host(tmp_path)
    before = tree_digest(sim_dir)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir, provision_profile=profile))
    _, msg = play.failed()
    assert msg.startswith(f"vgpu exited 5 (BAD_INPUT): {profile}: "), msg
    assert_unchanged(sim_dir, before)
    assert not Path("/tmp/vgpu-pwned").exists()


def test_devices_held_by_a_running_vm_fail_with_in_use_and_release_gives_them_back(run_play, tmp_path):
    sim_dir = sim_host(tmp_path)
    subprocess.run([VGPU, "sim", "vm", "gpu-vm-00", "--sim-dir", str(sim_dir)], check=True, capture_output=True)
    assert run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir)).ok
    from vgpu.hypervisor.sim import SimHypervisor
    from vgpu.sim.host import ROOT_NAME
    from vgpu.vms import sim_hypervisor_dir
    SimHypervisor(sim_hypervisor_dir(sim_dir / ROOT_NAME)).set_state("gpu-vm-00", "running")
    before = tree_digest(sim_dir)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir, provision_profile="mi300x-8vf"))
    _, msg = play.failed()
    assert msg.startswith("vgpu exited 6 (IN_USE): ") and "gpu-vm-00" in msg
    assert_unchanged(sim_dir, before)


def test_a_running_vm_of_the_assignment_fails_the_task_naming_what_to_do(run_play, tmp_path):
    """vgpu applies the host and exits 3 'pending' (a running VM lacks its VFs: they are cold-plugged only); the
    module fails the task saying so, never reports the host as provisioned (issue 20)."""
    sim_dir = sim_host(tmp_path)
    subprocess.run([VGPU, "sim", "vm", "gpu-vm-00", "--running", "--sim-dir", str(sim_dir)], check=True,
                   capture_output=True)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir))
    _, msg = play.failed()
    assert msg.startswith("vgpu applied what it could, but the host matches profile mi300x-4vf only after"), msg
    assert "gpu-vm-00" in msg, msg


def test_release_state_returns_the_host_and_is_idempotent(run_play, tmp_path):
    sim_dir = sim_host(tmp_path)
    assert run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir)).ok
    released = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir, provision_state="released",
                                                                      provision_profile=""))
    assert released.ok and module_result(released)["outcome"] == "applied"
    assert status(sim_dir)[1]["profile"] is None
    again = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir, provision_state="released",
                                                                   provision_profile=""))
    assert again.ok and again.changed_tasks() == []


def test_empty_profile_is_refused_before_vgpu_runs(run_play, tmp_path):
    sim_dir = sim_host(tmp_path)
    before = tree_digest(sim_dir)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir, provision_profile=""))
    assert play.failed() == ("Check a profile is named",
                             "provision_profile is empty; name a shipped profile (vgpu profiles list) or a "
                             "profile file")
    assert_unchanged(sim_dir, before)


@pytest.mark.parametrize("bad", [{"provision_force": "sometimes"}, {"provision_state": "gone"},
                                 {"provision_install": "curl-pipe-bash"}])
def test_argument_spec_refuses_wrong_types_and_choices(run_play, tmp_path, bad):
    sim_dir = sim_host(tmp_path)
    before = tree_digest(sim_dir)
    play = run_play(PLAYBOOKS / "provision.yml", provision_vars(sim_dir, **bad))
    name, msg = play.failed()
    assert "Validating arguments against arg spec" in name
    assert next(iter(bad)) in msg
    assert_unchanged(sim_dir, before)


def validate_vars(tmp_path: Path, **over) -> dict:
    return {"vgpu_guests": "all", "validate_executable": VGPU, "validate_simulate": True,
            "validate_sim_guests": 2, "validate_skip_workloads": True,
            "validate_report_dir": str(tmp_path / "reports"), **over}


def test_validate_playbook_passes_healthy_guests_and_publishes_the_junit_path(run_play, tmp_path):
    play = run_play(PLAYBOOKS / "validate.yml", validate_vars(tmp_path))
    assert play.rc == 0 and play.ok, play.stderr[-3000:]
    stats = play.doc["global_custom_stats"]["vgpu_validation"]  # what AWX shows as the job's artifacts
    assert stats["summary"]["passed"] == 2 and stats["summary"]["failed"] == 0
    junit = Path(stats["reports"]["junit"])
    assert junit == tmp_path / "reports" / "validation-report.junit.xml" and junit.read_text().startswith("<?xml")


def test_validate_playbook_fails_the_play_on_a_failed_guest_and_keeps_the_junit(run_play, tmp_path):
    play = run_play(PLAYBOOKS / "validate.yml", validate_vars(tmp_path, validate_sim_scenarios="healthy,no-rocm"))
    assert play.rc != 0
    name, msg = play.failed()
    assert name == "Fail when the simulated guests did not all pass"
    assert "1 failed" in msg and "validation-report.junit.xml" in msg
    junit = (tmp_path / "reports" / "validation-report.junit.xml").read_text()
    assert "<failure" in junit


def test_validate_fails_guests_that_regress_against_the_baseline_though_they_pass_their_checks(run_play, tmp_path):
    """validate_baseline: the AWX workflow's gate is the roll-out's (validation and the comparison). The baseline
    is these guests' own report with FP8 raised by half: today's run passes every check but is a regression."""
    first = run_play(PLAYBOOKS / "validate.yml", validate_vars(tmp_path, validate_skip_workloads=False,
                                                                validate_report_dir=str(tmp_path / "before")))
    assert first.rc == 0, first.stderr[-3000:]
    doc = json.loads((tmp_path / "before" / "validation-report.json").read_text())
    raised = 0
    for guest in doc["guests"]:
        for check in guest["checks"]:
            if check["name"] == "fp8.hipblaslt" and isinstance(check["measured"], (int, float)):
                check["measured"] *= 1.5
                raised += 1
    assert raised == 2
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(doc))
    play = run_play(PLAYBOOKS / "validate.yml", validate_vars(
        tmp_path, validate_skip_workloads=False, validate_baseline=str(baseline), validate_thresholds=["fp8=10"]))
    assert play.rc != 0
    name, msg = play.failed()
    assert name == "Fail when the simulated guests did not all pass" and "2 regressed against the baseline" in msg
    stats = play.doc["global_custom_stats"]["vgpu_validation"]
    assert stats["summary"]["failed"] == 0 and sorted(stats["regressions"]) == sorted(g["name"] for g in doc["guests"])
    assert stats["comparison"]["regressions"] >= 2
    comparison = json.loads((tmp_path / "reports" / "compare" / "comparison.json").read_text())
    assert comparison["thresholds_percent"]["fp8"] == 10.0
    # within a threshold that tolerates it, the same run passes
    again = run_play(PLAYBOOKS / "validate.yml", validate_vars(
        tmp_path, validate_skip_workloads=False, validate_baseline=str(baseline), validate_thresholds=["fp8=60"]))
    assert again.rc == 0, again.stderr[-3000:]


def test_validate_turns_the_plays_hosts_into_guests_and_fails_the_unreachable_one(run_play, tmp_path):
    # Two guests as Ansible's inventory gives them: one on a closed port, one with a key file. Neither can be
    # reached (nothing listens), so both fail in the play with vgpu's outcome, and the report names them.
    key = tmp_path / "id_test"
    key.write_text("not a key\n")
    hosts = {"guest-a": {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "ops"},
             "guest-b": {"ansible_host": "127.0.0.1", "ansible_port": "9", "ansible_ssh_private_key_file": str(key),
                         "vgpu_guest_profile": "mi300x-1vf"}}
    known = tmp_path / "known_hosts"
    known.write_text("")
    extra = validate_vars(tmp_path, validate_simulate=False, validate_profile="mi300x-4vf",
                          validate_known_hosts=str(known), validate_connect_timeout=2, validate_user="fallback")
    play = run_play(PLAYBOOKS / "validate.yml", extra, hosts=hosts)
    assert play.rc != 0
    report = json.loads((tmp_path / "reports" / "validation-report.json").read_text())
    guests = {g["name"]: g for g in report["guests"]}
    assert set(guests) == {"guest-a", "guest-b"}
    assert guests["guest-a"]["address"] == "127.0.0.1:9" and guests["guest-a"]["outcome"] == "unreachable"
    assert guests["guest-b"]["expectation"]["profile"] == "mi300x-1vf"
    assert "ops@" not in guests["guest-a"]["address"]  # reports never carry users or credentials
    for host in hosts:
        name, msg = play.on(host).failed()
        assert name == "Fail the guests whose validation did not pass"
        assert msg.startswith(f"{host}: ") and "validation-report.junit.xml" in msg


@pytest.fixture(scope="module")
def vgpu_wheel(tmp_path_factory) -> Path:
    """vgpu's own wheel, built from this checkout (offline: the venv's setuptools, no build isolation)."""
    return build_vgpu_wheel(tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel"))


def wheel_vars(sim_dir: Path, tmp_path: Path, **source) -> dict:
    """The role installing vgpu itself from a wheel. --no-deps because this machine's dependencies are not a site
    mirror; the profile is applied with the test venv's vgpu (which has them)."""
    return provision_vars(sim_dir, provision_install="pip", provision_wheel_dir=str(tmp_path / "wheels"),
                          provision_venv=str(tmp_path / "opt-vgpu"), provision_pip_extra_args=["--no-deps"], **source)


def sha256(path: Path) -> str:
    import hashlib
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def assert_installed_once_then_unchanged(run_play, extra, tmp_path, wheel, fetch_task):
    first = run_play(PLAYBOOKS / "provision.yml", extra)
    assert first.ok, [(n, r.get("msg")) for n, r in first.tasks() if r.get("failed")]
    assert {fetch_task, "Install vgpu into its virtualenv"} <= set(first.changed_tasks())
    assert (tmp_path / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    show = subprocess.run([str(tmp_path / "opt-vgpu" / "bin" / "python"), "-m", "pip", "show", "-f", "vgpu"],
                          capture_output=True, text=True, timeout=120)
    assert "Version: 0.1.0" in show.stdout and "Location: " + str(tmp_path / "opt-vgpu") in show.stdout
    second = run_play(PLAYBOOKS / "provision.yml", extra)
    assert second.ok and second.changed_tasks() == []


def test_a_controller_wheel_is_copied_installed_and_idempotent(run_play, tmp_path, vgpu_wheel):
    extra = wheel_vars(sim_host(tmp_path), tmp_path, provision_wheel=str(vgpu_wheel),
                       provision_wheel_checksum=sha256(vgpu_wheel))
    assert_installed_once_then_unchanged(run_play, extra, tmp_path, vgpu_wheel, "Copy the vgpu wheel to the host")


def test_a_wheel_url_with_its_checksum_is_downloaded_installed_and_idempotent(run_play, tmp_path, vgpu_wheel):
    extra = wheel_vars(sim_host(tmp_path), tmp_path, provision_wheel_url=vgpu_wheel.as_uri(),
                       provision_wheel_checksum=sha256(vgpu_wheel))
    assert_installed_once_then_unchanged(run_play, extra, tmp_path, vgpu_wheel,
                                         "Download the vgpu wheel (checked against its checksum)")


@pytest.mark.parametrize("case,source,task,words", [
    ("nothing", {}, "Check vgpu's wheel is given, from exactly one place",
     ["no vgpu wheel given", "never installed by name from a package index"]),
    ("both", {"provision_wheel": "W", "provision_wheel_url": "U"}, "Check vgpu's wheel is given, from exactly one place",
     ["both set"]),
    ("url-no-checksum", {"provision_wheel_url": "U"}, "Check vgpu's wheel is given, from exactly one place",
     ["sha256:<64 hex digits>, not empty (a URL needs one)"]),
    ("bad-checksum-form", {"provision_wheel": "W", "provision_wheel_checksum": "md5:abc"},
     "Check vgpu's wheel is given, from exactly one place", ["not md5:abc"]),
    ("not-a-vgpu-wheel", {"provision_wheel": "EVIL"}, "Check the wheel's file name", ["not evil.whl"]),
    ("wrong-checksum", {"provision_wheel": "W", "provision_wheel_checksum": "sha256:" + "0" * 64},
     "Check the wheel is the one the checksum names", ["not the sha256:000", "not installed"]),
])
def test_no_wheel_two_wheels_or_a_bad_one_is_refused_and_nothing_installed(run_play, tmp_path, vgpu_wheel, case,
                                                                          source, task, words):
    sim_dir = sim_host(tmp_path)
    before = tree_digest(sim_dir)
    bogus = tmp_path / "evil.whl"
    bogus.write_bytes(b"PK\x03\x04")
    where = {"W": str(vgpu_wheel), "U": vgpu_wheel.as_uri(), "EVIL": str(bogus)}
    play = run_play(PLAYBOOKS / "provision.yml",
                    wheel_vars(sim_dir, tmp_path, **{k: where.get(v, v) for k, v in source.items()}))
    name, msg = play.failed()
    assert name == task and all(w in msg for w in words), (name, msg)
    assert not (tmp_path / "opt-vgpu").exists()
    assert_unchanged(sim_dir, before)
    if case != "wrong-checksum":
        assert not (tmp_path / "wheels").exists()
