"""Bad input: one clear error line, a documented exit code, nothing changed."""

import json
import tarfile

from vgpu.errors import InUseError
from vgpu.profiles import load_profile
from vgpu.provision import provision

import pytest

from conftest import hypervisor_of, inventory, run_cli, target_of


def one_error_line(proc):
    lines = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_missing_sysfs_root(tmp_path):
    p = run_cli("discover", "--sysfs-root", str(tmp_path / "nope"), sim_dir=tmp_path, check_rc=5)
    assert "does not exist" in one_error_line(p)


def test_directory_that_is_not_sysfs(tmp_path):
    p = run_cli("discover", "--sysfs-root", str(tmp_path), sim_dir=tmp_path, check_rc=5)
    assert "not a sysfs tree" in one_error_line(p)


def test_corrupt_snapshot(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b garbage")
    assert "snapshot" in one_error_line(run_cli("discover", "--snapshot", str(bad), sim_dir=tmp_path, check_rc=5))
    alien = tmp_path / "alien.tar.gz"
    with tarfile.open(alien, "w:gz") as tar:
        tar.add(__file__, arcname="hello.py")
    assert "not a vgpu host snapshot" in one_error_line(
        run_cli("discover", "--snapshot", str(alien), sim_dir=tmp_path, check_rc=5))


def test_unknown_machine_and_malformed_spec(tmp_path):
    p = run_cli("discover", "--simulate", "no-such-machine", "--sim-dir", str(tmp_path / "s"), sim_dir=tmp_path,
                check_rc=5)
    assert "no-such-machine" in one_error_line(p)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: [unclosed\n")
    p = run_cli("discover", "--simulate", str(spec), "--sim-dir", str(tmp_path / "s2"), sim_dir=tmp_path, check_rc=5)
    assert one_error_line(p)


def test_snapshot_round_trip_equals_live_discovery(sim, tmp_path):
    host = sim()
    snap = tmp_path / "host.tar.gz"
    run_cli("host", "snapshot", "-o", str(snap), "--simulate", "--sim-dir", str(host.state_dir),
            sim_dir=host.state_dir, check_rc=0)
    import json
    live = json.loads(run_cli("discover", "--json", "--simulate", "--sim-dir", str(host.state_dir),
                              sim_dir=host.state_dir, check_rc=0).stdout)
    replay = json.loads(run_cli("discover", "--json", "--snapshot", str(snap), sim_dir=tmp_path, check_rc=0).stdout)
    assert replay["gpus"] == live["gpus"] and replay["findings"] == live["findings"]
    assert oct(snap.stat().st_mode & 0o777) == "0o600"


def test_invalid_profile_changes_nothing(sim, tmp_path):
    host = sim()
    before = inventory(host)
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nname: bad\ngpu:\n  model: MI300X\n  vfs_per_gpu: 3\n")
    p = run_cli("provision", "--profile", str(bad), "--yes", "--simulate", "--sim-dir", str(host.state_dir),
                sim_dir=host.state_dir, check_rc=5)
    assert "vfs_per_gpu" in p.stderr
    assert inventory(host).gpus == before.gpus


def test_vf_of_a_running_libvirt_domain_is_never_reloaded_without_force(sim):
    host = sim()
    target = target_of(host)
    provision(target, load_profile("mi300x-1vf"))
    vf = inventory(host).gpus[0].vfs[0].address
    hypervisor_of(host).define_domain("train-01", [vf], running=True)
    before = inventory(host)
    with pytest.raises(InUseError, match="train-01"):
        provision(target, load_profile("mi300x-4vf"))
    assert inventory(host).gpus == before.gpus
    provision(target, load_profile("mi300x-4vf"), force=True)  # --force: the operator drained it
    assert len(inventory(host).gpus[0].vfs) == 4



def test_this_machine_without_instinct_gpus_is_refused_and_left_alone(tmp_path):
    # the real /sys of the machine running the tests: no AMD Instinct GPU, so nothing may be planned or written
    etc = tmp_path / "etc"
    env = {"VGPU_ETC_DIR": str(etc)}
    proc = run_cli("plan", "--profile", "mi300x-4vf", "--json", sim_dir=tmp_path, env_extra=env, check_rc=4)
    problems = json.loads(proc.stdout)["problems"]
    assert any("wants MI300X GPUs, but the host has none" in p["message"] for p in problems), problems
    run_cli("provision", "--profile", "mi300x-4vf", "--yes", sim_dir=tmp_path, env_extra=env, check_rc=4)
    status = run_cli("status", sim_dir=tmp_path, env_extra=env, check_rc=0)
    assert "no profile recorded" in status.stdout
    assert not etc.exists()  # nothing was written under the configured /etc
