"""Prometheus metrics of a host and its guests' last validation, in the text exposition format
(node_exporter's textfile collector reads it; docs/metrics.md has the names and example alerts).

Built with the ``prometheus_client`` library on a private registry, from what vgpu reads now: the
host's GPUs and VFs (any platform), which VM holds each function, the recorded profile against the
host (vgpu status), and the newest validation report per guest. Every value is read, none remembered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

from vgpu.model.inventory import Inventory

FP8_CHECKS = ("fp8.hipblaslt", "fp8.torch")  # the agent's FP8 measurements, the first one found wins
PASSTHROUGH_DRIVERS = ("vfio-pci", "pciPassthru")


def gpu_mode(gpu) -> str:
    """sriov (GIM drives it and its VFs), passthrough (whole, to a VM), or host (neither)."""
    if gpu.driver == "gim":
        return "sriov"
    if gpu.driver in PASSTHROUGH_DRIVERS:
        return "passthrough"
    return "host"


def registry(inv: Inventory, domains: Sequence | None, status, reports: Iterable) -> object:
    """A CollectorRegistry with every metric set. ``domains``: the VMs (DomainInfo) or None when the
    hypervisor could not be asked; ``status``: a StatusResult; ``reports``: ValidationReports."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    info = Gauge("vgpu_gpu_info", "An AMD Instinct GPU on this host (always 1); mode: sriov, passthrough or host",
                 ["gpu", "model", "mode", "driver", "platform"], registry=reg)
    vfs = Gauge("vgpu_gpu_vfs", "SR-IOV virtual functions the GPU has now", ["gpu"], registry=reg)
    vf_info = Gauge("vgpu_vf_info", "A virtual function (always 1); vm: the VM whose configuration has it, "
                    "empty when none", ["gpu", "vf", "driver", "vm"], registry=reg)
    held = Gauge("vgpu_function_in_use", "1 when a running VM holds the function (a VF, or a whole GPU)",
                 ["function", "vm"], registry=reg)
    known = Gauge("vgpu_hypervisor_up", "1 when the hypervisor answered which VMs hold the GPUs", registry=reg)
    recorded = Gauge("vgpu_profile_recorded", "1 when a profile is recorded for this host", ["profile"], registry=reg)
    in_sync = Gauge("vgpu_profile_in_sync", "1 when the host matches its recorded profile (vgpu status)",
                    ["profile"], registry=reg)
    drift = Gauge("vgpu_profile_drift_items", "Status items that differ from the recorded profile", ["profile"],
                  registry=reg)
    passed = Gauge("vgpu_validation_passed", "1 when the guest's last validation passed", ["guest", "model"],
                   registry=reg)
    when = Gauge("vgpu_validation_timestamp_seconds", "When the guest's last validation report was written",
                 ["guest"], registry=reg)
    fp8 = Gauge("vgpu_validation_fp8_tflops", "FP8 GEMM throughput the guest's last validation measured",
                ["guest", "model"], registry=reg)

    owner = {}
    for d in domains or ():
        for address in d.hostdevs:
            owner.setdefault(address, d)
    known.set(0 if domains is None else 1)
    for g in inv.gpus:
        info.labels(str(g.address), g.model, gpu_mode(g), g.driver or "", inv.platform).set(1)
        vfs.labels(str(g.address)).set(len(g.vfs))
        for vf in g.vfs:
            d = owner.get(vf.address)
            vf_info.labels(str(g.address), str(vf.address), vf.driver or "", d.name if d else "").set(1)
        for address in (g.address, *(vf.address for vf in g.vfs)):
            d = owner.get(address)
            if d is not None and d.active:
                held.labels(str(address), d.name).set(1)
    name = status.profile or ""
    recorded.labels(name).set(1 if status.profile else 0)
    if status.profile:
        in_sync.labels(name).set(1 if status.in_sync else 0)
        drift.labels(name).set(sum(not i.ok for i in status.items))
    for guest, (stamp, model, ok, tflops) in latest_per_guest(reports).items():
        passed.labels(guest, model).set(1 if ok else 0)
        when.labels(guest).set(stamp)
        if tflops is not None:
            fp8.labels(guest, model).set(tflops)
    return reg


def report_files(path: Path) -> tuple[list[Path], str | None]:
    """What one ``--report`` names: a report JSON, a ``--report-dir``, or a roll-out's ``--state-dir`` (the reports
    of every wave and run, docs/rollout.md); and a warning for a roll-out that has validated no guest yet."""
    from vgpu.guest.report import JSON_NAME
    from vgpu.rollout.state import STATE_NAME, StateDir

    if path.is_dir() and not (path / JSON_NAME).exists() and (path / STATE_NAME).is_file():
        found = StateDir(path).validation_reports()
        return found, None if found else f"roll-out {path} has no validation report yet"
    return [path], None


def latest_per_guest(reports: Iterable) -> dict[str, tuple[float, str, bool, float | None]]:
    """guest -> (report time, model, passed, FP8 TFLOPS) from the newest report naming it; of two written in the
    same second, the later one given (a roll-out's runs come in order: its second run of a wave wins)."""
    out: dict[str, tuple[float, str, bool, float | None]] = {}
    for report in reports:
        stamp = _epoch(report.generated)
        for g in report.guests:
            if g.name in out and out[g.name][0] > stamp:
                continue
            measured = {c.name: c.measured for c in g.checks}
            tflops = next((float(measured[n]) for n in FP8_CHECKS
                           if isinstance(measured.get(n), (int, float)) and not isinstance(measured.get(n), bool)),
                          None)
            out[g.name] = (stamp, g.expectation.model or "", g.verdict == "pass", tflops)
    return out


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return 0.0


def render(reg) -> bytes:
    from prometheus_client import generate_latest
    return generate_latest(reg)


ROLLOUT_HOST_STATES = ("not_started", "in_progress", "done", "failed")
ROLLOUT_STATES = ("running", "stopped", "interrupted", "done")


def rollout_registry(state, *, running: bool) -> object:
    """A roll-out's progress (vgpu rollout; docs/rollout.md): per host its state and wave, per wave its state,
    the counts, whether a run holds it now, and when its record last changed. ``state``: a Rollout."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    info = Gauge("vgpu_rollout_info", "The roll-out (always 1); state: running, stopped, interrupted or done",
                 ["profile", "state"], registry=reg)
    active = Gauge("vgpu_rollout_running", "1 while a vgpu rollout run or resume holds the roll-out", registry=reg)
    hosts = Gauge("vgpu_rollout_hosts", "Hosts of the roll-out in each state", ["state"], registry=reg)
    host = Gauge("vgpu_rollout_host_state", "1 for the host's state (one series per host and state)",
                 ["host", "wave", "state"], registry=reg)
    attempts = Gauge("vgpu_rollout_host_attempts", "Times the roll-out ran the host's wave for it", ["host"],
                     registry=reg)
    wave = Gauge("vgpu_rollout_wave_state", "1 for the wave's state (pending, running, passed, failed)",
                 ["wave", "canary", "state"], registry=reg)
    updated = Gauge("vgpu_rollout_updated_timestamp_seconds", "When the roll-out's record last changed", registry=reg)
    info.labels(state.spec.profile, state.state).set(1)
    active.set(1 if running else 0)
    counts = state.counts()
    for s in ROLLOUT_HOST_STATES:
        hosts.labels(s).set(counts.get(s, 0))
    for name, rec in state.hosts.items():
        for s in ROLLOUT_HOST_STATES:
            host.labels(name, str(rec.wave), s).set(1 if rec.state == s else 0)
        attempts.labels(name).set(rec.attempts)
    for w in state.waves:
        for s in ("pending", "running", "passed", "failed"):
            wave.labels(str(w.index), "true" if w.canary else "false", s).set(1 if w.state == s else 0)
    updated.set(_epoch(state.updated))
    return reg
