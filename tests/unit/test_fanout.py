"""The fan-out: each guest's fate is typed and isolated; the agent's output is parsed strictly."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from vgpu.errors import ExitCode, InputError
from vgpu.guest.fanout import Job, build_for, parse_agent_output, run_fanout
from vgpu.guest.report.model import Expectation, Outcome
from vgpu.guest.targets import ExpectSpec
from vgpu.guest.transport import RunResult, TransportFailure

GOOD = {"schema": "vgpu.agent-result/v1", "hostname": "vm", "agent_version": "0.1", "started": "t",
        "seconds": 1.0, "checks": [{"name": "rocm.version", "status": "pass", "measured": "7.0.1",
                                    "expected": "7.0", "unit": None, "detail": "", "seconds": 0.1}]}


class FakeSession:
    def __init__(self, behaviour: str, log: list):
        self.behaviour, self.log = behaviour, log

    def make_private_dir(self) -> str:
        self.log.append("mkdir")
        return "/tmp/vgpu-agent-x"

    def upload(self, local: Path, remote: str) -> None:
        self.log.append(("upload", Path(local).read_bytes(), remote))

    def run(self, argv, *, env, timeout) -> RunResult:
        self.log.append(("run", argv, env))
        if self.behaviour == "garbage":
            return RunResult(0, b"\x00\xffSegmentation fault\n", b"core dumped\n")
        if self.behaviour == "hang":
            raise TransportFailure(Outcome.TIMEOUT, "agent did not finish")
        if self.behaviour == "crash":
            raise RuntimeError("boom")
        if self.behaviour == "slow":  # in flight until a second guest is too: no sleep deciding the overlap
            self.pair.wait()
        return RunResult(0, json.dumps(GOOD).encode(), b"")

    def remove_dir(self, path: str) -> None:
        self.log.append(("rmdir", path))

    def close(self) -> None:
        self.log.append("close")


class FakeTransport:
    """Each endpoint host names a behaviour; transport-level failures are raised at open()."""

    def __init__(self):
        self.logs: dict[str, list] = {}
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        self.pair = threading.Barrier(2, timeout=600)  # the timeout is a hang guard (concurrency 1 would hang)

    def open(self, endpoint, timeouts):
        kind = endpoint
        failures = {"down": Outcome.UNREACHABLE, "badkey": Outcome.HOST_KEY_REFUSED,
                    "noauth": Outcome.AUTH_FAILED, "silent": Outcome.TIMEOUT}
        if kind in failures:
            raise TransportFailure(failures[kind], f"{kind} detail")
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        log = self.logs.setdefault(kind, [])
        session = FakeSession(kind, log)
        session.pair = self.pair
        close = session.close

        def counted_close():
            with self._lock:
                self.in_flight -= 1
            close()
        session.close = counted_close
        return session


def job(name: str, endpoint: str = "ok", **kw) -> Job:
    return Job(name=name, address=f"{name}:22", endpoint=endpoint, expectation={"schema": "x", "name": name},
               summary=Expectation(model="MI300X"), **kw)


@pytest.fixture
def agent(tmp_path) -> Path:
    path = tmp_path / "vgpu-agent.pyz"
    path.write_bytes(b"#!/usr/bin/env python3\nPK")
    return path


def test_every_failure_kind_is_reported_on_its_guest_while_the_others_pass(agent):
    kinds = ["ok", "down", "badkey", "noauth", "silent", "garbage", "hang", "crash"]
    rep = run_fanout([job(k, k) for k in kinds], FakeTransport(), agent, concurrency=3)
    got = {g.name: g.outcome for g in rep.guests}
    assert got == {"ok": Outcome.OK, "down": Outcome.UNREACHABLE, "badkey": Outcome.HOST_KEY_REFUSED,
                   "noauth": Outcome.AUTH_FAILED, "silent": Outcome.TIMEOUT, "garbage": Outcome.AGENT_ERROR,
                   "hang": Outcome.TIMEOUT, "crash": Outcome.AGENT_ERROR}
    assert [g.name for g in rep.guests] == kinds  # job order, not completion order
    by = {g.name: g for g in rep.guests}
    assert "vgpu internal error: RuntimeError: boom" in by["crash"].detail
    assert "Segmentation fault" in by["garbage"].detail and "core dumped" in by["garbage"].detail
    assert rep.exit_code == ExitCode.REMOTE


def test_the_private_directory_is_removed_even_when_the_agent_hangs(agent):
    transport = FakeTransport()
    run_fanout([job("h", "hang"), job("g", "garbage")], transport, agent)
    for log in transport.logs.values():
        assert log[0] == "mkdir" and ("rmdir", "/tmp/vgpu-agent-x") in log and log[-1] == "close"


def test_agent_and_expectation_are_uploaded_and_run_with_an_argument_list(agent):
    transport = FakeTransport()
    run_fanout([job("a", env={"X": "1"}, skip_workloads=True)], transport, agent)
    log = transport.logs["ok"]
    uploads = [e for e in log if e[0] == "upload"]
    assert [u[2] for u in uploads] == ["/tmp/vgpu-agent-x/vgpu-agent.pyz", "/tmp/vgpu-agent-x/expect.json"]
    assert uploads[0][1].startswith(b"#!/usr/bin/env python3")
    assert json.loads(uploads[1][1]) == {"schema": "x", "name": "a"}
    (_, argv, env), = [e for e in log if e[0] == "run"]
    assert argv == ["python3", "/tmp/vgpu-agent-x/vgpu-agent.pyz", "--expect", "/tmp/vgpu-agent-x/expect.json",
                    "--workdir", "/tmp/vgpu-agent-x", "--skip-workloads"]
    assert env == {"X": "1"}


def test_concurrency_bounds_the_guests_in_flight(agent):
    """Each slow guest stays in flight until another one is (a barrier of two): the peak is 2 whatever the load,
    never more, and a fan-out that ran them one at a time would break the barrier and fail them."""
    transport = FakeTransport()
    rep = run_fanout([job(f"s{i}", "slow") for i in range(6)], transport, agent, concurrency=2)
    assert transport.peak == 2
    assert all(g.outcome is Outcome.OK for g in rep.guests) and rep.exit_code == ExitCode.OK


def test_concurrency_below_one_is_refused(agent):
    with pytest.raises(InputError, match="at least 1"):
        run_fanout([job("a")], FakeTransport(), agent, concurrency=0)


def test_progress_callbacks_see_every_guest(agent):
    started, done = [], []
    run_fanout([job("a"), job("b", "down")], FakeTransport(), agent, on_start=lambda j: started.append(j.name),
               on_done=lambda g: done.append((g.name, g.verdict)))
    assert sorted(started) == ["a", "b"] and sorted(done) == [("a", "pass"), ("b", "error")]


@pytest.mark.parametrize("stdout, message", [
    (b"", "agent printed nothing"),
    (b"Traceback (most recent call last):\n", "agent printed no JSON result"),
    (b'{"schema": "other"}', "agent result is malformed"),
    (json.dumps({**GOOD, "checks": []}).encode(), "agent reported no checks"),
    (json.dumps({**GOOD, "checks": [{**GOOD["checks"][0], "status": "meh"}]}).encode(), "bad status"),
    (b"[1, 2]", "agent result is malformed"),
])
def test_agent_output_that_is_not_one_result_is_an_agent_error(stdout, message):
    with pytest.raises(Exception, match=message):
        parse_agent_output(RunResult(3, stdout, b"last words\n"))


def test_agent_output_excerpt_is_bounded_and_printable():
    with pytest.raises(Exception) as info:
        parse_agent_output(RunResult(0, b"\x1b[2J" + b"x" * 10_000, b""))
    assert len(str(info.value)) < 400 and "\x1b" not in str(info.value)


def test_expectation_from_an_explicit_spec_names_model_and_partition():
    exp, summary = build_for("vm", ExpectSpec("MI300X", "CPX", "NPS4", True), None)
    assert exp["compute_units"] == 38 and exp["device_ids"] == ["0x74b5"]
    assert summary == Expectation(model="MI300X", compute="CPX", memory="NPS4", is_vf=True, profile=None)


def test_expectation_from_a_shipped_profile_takes_its_partition_and_mode():
    exp, summary = build_for("vm", None, "mi300x-passthrough")
    assert exp["device_ids"] == ["0x74a1"] and summary.is_vf is False and summary.profile == "mi300x-passthrough"


def test_no_expectation_at_all_is_bad_input():
    with pytest.raises(InputError, match="guest vm: nothing to validate against"):
        build_for("vm", None, None)


def test_unknown_model_is_bad_input_naming_the_guest():
    with pytest.raises(InputError, match="guest vm: unknown GPU model 'MI999'"):
        build_for("vm", ExpectSpec("MI999"), None)
