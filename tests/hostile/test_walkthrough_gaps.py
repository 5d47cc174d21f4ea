"""Bad input that slipped through a hostile rerun (issue 20): each case is the documented exit code, one error
line naming the file and what is wrong, and nothing outside changed."""
from __future__ import annotations

import json

import pytest

from .conftest import Watch, assert_refused, vgpu
from .test_outside_files import base, sim, sim_env, tiny_tmpfs  # noqa: F401 (fixtures)
from .test_rollout import INVENTORY, area, valid_doc  # noqa: F401 (fixture)

TIMEOUT = 60


def entry(step, info=None, done=True):
    return {"step": step, "info": {} if info is None else info, "done": done}


JOURNALS = {
    "unknown-kind": ([entry({"kind": "rm-rf"})], {}, "unknown step kind 'rm-rf'"),
    "string-steps": (["reload-gim", "bind-vfs"], {}, "entry 1 is not a {step, info, done} object"),
    "fields-missing": ([entry({"kind": "bind-vfs"})], {}, "bind-vfs step whose fields do not make one"),
    "bad-address": ([entry({"kind": "bind-device", "address": "../../etc", "driver": "vfio-pci"})], {},
                    "bind-device step whose fields"),
    "done-not-bool": ([entry({"kind": "rm-rf"}, done="yes")], {}, "done that is not true or false"),
    "baseline-list": ([], {"baseline": ["etc/gim_config"]}, "baseline is not a mapping"),
    "entries-dict": ({"1": entry({"kind": "reload-gim"})}, {}, "entries are not a list"),
}


@pytest.mark.parametrize("how", sorted(JOURNALS))
def test_a_journal_of_the_right_schema_but_the_wrong_shape_is_one_line_and_exit_5(sim, how):  # noqa: F811
    entries, extra, needle = JOURNALS[how]
    journal = sim / "root/var/lib/vgpu/journal.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text(json.dumps({"schema": "vgpu.journal/v1", "profile": "mi300x-4vf", "steps": 1,
                                   "entries": entries, **extra}))
    watch = Watch(sim / "root/sys", sim / "root/etc", journal)
    for args in (("provision", "--profile", "mi300x-4vf", "--yes"), ("release", "--yes")):
        proc = vgpu(*args, "--simulate", "--sim-dir", str(sim), env=sim_env(sim), timeout=TIMEOUT)
        line = assert_refused(proc, 5, "the journal", str(journal), "is damaged", needle)
        assert "Error" not in line, line  # a sentence, not a Python exception's name
    watch.unchanged()


def test_a_host_lock_that_is_a_directory_is_exit_5_saying_remove_it(sim):  # noqa: F811
    lock = sim / "root/var/lib/vgpu/lock"
    lock.mkdir(parents=True)
    watch = Watch(sim / "root", sim / "state.json")
    proc = vgpu("provision", "--profile", "mi300x-4vf", "--yes", "--simulate", "--sim-dir", str(sim),
                env=sim_env(sim), timeout=TIMEOUT)
    assert_refused(proc, 5, "lock file", str(lock), "is a directory")
    assert f"hint: remove that directory (rmdir {lock})" in proc.stderr and "free space" not in proc.stderr
    watch.unchanged()


def test_a_state_directory_that_is_a_regular_file_is_exit_5(sim):  # noqa: F811
    state = sim / "root/var/lib/vgpu"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("not a directory\n")
    watch = Watch(sim / "root", sim / "state.json")
    proc = vgpu("provision", "--profile", "mi300x-4vf", "--yes", "--simulate", "--sim-dir", str(sim),
                env=sim_env(sim), timeout=TIMEOUT)
    assert_refused(proc, 5, "state directory", str(state), "regular file")
    watch.unchanged()


def test_a_rollout_lock_that_is_a_directory_says_remove_it_not_free_space(area):  # noqa: F811
    state_dir = area / "rollout"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps(valid_doc(area)))
    (state_dir / "lock").mkdir()
    watch = Watch(area)
    proc = vgpu("rollout", "resume", "--state-dir", str(state_dir), timeout=TIMEOUT)
    assert_refused(proc, 5, "lock file", "is a directory")
    assert "rmdir" in proc.stderr and "free space" not in proc.stderr and "remount" not in proc.stderr
    watch.unchanged()


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
@pytest.mark.parametrize("state_dir", ["", ".", "/"])
def test_rollout_run_refuses_an_unusable_state_dir_with_or_without_dry_run(area, state_dir, dry_run):  # noqa: F811
    watch = Watch(area)
    proc = vgpu("rollout", "run", "-i", str(area / "inventory.yml"), "--profile", "mi300x-1vf",
                "--state-dir", state_dir, *dry_run, cwd=area, timeout=TIMEOUT)
    assert_refused(proc, 5, "state directory", "give a directory of its own")
    assert proc.stdout == ""
    watch.unchanged()


def test_rollout_dry_run_refuses_a_directory_holding_a_rollout_like_the_run(area):  # noqa: F811
    state_dir = area / "rollout"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps(valid_doc(area)))
    watch = Watch(area)
    proc = vgpu("rollout", "run", "-i", str(area / "inventory.yml"), "--profile", "mi300x-1vf",
                "--state-dir", str(state_dir), "--dry-run", timeout=TIMEOUT)
    assert_refused(proc, 5, "a roll-out is already recorded in")
    watch.unchanged()


def _gpu_dirs(sim):  # noqa: F811
    return [d for d in sorted((sim / "root/sys/bus/pci/devices").iterdir())
            if (d / "vendor").read_text().strip() == "0x1002" and (d / "sriov_totalvfs").exists()]


@pytest.mark.parametrize("value, read", [("99999999999", None), ("1024", None), ("1" * 5000, None), ("-7", None),
                                         ("1023", 1023), ("-1", None)])
def test_a_numa_node_linux_cannot_have_reads_as_no_node(sim, value, read):  # noqa: F811
    victim = _gpu_dirs(sim)[1]
    (victim / "numa_node").unlink()
    (victim / "numa_node").write_text(value + "\n")
    watch = Watch(sim / "root")
    proc = vgpu("discover", "--sysfs-root", str(sim / "root/sys"), "--json", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    (gpu,) = [g for g in json.loads(proc.stdout)["gpus"] if g["address"] == victim.name]
    assert gpu["numa_node"] == read
    watch.unchanged()


@pytest.mark.parametrize("command", [("metrics",), ("discover", "--json"), ("status",)])
def test_a_simulated_host_on_a_full_disk_is_one_line_and_exit_5(tiny_tmpfs, tmp_path, command):  # noqa: F811
    """64 KiB cannot hold a simulated 8xmi300x: building it fails mid-way (ENOSPC) and leaves nothing behind."""
    watch = Watch(tmp_path / "elsewhere")
    proc = vgpu(*command, "--simulate", "--sim-dir", str(tiny_tmpfs / "sim"), timeout=TIMEOUT)
    assert_refused(proc, 5, "simulated host", str(tiny_tmpfs / "sim"), "no space left")
    assert proc.stdout == "" and not (tiny_tmpfs / "sim").exists()
    assert [p.name for p in tiny_tmpfs.iterdir()] == []  # no staging directory either
    watch.unchanged()


def test_validate_concurrency_is_bounded_and_a_thread_limit_is_one_line(tmp_path):
    import os
    import resource
    import subprocess
    import sys

    from .conftest import REPO

    too_many = vgpu("validate", "--simulate", "--concurrency", "512", "--report-dir", str(tmp_path / "r"),
                    timeout=TIMEOUT)
    assert too_many.returncode == 2 and "1<=x<=256" in too_many.stderr.replace(" ", "")

    def small_address_space():  # 64 threads of 8 MiB stacks cannot fit in 400 MiB; vgpu itself does
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))

    watch = Watch(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "vgpu", "validate", "--simulate", "--guests", "64",
                           "--concurrency", "64", "--skip-workloads", "--report-dir", str(tmp_path / "reports"), "-q"],
                          capture_output=True, text=True, timeout=120, preexec_fn=small_address_space,
                          env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1"))
    line = assert_refused(proc, 5, "--concurrency 64", "could start only", "ulimit -v")
    assert "can't start new thread" not in line
    watch.unchanged()  # refused before any guest: no report directory


@pytest.mark.parametrize("scenarios, needle", [("no-rocm", "none of its 2 guest(s) passed (2 failed, 0 not "
                                                           "validated)"),
                                               ("healthy,no-rocm", "1 of its 2 guest(s) did not pass (sim-02)"),
                                               ("healthy", None)])
def test_rollout_dry_run_warns_of_a_baseline_whose_guests_failed(area, scenarios, needle):  # noqa: F811
    baseline = area / "baseline"
    made = vgpu("validate", "--simulate", "--guests", "2", "--skip-workloads", "--scenario", scenarios,
                "--report-dir", str(baseline), "-q", timeout=TIMEOUT)
    assert made.returncode in (0, 1), made.stderr
    watch = Watch(area)
    args = ("rollout", "run", "-i", str(area / "inventory.yml"), "--profile", "mi300x-1vf", "--state-dir",
            str(area / "rollout"), "--hosts", "gim_hosts", "--baseline", str(baseline), "--dry-run")
    doc = json.loads(vgpu(*args, "--json", timeout=TIMEOUT).stdout)
    human = vgpu(*args, timeout=TIMEOUT)
    about = [w for w in doc["warnings"] if w.startswith(f"the baseline {baseline}")]
    if needle is None:
        assert about == []
    else:
        assert len(about) == 1 and needle in about[0]
        assert needle in " ".join(human.stdout.split())
    watch.unchanged()
