"""The roll-out's gate and record, with the playbooks replaced by a scripted fleet (the real playbooks run in
tests/integration/test_rollout_netns.py and tests/ansible/test_rollout_signals.py): which waves run, what stops
them, what a host's state and reason become, what resume and --skip-failed do, and that the state file is what
a resume reads back."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from vgpu.errors import ExitCode, InputError, InterruptedRun, RefusedError, VgpuError
from vgpu.guest.agent.result import AgentResult, CheckResult
from vgpu.guest.report.model import GuestReport, Outcome, ValidationReport
from vgpu.rollout import waves as W
from vgpu.rollout.plan import Prepared, new_rollout, sha256_of
from vgpu.rollout.runner import Runner
from vgpu.rollout.state import Spec, StateDir


def report(values: dict[str, float], failing: tuple[str, ...] = ()) -> ValidationReport:
    guests = []
    for name, tflops in values.items():
        status = "fail" if name in failing else "pass"
        checks = [CheckResult("fp8.hipblaslt", status, tflops, 1000.0, "TFLOPS", "GEMM")]
        guests.append(GuestReport(name, "10.0.0.1:22", Outcome.OK,
                                  agent=AgentResult(name, "1", "2026-12-04T00:00:00Z", 1.0, checks)))
    return ValidationReport("2026-12-04T00:00:00Z", "test", guests)


class Fleet:
    """Scripted playbooks: provision failures by host, validation results by guest; every call logged."""

    def __init__(self, tflops: dict[str, float] | None = None):
        self.calls: list[tuple[str, list[str]]] = []
        self.provision_fails: dict[str, str] = {}
        self.failing: set[str] = set()
        self.tflops = dict(tflops or {})
        self.interrupt_on: str | None = None
        self.error_on: str | None = None
        self.signal_in_validate: int | None = None

    def provision(self, hosts, out, note):
        self.calls.append(("provision", list(hosts)))
        note("provision task: Apply the profile")
        if self.interrupt_on in hosts:
            raise InterruptedRun("interrupted by SIGTERM", 15)
        if self.error_on in hosts:
            raise VgpuError("no playbooks/ and collections/ under /nowhere")
        return {h: self.provision_fails.get(h) for h in hosts}

    def guest_stack(self, guests, out, note):
        self.calls.append(("guest-stack", list(guests)))
        return {g: None for g in guests}

    def validate(self, guests, out, note):
        self.calls.append(("validate", list(guests)))
        if self.signal_in_validate:
            os.kill(os.getpid(), self.signal_in_validate)  # arrives while the playbook "runs": acted on after it
        return report({g: self.tflops.get(g, 1300.0) for g in guests}, tuple(self.failing)), None


HOSTS = ["kvm-1", "kvm-2", "kvm-3", "kvm-4", "kvm-5"]


@pytest.fixture
def make(tmp_path):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")

    def build(*, serial=("1", "2"), max_unavailable="2", canary=(), baseline=None, guest_stack=False):
        guests = {h: [h.replace("kvm", "vm")] for h in HOSTS}
        plan = W.plan_waves(HOSTS, guests, canary=canary, serial=serial, max_unavailable=max_unavailable)
        spec = Spec(inventory=str(inventory), inventory_sha256=sha256_of(inventory, "inventory"),
                    inventory_view_sha256="0" * 64, profile="mi300x-1vf",
                    hosts_pattern="gim_hosts", guests_pattern="gpu_guests", canary=list(canary), serial=list(serial),
                    max_unavailable=max_unavailable, baseline=None if baseline is None else "baseline.json",
                    baseline_sha256=None if baseline is None else "0" * 64, thresholds={"fp8": 5.0},
                    guest_stack=guest_stack)
        store = StateDir(tmp_path / "state")
        store.create()
        rollout = new_rollout(Prepared(spec, plan))
        store.save(rollout)
        return store, rollout
    return build


def resume(store, fleet, **kw):
    rollout = store.load()
    return Runner(store, rollout, fleet, baseline=kw.pop("baseline", None)).run(**kw)


def states(store) -> dict[str, str]:
    return {h: r.state for h, r in store.load().hosts.items()}


def test_every_wave_passes_in_order_and_each_guest_is_validated_after_its_host(make):
    store, rollout = make()
    fleet, notes = Fleet(), []
    out = Runner(store, rollout, fleet, on_change=lambda r, n: notes.append(n)).run()
    assert out.exit_code == ExitCode.OK and store.load().state == "done"
    assert fleet.calls == [("provision", ["kvm-1"]), ("validate", ["vm-1"]), ("provision", ["kvm-2", "kvm-3"]),
                           ("validate", ["vm-2", "vm-3"]), ("provision", ["kvm-4", "kvm-5"]),
                           ("validate", ["vm-4", "vm-5"])]
    assert set(states(store).values()) == {"done"}
    assert "the canary passed" in notes and "wave 3 passed" in notes
    assert any(n == "the canary: provision task: Apply the profile" for n in notes)


def test_a_host_that_cannot_be_provisioned_stops_the_rollout_and_its_guests_are_not_validated(make):
    store, rollout = make()
    fleet = Fleet()
    fleet.provision_fails["kvm-3"] = "provision: failed at Apply the profile: a device is held by VM db-7"
    out = Runner(store, rollout, fleet).run()
    assert out.exit_code == ExitCode.APPLY_FAILED
    assert ("validate", ["vm-2"]) in fleet.calls and not any("kvm-4" in c[1] for c in fleet.calls)
    saved = store.load()
    assert saved.state == "stopped" and saved.reason == "wave 2 failed"
    assert states(store) == {"kvm-1": "done", "kvm-2": "done", "kvm-3": "failed", "kvm-4": "not_started",
                             "kvm-5": "not_started"}
    assert saved.hosts["kvm-3"].reason.endswith("held by VM db-7") and saved.hosts["kvm-3"].phase == "provision"
    assert saved.waves[1].reason == "1 of 2 host(s) failed: kvm-3"


def test_resume_runs_the_stopped_waves_unfinished_hosts_again_then_the_rest(make):
    store, rollout = make()
    fleet = Fleet()
    fleet.failing = {"vm-3"}
    assert Runner(store, rollout, fleet).run().exit_code == ExitCode.FAILURE
    fleet.failing, fleet.calls = set(), []
    out = resume(store, fleet)
    assert out.exit_code == ExitCode.OK
    assert fleet.calls[0] == ("provision", ["kvm-3"])  # kvm-2 was done: not touched again
    saved = store.load()
    assert saved.hosts["kvm-3"].attempts == 2 and saved.hosts["kvm-2"].attempts == 1
    assert saved.hosts["kvm-3"].reason is None and saved.waves[1].runs == 2
    # a roll-out that is done has nothing left to run
    fleet.calls = []
    assert resume(store, fleet).exit_code == ExitCode.OK and fleet.calls == []


def test_a_regression_against_the_baseline_fails_a_guest_that_passed_its_own_thresholds(make):
    store, rollout = make(baseline=True)
    fleet = Fleet({"vm-2": 1100.0})  # still above AMD's figure, but 15% below the baseline
    base = report({f"vm-{i}": 1300.0 for i in range(1, 6)})
    out = Runner(store, rollout, fleet, baseline=base).run()
    assert out.exit_code == ExitCode.FAILURE
    rec = store.load().hosts["kvm-2"]
    assert rec.state == "failed" and rec.phase == "compare"
    assert rec.reason == "guest vm-2 regressed: fp8.hipblaslt measured 1300.0 -> 1100.0 -15.4% (threshold 5%)"
    comparison = json.loads((store.path / "wave-02" / "run-1" / "compare" / "comparison.json").read_text())
    assert comparison["only_baseline"] == []  # compared with the wave's own guests, not the whole fleet
    assert store.load().waves[1].reports["compare"] == "wave-02/run-1/compare/comparison.html"


def with_verify(rep: ValidationReport, norm_error: dict[str, float]) -> ValidationReport:
    for g in rep.guests:
        g.agent.checks.append(CheckResult("fp8.hipblaslt.verify", "pass", norm_error.get(g.name, 0.002), 0.01,
                                          "norm_error", "hipBLASLt CPU reference"))
    return rep


class WrongerFleet(Fleet):
    """FP8 as fast as ever, but its results four times further from the reference (still within 0.01)."""

    def validate(self, guests, out, note):
        rep, err = super().validate(guests, out, note)
        return with_verify(rep, {"vm-2": 0.008}), err


def test_the_gate_fails_a_wave_whose_fp8_results_got_worse_though_its_speed_did_not(make):
    """Issue 23: a norm_error four times larger was judged "+300% improved", so such a wave passed."""
    store, rollout = make(baseline=True)
    base = with_verify(report({f"vm-{i}": 1300.0 for i in range(1, 6)}), {})
    out = Runner(store, rollout, WrongerFleet(), baseline=base).run()
    assert out.exit_code == ExitCode.FAILURE
    rec = store.load().hosts["kvm-2"]
    assert rec.state == "failed" and rec.phase == "compare"
    assert rec.reason == ("guest vm-2 regressed: fp8.hipblaslt.verify measured 0.002 -> 0.008 +300.0% "
                          "(threshold 5%)")


def test_skip_failed_leaves_failed_hosts_down_and_they_count_against_max_unavailable(make):
    store, rollout = make(serial=("1", "2"), max_unavailable="2")
    fleet = Fleet()
    fleet.failing = {"vm-2"}
    Runner(store, rollout, fleet).run()
    fleet.failing, fleet.calls = set(), []
    out = resume(store, fleet, skip_failed=True)
    # kvm-2 stays failed (one of two unavailable): wave 3's two hosts go one at a time
    assert [c for c in fleet.calls if c[0] == "provision"] == [("provision", ["kvm-4"]), ("provision", ["kvm-5"])]
    assert out.exit_code == ExitCode.FAILURE and store.load().state == "done"
    assert states(store)["kvm-2"] == "failed" and "kvm-2" in store.load().reason


def test_no_room_left_under_max_unavailable_is_refused_and_recorded(make):
    store, rollout = make(serial=("1", "2"), max_unavailable="1")
    fleet = Fleet()
    fleet.failing = {"vm-2"}
    Runner(store, rollout, fleet).run()
    fleet.calls = []
    with pytest.raises(RefusedError, match="1 host\\(s\\) are failed and at most 1 may be unavailable"):
        resume(store, fleet, skip_failed=True)
    assert fleet.calls == [] and store.load().state == "stopped"


def test_skip_failed_never_goes_past_a_failed_canary(make):
    store, rollout = make()
    fleet = Fleet()
    fleet.failing = {"vm-1"}
    assert Runner(store, rollout, fleet).run().exit_code == ExitCode.FAILURE
    fleet.calls = []
    with pytest.raises(RefusedError, match="canary host kvm-1 failed"):
        resume(store, fleet, skip_failed=True)
    assert fleet.calls == [] and states(store)["kvm-2"] == "not_started"


def test_an_interrupted_wave_is_recorded_in_progress_and_resume_runs_it_again(make):
    store, rollout = make()
    fleet = Fleet()
    fleet.interrupt_on = "kvm-2"
    with pytest.raises(InterruptedRun):
        Runner(store, rollout, fleet).run()
    saved = store.load()
    assert saved.state == "interrupted" and saved.waves[1].state == "running"
    assert states(store)["kvm-2"] == "in_progress" and saved.hosts["kvm-2"].phase == "provision"
    fleet.interrupt_on, fleet.calls = None, []
    assert resume(store, fleet).exit_code == ExitCode.OK
    assert fleet.calls[0] == ("provision", ["kvm-2", "kvm-3"])


def test_a_changed_inventory_is_refused_on_resume_and_nothing_is_written(make, tmp_path):
    store, rollout = make()
    fleet = Fleet()
    fleet.failing = {"vm-1"}
    Runner(store, rollout, fleet).run()
    before = store.file.read_bytes()
    (tmp_path / "inventory.yml").write_text("all: {children: {gim_hosts: {hosts: {kvm-9: {}}}}}\n")
    fleet.calls = []
    with pytest.raises(InputError, match="inventory .* changed since the roll-out started"):
        resume(store, fleet)
    assert fleet.calls == [] and store.file.read_bytes() == before


def test_the_guest_stack_phase_runs_before_validation_when_asked(make):
    store, rollout = make(guest_stack=True)
    fleet = Fleet()
    Runner(store, rollout, fleet).run()
    assert fleet.calls[:3] == [("provision", ["kvm-1"]), ("guest-stack", ["vm-1"]), ("validate", ["vm-1"])]


def test_the_state_file_is_private_and_reads_back_as_written(make):
    store, rollout = make()
    Runner(store, rollout, Fleet()).run()
    assert store.file.stat().st_mode & 0o777 == 0o600
    assert store.load().to_dict() == json.loads(store.file.read_text())


def test_the_state_validates_against_the_committed_schema_which_matches_the_model(make):
    import jsonschema

    from vgpu.rollout.state import schema_text

    committed = (Path(__file__).resolve().parents[2] / "vgpu" / "schemas" / "rollout-v1.json").read_text()
    assert committed == schema_text(), "regenerate: python -c 'from vgpu.rollout.state import schema_text; " \
                                       "print(schema_text(), end=\"\")' > vgpu/schemas/rollout-v1.json"
    store, rollout = make(baseline=True)
    fleet = Fleet({"vm-3": 900.0})
    Runner(store, rollout, fleet, baseline=report({f"vm-{i}": 1300.0 for i in range(1, 6)})).run()
    doc = json.loads(store.file.read_text())
    jsonschema.validate(doc, json.loads(committed))
    assert doc["hosts"]["kvm-3"]["state"] == "failed"


def test_rollout_metrics_parse_with_prometheus_clients_own_parser(make):
    from prometheus_client.parser import text_string_to_metric_families

    from vgpu.metrics import render, rollout_registry

    store, rollout = make()
    fleet = Fleet()
    fleet.failing = {"vm-3"}
    Runner(store, rollout, fleet).run()
    text = render(rollout_registry(store.load(), running=False)).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("vgpu_rollout_info", (("profile", "mi300x-1vf"), ("state", "stopped")))] == 1
    assert samples[("vgpu_rollout_hosts", (("state", "done"),))] == 2
    assert samples[("vgpu_rollout_hosts", (("state", "failed"),))] == 1
    assert samples[("vgpu_rollout_host_state", (("host", "kvm-3"), ("state", "failed"), ("wave", "2")))] == 1
    assert samples[("vgpu_rollout_host_state", (("host", "kvm-3"), ("state", "done"), ("wave", "2")))] == 0
    assert samples[("vgpu_rollout_wave_state", (("canary", "true"), ("state", "passed"), ("wave", "1")))] == 1
    assert samples[("vgpu_rollout_wave_state", (("canary", "false"), ("state", "pending"), ("wave", "3")))] == 1
    assert samples[("vgpu_rollout_running", ())] == 0
    assert samples[("vgpu_rollout_updated_timestamp_seconds", ())] > 1.7e9


def test_an_error_mid_wave_is_recorded_with_where_it_stopped_and_how_to_resume(make):
    store, rollout = make()
    fleet = Fleet()
    fleet.error_on = "kvm-2"
    with pytest.raises(VgpuError) as caught:
        Runner(store, rollout, fleet).run()
    assert "resume: vgpu rollout resume --state-dir" in caught.value.hint
    saved = store.load()
    assert saved.state == "interrupted" and saved.reason == "no playbooks/ and collections/ under /nowhere"
    assert states(store)["kvm-2"] == "in_progress" and states(store)["kvm-1"] == "done"


@pytest.fixture
def hup_disposition():
    """Run a test with SIGHUP at a disposition it chooses, whatever this process inherited (nohup gives SIG_IGN),
    and put back what was there."""
    inherited = signal.getsignal(signal.SIGHUP)
    yield lambda handler: signal.signal(signal.SIGHUP, handler)
    signal.signal(signal.SIGHUP, inherited)


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_a_signal_during_a_playbook_ends_the_run_after_it_and_never_marks_the_next_wave(make, signum,
                                                                                         hup_disposition):
    """SIGHUP (the operator's SSH session went away) and SIGTERM while the canary validates: the playbook
    finishes, the canary is recorded, the run stops before wave 2 marks any host, and says how to resume."""
    hup_disposition(signal.SIG_DFL)  # a terminal session's default: a hang-up would end the run
    before = signal.getsignal(signum)
    store, rollout = make()
    fleet = Fleet()
    fleet.signal_in_validate = signum
    with pytest.raises(InterruptedRun) as caught:
        Runner(store, rollout, fleet).run()
    assert caught.value.exit_code == 128 + signum and "resume" in caught.value.hint
    saved = store.load()
    assert saved.state == "interrupted" and saved.waves[0].state == "passed"
    assert saved.waves[1].state == "pending" and states(store)["kvm-2"] == "not_started"
    assert saved.hosts["kvm-2"].attempts == 0
    assert signal.getsignal(signum) == before  # handlers restored


def test_under_nohup_a_hang_up_does_not_stop_the_roll_out_and_stays_ignored(make, hup_disposition):
    """`nohup vgpu rollout run ...`: the operator asked for the run to outlive the terminal, so a SIGHUP while
    the canary validates changes nothing; every wave runs and SIGHUP is still ignored afterwards."""
    hup_disposition(signal.SIG_IGN)
    store, rollout = make()
    fleet = Fleet()
    fleet.signal_in_validate = signal.SIGHUP
    Runner(store, rollout, fleet).run()
    saved = store.load()
    assert saved.state == "done" and all(w.state == "passed" for w in saved.waves)
    assert set(states(store).values()) == {"done"}
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


def test_a_wave_split_into_batches_keeps_each_batchs_reports(make):
    store, rollout = make(serial=("1", "2"), max_unavailable="2")
    fleet = Fleet()
    fleet.failing = {"vm-2"}
    Runner(store, rollout, fleet).run()
    fleet.failing = set()
    resume(store, fleet, skip_failed=True)
    reports = store.load().waves[2].reports
    assert reports["provision"] == "wave-03/run-1-batch-2/provision.json"  # the second batch of one host


def test_a_new_run_of_a_wave_does_not_point_at_the_last_runs_reports(make):
    store, rollout = make()
    fleet = Fleet()
    fleet.failing = {"vm-2"}
    Runner(store, rollout, fleet).run()
    assert store.load().waves[1].reports["validate"] == "wave-02/run-1/validate/validation-report.html"
    fleet.failing, fleet.provision_fails["kvm-2"] = set(), "provision: failed at Apply the profile: held"
    resume(store, fleet)
    assert store.load().waves[1].reports == {"provision": "wave-02/run-2/provision.json"}


def test_a_failed_hosts_reason_is_one_line_per_guest_and_says_the_host_keeps_the_profile(make, capsys, monkeypatch):
    from vgpu.cli.rollout import _finish

    monkeypatch.setenv("COLUMNS", "300")
    store, rollout = make(baseline=True)
    fleet = Fleet({"vm-2": 900.0})
    fleet.failing = {"vm-2"}  # fails its own check and regresses: two problems, one guest
    base = report({f"vm-{i}": 1300.0 for i in range(1, 6)})
    assert Runner(store, rollout, fleet, baseline=base).run().exit_code == ExitCode.FAILURE
    capsys.readouterr()
    _finish(store.load(), False, store.path)
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines()]
    assert "kvm-2 failed at validate; it stays provisioned with mi300x-1vf (a failed wave is not rolled back):" \
        in lines
    guest_lines = [line for line in lines if line.startswith("- guest vm-2")]
    assert guest_lines == ["- guest vm-2: validation fail: fp8.hipblaslt (first: GEMM); regressed: fp8.hipblaslt "
                           "status pass -> fail, fp8.hipblaslt measured 1300.0 -> 900.0 -30.8% (threshold 5%)"]
    assert "1 problem(s), listed below" in out
