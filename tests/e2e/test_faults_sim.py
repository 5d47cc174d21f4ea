"""Failures, crashes and races: the host ends where it started, or converges on the next run."""

import subprocess
import sys
import os

import pytest

from vgpu.errors import ApplyError, HostError
from vgpu.executor import host_lock
from vgpu.profiles import load_profile
from vgpu.provision import plan_profile, provision

from conftest import (FAULT_PROFILES, REPO, hypervisor_of, inventory, kvm_profiles, machine_for, plan_features, run_cli,
                      target_of)


def step_count(sim, name, machine="8xmi300x"):
    return len(plan_profile(target_of(sim(machine, name=f"count-{name}")), load_profile(name)).plan.steps)


def files_of(host):
    etc = host.root / "etc"
    return {str(p.relative_to(etc)): (os.readlink(p) if p.is_symlink() else p.read_text())
            for p in sorted(etc.rglob("*")) if p.is_file() or p.is_symlink()}


def test_the_fault_profiles_cover_every_step_kind_on_every_arch(tmp_path):
    assert set(FAULT_PROFILES) <= set(kvm_profiles())
    wanted = set().union(*(plan_features(n, tmp_path / "all") for n in kvm_profiles()))
    covered = set().union(*(plan_features(n, tmp_path / "cover") for n in FAULT_PROFILES))
    assert wanted <= covered, f"add a profile reaching {sorted(wanted - covered)} to FAULT_PROFILES"


@pytest.mark.parametrize("name", FAULT_PROFILES)
@pytest.mark.parametrize("when", ["before", "after"])
def test_failure_injected_at_every_step_restores_the_inventory(sim, name, when, tmp_path):
    machine = machine_for(name, tmp_path)
    n = step_count(sim, name, machine)
    assert n >= 3
    for index in range(n):
        host = sim(machine, name=f"{name}-{when}-{index}")
        before, before_files = inventory(host), files_of(host)

        def hook(i, step, moment, index=index):
            if i == index and moment == when:
                raise HostError(f"injected failure at step {i} {moment}")

        with pytest.raises(ApplyError, match="injected failure"):
            provision(target_of(host), load_profile(name), hook=hook)
        assert inventory(host).gpus == before.gpus, f"step {index} ({when}) left the host changed"
        assert files_of(host) == before_files
        assert not (host.root / "var/lib/vgpu/journal.json").exists()


def test_kernel_failure_during_vfio_binding_rolls_back(sim):
    host = sim()
    before = inventory(host)
    host.kernel.fail_next("write_attr:*/drivers_probe", "No such device")
    with pytest.raises(ApplyError, match="No such device"):
        provision(target_of(host), load_profile("mi300x-4vf"))
    assert inventory(host).gpus == before.gpus


@pytest.mark.parametrize("when", ["before", "after"])
def test_sigkill_at_every_step_then_next_run_converges(sim, when):
    name = "mi300x-4vf"
    n = step_count(sim, name)
    for index in range(n):
        host = sim(name=f"kill-{when}-{index}")
        args = _provision_args(host, name)
        killed = run_cli(*args, sim_dir=host.state_dir, env_extra={"VGPU_SIM_KILL_AT": f"{index}:{when}"})
        assert killed.returncode == -9, (index, killed.stderr[-500:])
        assert (host.root / "var/lib/vgpu/journal.json").exists()
        again = run_cli(*args, sim_dir=host.state_dir, check_rc=0)
        assert "recovered" in again.stdout
        run_cli("status", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=0)


def test_two_concurrent_provisions_never_interleave(sim, tmp_path):
    host = sim()
    trace = tmp_path / "trace"
    env = {"VGPU_SIM_TRACE": str(trace)}
    # --lock-timeout: the second waits for the first however long a loaded machine makes it (a hang guard)
    procs = [subprocess.Popen([sys.executable, "-m", "vgpu", "provision", "--profile", p, "--yes", "--simulate",
                               "--sim-dir", str(host.state_dir), "--lock-timeout", "600"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO), **env))
             for p in ("mi300x-4vf", "mi300x-8vf")]
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0, 0], [p.stderr.read()[-500:] for p in procs]
    pids = [line.split()[0] for line in trace.read_text().splitlines()]
    runs = [pid for i, pid in enumerate(pids) if i == 0 or pids[i - 1] != pid]
    assert len(runs) == 2, f"steps interleaved: {pids}"
    # the later run wins: the host matches it and re-plans to zero
    last = procs[[str(p.pid) for p in procs].index(runs[-1])].args[5]
    assert plan_profile(target_of(host), load_profile(last)).plan.in_sync


def test_lock_held_elsewhere_is_reported_with_its_holder(sim):
    from vgpu.errors import LockedError
    host = sim()
    target = target_of(host)
    with host_lock(target.state_dir):
        with pytest.raises(LockedError, match="vgpu pid"):
            provision(target, load_profile("mi300x-4vf"), lock_timeout=0.2)


def _provision_args(host, name="mi300x-4vf"):
    return ("provision", "--profile", name, "--yes", "--simulate", "--sim-dir", str(host.state_dir))


def _step_index(host, kind, name="mi300x-4vf"):
    plan = plan_profile(target_of(host), load_profile(name)).plan
    return next(i for i, s in enumerate(plan.steps) if s.kind == kind)


def _kill_provision(host, index, when="after", name="mi300x-4vf"):
    args = _provision_args(host, name)
    killed = run_cli(*args, sim_dir=host.state_dir, env_extra={"VGPU_SIM_KILL_AT": f"{index}:{when}"})
    assert killed.returncode == -9, killed.stderr[-500:]
    return args


def test_run_killed_after_its_last_step_is_kept_not_rolled_back(sim):
    host = sim()
    n = step_count(sim, "mi300x-4vf")
    args = _kill_provision(host, n - 1)
    reloads = host.dmesg().count("(GIM) version")
    planned = run_cli("plan", "--profile", "mi300x-4vf", "--simulate", "--sim-dir", str(host.state_dir),
                      sim_dir=host.state_dir, check_rc=0)
    assert "interrupted mi300x-4vf run had applied all its steps" in planned.stdout
    again = run_cli(*args, sim_dir=host.state_dir, check_rc=0)
    assert "kept them" in again.stdout and "undid" not in again.stdout
    assert host.dmesg().count("(GIM) version") == reloads  # no reload back and forth
    assert not (host.root / "var/lib/vgpu/journal.json").exists()


def test_rollback_of_an_interrupted_run_respects_holders_and_force(sim):
    host = sim()
    args = _kill_provision(host, _step_index(host, "reload-gim") + 1)  # VFs made and one GPU's bound: then the crash
    vf = inventory(host).gpus[0].vfs[2].address
    hypervisor_of(host).define_domain("train-02", [vf], running=True)
    before = inventory(host)
    refused = run_cli(*args, sim_dir=host.state_dir, check_rc=6)
    assert "interrupted mi300x-4vf run must be rolled back first" in refused.stderr
    assert "train-02" in refused.stderr
    assert inventory(host).gpus == before.gpus  # the rollback did not run
    assert (host.root / "var/lib/vgpu/journal.json").exists()
    forced = run_cli(*args, "--force", sim_dir=host.state_dir, check_rc=0)
    assert "undid" in forced.stdout
    assert plan_profile(target_of(host), load_profile("mi300x-4vf")).plan.in_sync


def test_rollback_of_an_interrupted_run_asks_first_without_yes(sim):
    host = sim()
    args = _kill_provision(host, 4)
    no_yes = [a for a in args if a != "--yes"]
    proc = run_cli(*no_yes, sim_dir=host.state_dir, check_rc=1)  # no terminal to ask: nothing done
    assert "Rollback of the interrupted mi300x-4vf run" in proc.stdout
    assert "no terminal is attached" in proc.stderr
    assert (host.root / "var/lib/vgpu/journal.json").exists()


@pytest.mark.parametrize("content", ['{"schema": "vgpu.journal/v1", "entries": [{"step": {"kind": "bogus"}}]}',
                                     '[1, 2]', '{"schema": "vgpu.journal/v1", "entries": 5}', "{not json"])
def test_damaged_journal_is_one_clear_error_and_changes_nothing(sim, content):
    host = sim()
    journal = host.root / "var/lib/vgpu/journal.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text(content)
    before = inventory(host)
    proc = run_cli("provision", "--profile", "mi300x-4vf", "--yes", "--simulate", "--sim-dir",
                   str(host.state_dir), sim_dir=host.state_dir)
    assert proc.returncode not in (0, 70) and "Traceback" not in proc.stderr, proc.stderr
    assert "journal" in proc.stderr and proc.stderr.startswith("error: ")
    assert inventory(host).gpus == before.gpus and journal.read_text() == content


@pytest.mark.parametrize("op", ["unload_module:gim", "load_module:gim", "write_attr:*/driver_override"])
def test_sigkill_inside_a_step_then_next_run_converges(sim, op):
    # not between steps but in the middle of one: gim unloaded and not yet reloaded, or a VF half rebound
    host = sim()
    host.kernel.fail_next(op, kill=True)
    args = _provision_args(host)
    killed = run_cli(*args, sim_dir=host.state_dir)
    assert killed.returncode == -9, killed.stderr[-500:]
    again = run_cli(*args, sim_dir=host.state_dir, check_rc=0)
    assert "recovered" in again.stdout
    assert plan_profile(target_of(host), load_profile("mi300x-4vf")).plan.in_sync


def test_a_rollback_that_failed_half_way_is_never_taken_for_a_completed_run(sim):
    from vgpu.executor import Journal, pending_run
    host = sim()
    target = target_of(host)
    n = step_count(sim, "mi300x-4vf")

    def fail_last(i, step, moment):  # every step applied, then a failure: the rollback starts...
        if i == n - 1 and moment == "after":
            host.kernel.fail_next("unload_module:gim", "module is busy")  # ...and cannot finish
            raise HostError("injected failure after the last step")

    with pytest.raises(ApplyError, match="rollback incomplete"):
        provision(target, load_profile("mi300x-4vf"), hook=fail_last)
    pending = pending_run(Journal(target.state_dir))
    assert pending.all_done and pending.rolling_back and not pending.complete
    again = run_cli(*_provision_args(host), sim_dir=host.state_dir, check_rc=0)
    assert "undid" in again.stdout and "kept them" not in again.stdout


def test_recovery_when_the_vm_was_undefined_after_the_crash(sim):
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=False)
    args = _kill_provision(host, _step_index(host, "attach-functions"))
    hv.undefine("gpu-vm-00")  # the operator deleted the VM meanwhile
    again = run_cli(*args, sim_dir=host.state_dir, check_rc=0)
    assert "recovered" in again.stdout
    assert plan_profile(target_of(host), load_profile("mi300x-4vf")).plan.in_sync


def test_attach_refuses_a_function_that_is_not_on_vfio_pci(sim):
    # the plan predicted VF addresses; at apply time only a function really bound for VMs is attached
    from vgpu.host import binding
    host = sim()
    target = target_of(host)
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=False)
    before, xml = inventory(host), hv.definition("gpu-vm-00")

    def steal(i, step, moment):
        if step.kind == "attach-functions" and moment == "before":
            binding.unbind(target.paths, target.kernel, step.functions[0])

    with pytest.raises(ApplyError, match="is not bound to vfio-pci, so it is not attached to VM gpu-vm-00"):
        provision(target, load_profile("mi300x-4vf"), hook=steal)
    assert inventory(host).gpus == before.gpus and hv.definition("gpu-vm-00") == xml


ISO_HOLDER = r"vgpu pid (\d+) since (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d)"


def holder_time_ok(text: str, pid: int) -> None:
    """``text`` names the lock holder as pid ``pid`` with a full ISO 8601 time (date, UTC offset) of about now."""
    import datetime
    import re

    found = re.search(ISO_HOLDER, text)
    assert found and int(found.group(1)) == pid, text
    since = datetime.datetime.fromisoformat(found.group(2))
    assert since.tzinfo is not None
    assert abs((datetime.datetime.now(datetime.timezone.utc) - since).total_seconds()) < 120, text


def test_the_lock_holder_is_shown_with_an_unambiguous_time_by_provision_and_status(sim, tmp_path):
    """A real `vgpu provision` paused before its first step holds the host lock: a second provision is refused
    (exit 7) and status warns, both naming it with the date, time and UTC offset it took the lock; neither changes
    the host; the first then finishes."""
    import time

    host = sim()
    pause = tmp_path / "pause"
    pause.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", COLUMNS="200", VGPU_SIM_DIR=str(host.state_dir),
               VGPU_SIM_PAUSE_AT="0:before", VGPU_SIM_PAUSE_DIR=str(pause))
    first = subprocess.Popen([sys.executable, "-m", "vgpu", "provision", "--profile", "mi300x-4vf", "--yes",
                              "--simulate"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 600  # a hang guard: no outcome depends on it
        while not (pause / "ready").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        before = _tree(host.state_dir)
        second = run_cli("provision", "--profile", "mi300x-1vf", "--yes", "--simulate", "--lock-timeout", "0",
                         sim_dir=host.state_dir)
        assert second.returncode == 7, second.stderr
        errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "locked by vgpu pid" in errors[0], second.stderr
        holder_time_ok(errors[0], first.pid)
        status = run_cli("status", "--simulate", sim_dir=host.state_dir)
        shown = [ln for ln in (status.stdout + status.stderr).splitlines() if "changing this host now" in ln]
        assert shown, status.stdout + status.stderr
        for line in shown:  # the verdict on stdout and the warning on stderr
            holder_time_ok(line, first.pid)
        as_json = run_cli("status", "--simulate", "--json", sim_dir=host.state_dir)
        holder_time_ok(as_json.stdout, first.pid)
        assert _tree(host.state_dir) == before  # neither the refused provision nor status changed anything
    finally:
        (pause / "go").touch()
        out, err = first.communicate(timeout=600)
    assert first.returncode == 0, out + err


def _tree(root) -> dict:
    """Every file below ``root`` with its content, links with their target."""
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}
