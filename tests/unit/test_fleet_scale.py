"""What keeps `vgpu validate` linear in the number of guests (issue 12, section 4), checked without timing:
the known_hosts file is parsed once per run and each connection gets only its host's keys, with paramiko's
own matching; the agent and expectations are read once and the same bytes go to every guest; the JSON
report is written one guest at a time and is byte-for-byte the document it replaced."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from pathlib import Path

import jsonschema
import paramiko
import pytest
from report_factory import guest, report

from vgpu.guest.fanout import Job, run_fanout
from vgpu.guest.report import JSON_NAME, write_all
from vgpu.guest.report import json as json_report
from vgpu.guest.report.model import Expectation, Outcome
from vgpu.guest.transport import KnownHosts, RunResult, WORKDIR, host_key_name, Endpoint

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "vgpu" / "schemas" / "validation-report-v1.json")
                    .read_text())
GOOD = {"schema": "vgpu.agent-result/v1", "hostname": "vm", "agent_version": "0.1", "started": "t",
        "seconds": 1.0, "checks": [{"name": "rocm.version", "status": "pass", "measured": "7.0.1",
                                    "expected": "7.0", "unit": None, "detail": "", "seconds": 0.1}]}


def _pub(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.get_base64()}"


def _hashed(name: str) -> str:
    salt = os.urandom(20)
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


@pytest.fixture(scope="module")
def keys() -> list[paramiko.PKey]:
    return [paramiko.ECDSAKey.generate(bits=256) for _ in range(3)] + [paramiko.RSAKey.generate(1024)]


def test_known_hosts_is_parsed_once_and_each_host_gets_the_keys_paramiko_would_find(tmp_path, keys):
    k1, k2, k3, rsa = keys
    lines = ["# a fleet's known_hosts", "", "two fields"]
    lines += [f"{_hashed(f'10.0.{i // 250}.{i % 250}')} {_pub(k3)}" for i in range(300)]  # ssh-keyscan -H
    lines += [f"[127.0.0.1]:2222 {_pub(k1)}", f"{_hashed('[127.0.0.1]:2222')} {_pub(k2)}",  # first one wins
              f"plain.example,[::1]:2200 {_pub(k2)}", f"{_hashed('hashed.example')} {_pub(rsa)}",
              f"{_hashed('hashed.example')} {_pub(k1)}"]
    path = tmp_path / "known_hosts"
    path.write_text("\n".join(lines) + "\n")
    kh = KnownHosts(path)
    reference = paramiko.HostKeys(str(path))  # what paramiko's own load and lookup find
    names = ["[127.0.0.1]:2222", "plain.example", "[::1]:2200", "hashed.example", "10.0.0.7", "10.0.1.42",
             "unknown.example", "[127.0.0.1]:22"]
    for _ in range(3):
        for name in names:
            client = paramiko.SSHClient()
            kh.install(client, name)
            got = client.get_host_keys().lookup(name)
            want = reference.lookup(name)
            if want is None:
                assert got is None, name
            else:
                assert got is not None, name
                assert {t: got[t].asbytes() for t in got.keys()} == {t: want[t].asbytes() for t in want.keys()}, name
                assert list(got.keys()) == list(dict.fromkeys(want.keys())), name  # the first type is preferred
            assert len(client.get_host_keys().keys()) <= 1  # only this host's keys, not the whole file
    assert kh.parses == 1


def test_host_key_name_is_the_one_paramiko_looks_up():
    assert host_key_name(Endpoint("10.0.0.1", 22)) == "10.0.0.1"
    assert host_key_name(Endpoint("10.0.0.1", 2222)) == "[10.0.0.1]:2222"
    assert host_key_name(Endpoint("::1", 2200)) == "[::1]:2200"


def test_accepting_a_new_key_records_it_once_and_the_next_connection_knows_it(tmp_path, keys):
    path = tmp_path / "known_hosts"
    kh = KnownHosts(path, accept_new=True)
    kh.install(paramiko.SSHClient(), "[10.0.0.9]:22")
    kh.record("[10.0.0.9]:2222", keys[0])
    kh.record("[10.0.0.9]:2222", keys[0])  # a second guest on the same host:port, moments later
    assert path.read_text() == f"[10.0.0.9]:2222 {_pub(keys[0])}\n"
    with pytest.raises(paramiko.BadHostKeyException):
        kh.record("[10.0.0.9]:2222", keys[1])
    client = paramiko.SSHClient()
    kh.install(client, "[10.0.0.9]:2222")
    assert client.get_host_keys().lookup("[10.0.0.9]:2222")[keys[0].get_name()] == keys[0]
    assert kh.parses == 1


def test_a_known_hosts_line_paramiko_cannot_read_fails_every_connection_alike(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text("host ssh-ed25519 AAAAB\n")
    with pytest.raises(paramiko.hostkeys.InvalidHostKey):
        paramiko.HostKeys(str(path))  # paramiko's own load refuses the file
    kh = KnownHosts(path)
    for _ in range(2):
        with pytest.raises(paramiko.hostkeys.InvalidHostKey):
            kh.install(paramiko.SSHClient(), "host")
    assert kh.parses == 1


class StagedSession:
    """A session with the one-exec path: records what it was given."""

    def __init__(self, calls: list):
        self.calls = calls

    def run_in_private_dir(self, files, argv, *, env, timeout):
        self.calls.append((files, argv, env))
        return RunResult(0, json.dumps(GOOD).encode(), b"")

    def close(self) -> None:
        pass


class StagedTransport:
    def __init__(self):
        self.calls: list = []

    def open(self, endpoint, timeouts):
        return StagedSession(self.calls)


def test_the_agent_and_expectations_are_read_once_and_the_same_bytes_go_to_every_guest(tmp_path, monkeypatch):
    agent = tmp_path / "vgpu-agent.pyz"
    agent.write_bytes(b"#!/usr/bin/env python3\nPK" + os.urandom(64))
    reads: list[Path] = []
    real = Path.read_bytes

    def counting(self):
        reads.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    shared = {"schema": "x", "model": "MI300X"}
    jobs = [Job(name=f"g{i:03d}", address=f"10.0.0.{i}:22", endpoint=f"e{i}",
                expectation=shared if i % 10 else {"schema": "x", "model": "MI325X"},
                summary=Expectation(model="MI300X"), skip_workloads=True) for i in range(120)]
    transport = StagedTransport()
    rep = run_fanout(jobs, transport, agent, concurrency=8)
    assert [g.outcome for g in rep.guests] == [Outcome.OK] * 120
    assert reads.count(agent) == 1
    assert len(reads) == 3  # the agent and the two distinct expectations
    sent = [files for files, _, _ in transport.calls]
    assert len({id(files[0][1]) for files in sent}) == 1  # one bytes object shared by all 120 guests
    assert [name for name, _ in sent[0]] == ["vgpu-agent.pyz", "expect.json"]
    assert len({id(files[1][1]) for files in sent}) == 2
    argv = transport.calls[0][1]
    assert argv == ["python3", f"{WORKDIR}/vgpu-agent.pyz", "--expect", f"{WORKDIR}/expect.json",
                    "--workdir", WORKDIR, "--skip-workloads"]


def _fleet(n: int):
    statuses = ("pass", "fail", "skip", "error")
    return report(*(guest(f"g{i:04d}", Outcome.OK, *statuses[: 1 + i % 4]) if i % 7 else
                    guest(f"g{i:04d}", Outcome.UNREACHABLE, detail="no route") for i in range(n)))


@pytest.mark.parametrize("n", [0, 1, 250])
def test_the_json_report_is_streamed_guest_by_guest_and_is_the_same_document(n):
    rep = _fleet(n)
    chunks = list(json_report.stream(rep))
    whole = (json.dumps(rep.to_dict(), indent=2, allow_nan=False) + "\n").encode()
    assert b"".join(chunks) == whole == json_report.render(rep)
    if n:
        assert len(chunks) == n + 2  # head with the summary, one chunk per guest, the closing brackets
        biggest = max(len(json.dumps(g.to_dict(), indent=2)) for g in rep.guests)
        assert max(len(c) for c in chunks[1:]) <= 2 * biggest  # no chunk holds more than one guest
        assert b'"summary"' in chunks[0] and b'"name"' not in chunks[0]
    jsonschema.validate(json.loads(whole), SCHEMA)


def test_write_all_streams_the_json_of_a_large_report_and_it_reads_back(tmp_path, monkeypatch):
    rep = _fleet(1000)
    consumed = []
    real = json_report.stream

    def watched(report_):
        for chunk in real(report_):
            consumed.append(len(chunk))
            yield chunk

    monkeypatch.setattr(json_report, "stream", watched)
    paths = write_all(rep, tmp_path)
    assert len(consumed) == 1002
    data = json.loads(paths["json"].read_text())
    jsonschema.validate(data, SCHEMA)
    assert [g["name"] for g in data["guests"]] == [g.name for g in rep.guests]
    assert data["summary"] == rep.summary()
    back = json_report.load(tmp_path / JSON_NAME)
    assert back.summary() == rep.summary()
    assert not list(tmp_path.glob(".*"))  # the temporary file was renamed into place
