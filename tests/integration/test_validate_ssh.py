"""`vgpu validate` over a real OpenSSH server on loopback, with strict host-key checking.

The guests are simulated ROCm guests (vgpu.sim.guests): sshd runs on this machine, so the
agent reached over SSH sees the same filesystem and the environment selects the simulated guest.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import jsonschema
import junitparser
import pytest
import yaml
from click.testing import CliRunner

from vgpu.cli import cli
from vgpu.errors import ExitCode
from vgpu.guest.report import HTML_NAME, JSON_NAME, JUNIT_NAME
from vgpu.sim.guests import SIM_TARGET, sim_guest_env

pytestmark = pytest.mark.integration
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "vgpu" / "schemas"
                     / "validation-report-v1.json").read_text())
EXPECT = {"model": SIM_TARGET["model"], "compute": SIM_TARGET["compute"], "memory": SIM_TARGET["memory"],
          "vf": SIM_TARGET["is_vf"]}


def sim_guest(tmp_path: Path, name: str, server, key: Path, *, scenario: str = "healthy", **extra) -> dict:
    env = sim_guest_env(tmp_path / "guests" / name, scenario=scenario)
    return {"name": name, "host": server.address if server else "127.0.0.1",
            "port": server.port if server else extra.pop("port"), "user": "root", "identity": str(key),
            "expect": EXPECT, "env": env, "skip_workloads": True, **extra}


def validate(tmp_path: Path, guests: list[dict], known_hosts: Path, *args: str):
    gfile = tmp_path / "guests.yaml"
    gfile.write_text(yaml.safe_dump({"version": "v1", "guests": guests}))
    out = tmp_path / "reports"
    result = CliRunner().invoke(cli, ["validate", "--guests", str(gfile), "--known-hosts", str(known_hosts),
                                      "--report-dir", str(out), "--connect-timeout", "2", "-q", *args])
    report = json.loads((out / JSON_NAME).read_text()) if (out / JSON_NAME).exists() else None
    return result, report, out


def known(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("".join(lines))
    return path


def outcomes(report: dict) -> dict[str, str]:
    return {g["name"]: g["outcome"] for g in report["guests"]}


def agent_dirs() -> set[Path]:
    """Private directories SshSession made on the guest (/tmp/vgpu-agent-<16 hex digits>)."""
    return {p for p in Path("/tmp").glob("vgpu-agent-*") if re.fullmatch(r"vgpu-agent-[0-9a-f]{16}", p.name)}


def test_simulated_guests_validate_over_sshd_and_all_reports_parse_back(tmp_path, sshd, client_key):
    before = agent_dirs()
    guests = [sim_guest(tmp_path, f"vm{i}", sshd, client_key) for i in range(3)]
    guests[2]["skip_workloads"] = False  # one full run: HIP and FP8 stand-ins through SSH too
    result, report, out = validate(tmp_path, guests, known(tmp_path, sshd.host_key_line))
    assert result.exit_code == ExitCode.OK, (result.output, report)
    jsonschema.validate(report, SCHEMA)
    assert outcomes(report) == {"vm0": "ok", "vm1": "ok", "vm2": "ok"}
    assert {c["name"] for c in report["guests"][2]["checks"]} >= {"hip.compile", "fp8.hipblaslt"}
    assert report["guests"][0]["address"] == f"127.0.0.1:{sshd.port}"
    xml = junitparser.JUnitXml.fromfile(str(out / JUNIT_NAME))
    suites = {s.name: s for s in xml}
    assert sorted(suites) == ["vm0", "vm1", "vm2"]
    assert suites["vm2"].tests == len(report["guests"][2]["checks"]) and suites["vm2"].failures == 0
    page = (out / HTML_NAME).read_text()
    assert "vm2" in page and "<svg" in page
    assert agent_dirs() <= before  # every private directory on the guest was removed
    for name in (JSON_NAME, JUNIT_NAME, HTML_NAME):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644
    assert str(client_key) not in (out / JSON_NAME).read_text() + page


def test_unknown_host_key_is_refused_with_its_fingerprint_and_how_to_add_it(tmp_path, sshd, client_key):
    kh = known(tmp_path)
    result, report, _ = validate(tmp_path, [sim_guest(tmp_path, "vm", sshd, client_key)], kh)
    assert result.exit_code == ExitCode.REMOTE
    (g,) = report["guests"]
    assert g["outcome"] == "host-key-refused"
    assert "SHA256:" in g["detail"] and "ssh-keyscan" in g["detail"] and "--accept-new-host-keys" in g["detail"]
    assert kh.read_text() == ""


def test_mismatched_host_key_is_refused_loudly_even_with_accept_new(tmp_path, sshd, client_key, stranger_key):
    kind, b64 = stranger_key.with_suffix(".pub").read_text().split()[:2]
    kh = known(tmp_path, f"[127.0.0.1]:{sshd.port} {kind} {b64}\n")
    for flags in ((), ("--accept-new-host-keys",)):
        result, report, _ = validate(tmp_path, [sim_guest(tmp_path, "vm", sshd, client_key)], kh, *flags)
        assert result.exit_code == ExitCode.REMOTE
        assert report["guests"][0]["outcome"] == "host-key-refused"
        assert "HOST KEY MISMATCH" in report["guests"][0]["detail"]
    assert kh.read_text().count("\n") == 1


def test_accept_new_records_the_key_atomically_and_the_next_strict_run_trusts_it(tmp_path, sshd, client_key):
    kh = known(tmp_path, "# existing line without newline")
    result, report, _ = validate(tmp_path, [sim_guest(tmp_path, "vm", sshd, client_key)], kh,
                                 "--accept-new-host-keys")
    assert result.exit_code == ExitCode.OK, report
    assert kh.read_text() == "# existing line without newline\n" + sshd.host_key_line
    assert stat.S_IMODE(kh.stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".known_hosts.*"))
    result, report, _ = validate(tmp_path, [sim_guest(tmp_path, "vm", sshd, client_key)], kh)
    assert result.exit_code == ExitCode.OK and outcomes(report) == {"vm": "ok"}


def _fake_python(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_each_broken_guest_is_reported_as_such_while_the_others_complete(
        tmp_path, sshd, client_key, stranger_key, silent_listener, closed_port):
    garbage = _fake_python(tmp_path, "garbage-python", r"printf '\000\033[31mSegmentation fault\n'; exit 0")
    hang = _fake_python(tmp_path, "hang-python", "exec /bin/sleep 600")
    guests = [
        sim_guest(tmp_path, "good-a", sshd, client_key),
        sim_guest(tmp_path, "no-auth", sshd, stranger_key),
        sim_guest(tmp_path, "silent", None, client_key, port=silent_listener),
        sim_guest(tmp_path, "down", None, client_key, port=closed_port),
        sim_guest(tmp_path, "garbage", sshd, client_key, python=garbage),
        sim_guest(tmp_path, "hangs", sshd, client_key, python=hang),
        sim_guest(tmp_path, "bad-rocm", sshd, client_key, scenario="no-rocm"),
        sim_guest(tmp_path, "good-b", sshd, client_key),
    ]
    result, report, out = validate(tmp_path, guests, known(tmp_path, sshd.host_key_line), "--timeout", "8", "--concurrency", "8")
    assert result.exit_code == ExitCode.REMOTE
    assert outcomes(report) == {"good-a": "ok", "no-auth": "auth-failed", "silent": "timeout",
                                "down": "unreachable", "garbage": "agent-error", "hangs": "timeout",
                                "bad-rocm": "ok", "good-b": "ok"}, [(g["name"], g["detail"]) for g in report["guests"]]
    by = {g["name"]: g for g in report["guests"]}
    assert by["good-a"]["verdict"] == by["good-b"]["verdict"] == "pass"
    assert by["bad-rocm"]["verdict"] == "fail"
    assert "Segmentation fault" in by["garbage"]["detail"]
    assert "within 8 s" in by["hangs"]["detail"] and "no SSH greeting" in by["silent"]["detail"]
    jsonschema.validate(report, SCHEMA)
    xml = junitparser.JUnitXml.fromfile(str(out / JUNIT_NAME))
    errors = {s.name: s.errors for s in xml}
    assert all(errors[n] == 1 for n in ("no-auth", "silent", "down", "garbage", "hangs"))


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
@pytest.mark.parametrize("written", ["::1", "[::1]"])
def test_a_guest_at_an_ipv6_literal_validates_with_its_bracketed_known_hosts_line(tmp_path, sshd_factory,
                                                                                   client_key, written):
    """Issue 8 section 9: ::1 was refused as "not a host name"; known_hosts keys it as [::1]:PORT."""
    server = sshd_factory("v6", address="::1")
    assert server.host_key_line.startswith(f"[::1]:{server.port} ")
    guest = {**sim_guest(tmp_path, "vm6", server, client_key), "host": written}
    result, report, _ = validate(tmp_path, [guest], known(tmp_path, server.host_key_line))
    assert result.exit_code == ExitCode.OK, (result.output, report)
    assert outcomes(report) == {"vm6": "ok"}
    assert report["guests"][0]["address"] == f"[::1]:{server.port}"
    # the same guest with an empty known_hosts is refused for its host key, not as unreachable
    result, report, _ = validate(tmp_path, [guest], known(tmp_path))
    assert report["guests"][0]["outcome"] == "host-key-refused", report
    assert f"[::1]:{server.port}" in report["guests"][0]["detail"]
