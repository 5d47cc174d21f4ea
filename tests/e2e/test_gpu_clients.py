"""GPU clients that block a reload (issue 24, docs/hardware.md §3): AMD's metrics exporter and gpuagent hold
/dev/gim-smi0, so gim cannot unload while they run. The plan names them and their services; provision stops
the services before the reload and starts and verifies them after (also when the step fails); a client outside
any service refuses the run unless --force. On simulated hosts whose /proc carries the clients."""

from __future__ import annotations

import json

import yaml

from conftest import run_cli

from vgpu.sim import SimHost, load_spec

EXPORTER = {"comm": "amd-metrics-exp", "device": "/dev/gim-smi0", "unit": "amd-metrics-exporter-sriov.service"}
AGENT = {"comm": "gpuagent", "device": "/dev/gim-smi0", "unit": "gpuagent-sriov.service"}
MONITOR = {"comm": "amd-smi", "device": "/dev/gim-smi0"}  # an operator's `amd-smi monitor` in a shell


def host_with(tmp_path, *clients: dict) -> SimHost:
    data = load_spec("8xmi355x").model_dump(mode="json", exclude_none=True)
    data["name"] = "8xmi355x-clients"
    data["state"]["gpu_clients"] = list(clients)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    return SimHost.create(tmp_path / "sim", spec)


def cli(host: SimHost, *args: str, **kw):
    return run_cli(*args, "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, **kw)


def running(host: SimHost) -> dict[str, str]:
    return {h.unit or h.comm: h.pid for h in host.state.holders.values()}


def reload_step(plan: dict) -> dict:
    return next(s for s in plan["steps"] if s["kind"] == "reload-gim")


def test_the_plan_names_the_services_holding_gims_smi_device(tmp_path):
    host = host_with(tmp_path, EXPORTER, AGENT)
    plan = json.loads(cli(host, "plan", "--profile", "mi355x-8vf", "--json", check_rc=3).stdout)
    d = reload_step(plan)["disruption"]
    assert d["units"] == ["amd-metrics-exporter-sriov.service", "gpuagent-sriov.service"]
    assert d["clients"] == []
    text = " ".join(cli(host, "plan", "--profile", "mi355x-8vf", check_rc=3).stdout.split())
    assert "service amd-metrics-exporter-sriov.service (a GPU client: stopped before the step, started and " \
           "verified after)" in text


def test_provision_stops_the_services_around_the_reload_and_brings_them_back(tmp_path):
    host = host_with(tmp_path, EXPORTER, AGENT)
    before = running(host)
    cli(host, "provision", "--profile", "mi355x-8vf", "--yes", check_rc=0)
    after = running(host)
    assert set(after) == set(before)  # both services are running again ...
    assert all(after[u] != before[u] for u in before)  # ... as new processes: they were restarted
    log = host.dmesg()
    assert log.index("Stopped amd-metrics-exporter-sriov.service") < log.index("GIM unloaded") < \
        log.index("Started amd-metrics-exporter-sriov.service")
    assert host.state.functions["0000:05:00.0"].sriov.num_vfs == 8


def test_without_stopping_them_gim_would_not_unload(tmp_path):
    """The model the test above relies on: the kernel refuses to unload gim while its device is open."""
    host = host_with(tmp_path, EXPORTER)
    try:
        host.kernel.unload_module("gim")
    except Exception as exc:  # noqa: BLE001 - HostError; asserted below
        assert "Module gim is in use" in str(exc)
    else:
        raise AssertionError("gim unloaded while amd-metrics-exporter held /dev/gim-smi0")


def test_a_client_outside_any_service_refuses_the_run_unless_force(tmp_path):
    host = host_with(tmp_path, EXPORTER, MONITOR)
    plan = json.loads(cli(host, "plan", "--profile", "mi355x-8vf", "--json", check_rc=3).stdout)
    monitor_pid = next(h.pid for h in host.state.holders.values() if h.comm == "amd-smi")
    assert reload_step(plan)["disruption"]["clients"] == [f"pid {monitor_pid} (amd-smi) holding /dev/gim-smi0"]
    before = host.state.generation
    proc = cli(host, "provision", "--profile", "mi355x-8vf", "--yes")
    assert proc.returncode == 6, proc.stderr  # IN_USE (docs/exit-codes.md)
    assert f"pid {monitor_pid} (amd-smi) holding /dev/gim-smi0" in proc.stderr
    assert host.state.generation == before  # nothing changed
    # --force goes ahead; the open device then stops the reload, and the run is rolled back with the
    # exporter running again
    forced = cli(host, "provision", "--profile", "mi355x-8vf", "--yes", "--force")
    assert forced.returncode == 8, forced.stderr
    assert "Module gim is in use" in forced.stderr
    assert "amd-metrics-exporter-sriov.service" in running(host)


def test_a_service_that_does_not_come_back_fails_the_step_by_name(tmp_path):
    host = host_with(tmp_path, EXPORTER)
    host.kernel.fail_next("start_unit:amd-metrics-exporter-sriov.service", "Job failed: see journalctl")
    proc = cli(host, "provision", "--profile", "mi355x-8vf", "--yes")
    assert proc.returncode == 8, proc.stderr
    assert "GPU client service(s) did not come back: amd-metrics-exporter-sriov.service" in " ".join(
        proc.stderr.split())
    # the rollback reloads gim again and starts the service once more: it runs at the end
    assert "amd-metrics-exporter-sriov.service" in running(host)
