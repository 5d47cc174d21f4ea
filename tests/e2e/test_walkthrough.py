"""What a newcomer meets in the first week (issue 20's walk-through): plan, provision and status agree about a
host with a running VM, and every "next command" hint runs, pasted as is, on the same host."""

import re
import shlex

from conftest import hypervisor_of, run_cli


def _cli(host, *args, rc):
    return run_cli(*args, "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=rc)


def _quoted_command(text: str, verb: str) -> list[str]:
    """The `vgpu VERB ...` a hint quotes, split as a shell would."""
    found = re.search(r"`(vgpu " + verb + r"[^`]*)`", text)
    assert found, text
    return shlex.split(found.group(1))


def test_a_running_vm_keeps_plan_provision_and_status_agreeing_until_it_is_shut_down(sim):
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=True)
    hv.define_domain("gpu-vm-01", running=False)
    applied = _cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=3)
    assert "now matches" not in applied.stdout and "not finished" in applied.stdout
    assert "shut down VM gpu-vm-00" in applied.stdout
    status = _cli(host, "status", rc=1)
    assert re.search(r"DRIFT .*VM gpu-vm-00", status.stdout)
    assert "VM gpu-vm-00: shut it down" in status.stdout
    again = _quoted_command(status.stdout, "provision")
    assert again == ["vgpu", "provision", "--recorded", "--sim-dir", str(host.state_dir), "--simulate"]
    replayed = run_cli(*again[1:], sim_dir=host.state_dir, check_rc=3)  # says why, never "in sync"
    assert "nothing to do" not in replayed.stdout and "shut down VM gpu-vm-00" in replayed.stdout
    assert _quoted_command(replayed.stdout, "provision") == again
    _cli(host, "plan", "--profile", "mi300x-4vf", rc=3)
    hv.set_state("gpu-vm-00", "shutoff")
    done = run_cli(*again[1:], "--yes", sim_dir=host.state_dir, check_rc=0)
    assert "now matches mi300x-4vf" in done.stdout
    _cli(host, "status", rc=0)
    _cli(host, "plan", "--profile", "mi300x-4vf", rc=0)


def test_plan_hint_applies_the_same_profile_file_on_the_same_simulated_host(sim, tmp_path):
    host = sim()
    profile = tmp_path / "my profile.yaml"  # a space: the hint must quote it
    profile.write_text(run_cli("profiles", "show", "mi300x-4vf", sim_dir=host.state_dir, check_rc=0).stdout)
    plan = _cli(host, "plan", "--profile", str(profile), rc=3)
    apply = _quoted_command(plan.stdout, "provision")
    assert apply == ["vgpu", "provision", "--profile", str(profile), "--sim-dir", str(host.state_dir),
                     "--simulate"]
    run_cli(*apply[1:], "--yes", sim_dir=tmp_path / "elsewhere", check_rc=0)  # not the environment's sim dir
    _cli(host, "status", rc=0)
    release = _cli(host, "release", "--dry-run", rc=3)
    assert _quoted_command(release.stdout, "release") == ["vgpu", "release", "--sim-dir", str(host.state_dir),
                                                          "--simulate"]


def test_export_keeps_the_vm_assignment_and_plans_back_in_sync_without_warnings(sim, tmp_path):
    import yaml
    host = sim()
    hv = hypervisor_of(host)
    for name in ("gpu-vm-00", "gpu-vm-05", "gpu-vm-31"):
        hv.define_domain(name, running=False)
    _cli(host, "provision", "--profile", "mi300x-4vf", "--yes", rc=0)
    exported = tmp_path / "now.yaml"
    _cli(host, "export", "--name", "now", "-o", str(exported), rc=0)
    assign = yaml.safe_load(exported.read_text())["vms"]["assign"]
    by_libvirt = {d.name: sorted(str(a) for a in d.hostdevs) for d in hv.domains()}
    assert assign == by_libvirt and sorted(assign) == ["gpu-vm-00", "gpu-vm-05", "gpu-vm-31"]
    plan = _cli(host, "plan", "--profile", str(exported), rc=0)
    assert "in sync" in plan.stdout
    # the profile's own warnings (4 VFs is outside AMD's validated matrix) stay; none about VMs
    assert "VM" not in plan.stdout + plan.stderr


def test_report_compare_names_where_it_wrote_and_each_rows_unit(tmp_path):
    for name, scenario in (("before", "healthy"), ("after", "slow")):
        run_cli("validate", "--simulate", "--guests", "1", "--scenario", scenario, "--report-dir",
                str(tmp_path / name), "-q", sim_dir=tmp_path / "sim")
    out = tmp_path / "cmp"
    proc = run_cli("report", "--compare", str(tmp_path / "before"), str(tmp_path / "after"), "--report-dir", str(out),
                   sim_dir=tmp_path / "sim", check_rc=1)
    for kind, name in (("JSON", "comparison.json"), ("JUnit", "comparison.junit.xml"), ("HTML", "comparison.html")):
        assert f"{kind} comparison: {out / name}" in proc.stdout and (out / name).is_file()
    header = next(line for line in proc.stdout.splitlines() if "guest" in line and "verdict" in line)
    assert [c.strip() for c in header.strip("┃│ ").split("┃")][:8] == ["guest", "check", "what", "baseline",
                                                                     "current", "unit", "change", "verdict"]
    measured = [line for line in proc.stdout.splitlines() if "fp8" in line and "measured" in line]
    assert measured and all("│ TFLOPS │" in line for line in measured)
