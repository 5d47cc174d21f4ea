"""`vgpu validate` of a small fleet over a real OpenSSH server: one SSH command per guest, no SFTP.

What makes the controller scale (issue 12, section 4) is checked by what sshd sees, not by timing: a
ForceCommand wrapper logs every session the server is asked for (an exec or the sftp subsystem alike),
so a return to per-step round trips (SFTP upload, a second command to clean up) fails here. The guests'
python is a stand-in that checks what it was handed (a 0700 directory, 0600 files, the agent and the
expectation) and prints a recorded agent result; known_hosts holds one hashed line per other host,
as a fleet's does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from vgpu.cli import cli
from vgpu.errors import ExitCode
from vgpu.guest.report import JSON_NAME
from vgpu.sim.guests import SIM_TARGET

pytestmark = pytest.mark.integration
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "vgpu" / "schemas"
                     / "validation-report-v1.json").read_text())
RESULT = {"schema": "vgpu.agent-result/v1", "hostname": "vm", "agent_version": "0.1", "started": "t",
          "seconds": 0.1, "checks": [{"name": "rocm.version", "status": "pass", "measured": "7.0.1",
                                      "expected": "7.0", "unit": None, "detail": "", "seconds": 0.1}]}
GUESTS = 16


def _hashed_line(name: str, key_line: str) -> str:
    salt = os.urandom(20)
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()} {key_line}"


def test_a_fleet_is_validated_with_one_ssh_command_per_guest_and_nothing_left_behind(
        tmp_path, ssh_dir, sshd_starter, client_key):
    sessions = tmp_path / "sessions.log"
    wrapper = tmp_path / "log-session"
    wrapper.write_text("#!/bin/sh\n"
                       f"echo \"${{SSH_ORIGINAL_COMMAND%% *}}\" >> {sessions}\n"
                       'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n')
    wrapper.chmod(0o755)
    server = sshd_starter(tmp_path / "sshd", ssh_dir / "authorized_keys", extra=(f"ForceCommand {wrapper}",))
    try:
        seen = tmp_path / "workdirs.log"
        result_file = tmp_path / "result.json"
        result_file.write_text(json.dumps(RESULT))
        python = tmp_path / "python-standin"
        python.write_text(
            "#!/bin/sh\n"  # argv: AGENT --expect EXPECT --workdir DIR --skip-workloads
            'd=$(dirname "$1")\n'
            f'echo "$d" >> {seen}\n'
            '[ "$5" = "$d" ] && [ "$(stat -c %a "$d")" = 700 ] && [ "$(stat -c %a "$1")" = 600 ] || '
            '{ echo "bad directory or modes" >&2; exit 3; }\n'
            'head -c 2 "$1" | grep -q "#!" && grep -q vgpu.agent-expect "$3" || '
            '{ echo "agent or expectation missing" >&2; exit 3; }\n'
            f"exec cat {result_file}\n")
        python.chmod(0o755)
        kind, b64 = server.host_key_line.split()[1:3]
        others = [_hashed_line(f"10.1.{i // 200}.{i % 200}", f"{kind} {b64}\n") for i in range(200)]
        kh = tmp_path / "known_hosts"
        kh.write_text("".join(others[:100]) + server.host_key_line + "".join(others[100:]))
        gfile = tmp_path / "guests.yaml"
        gfile.write_text(yaml.safe_dump({
            "version": "v1",
            "defaults": {"host": server.address, "port": server.port, "user": "root", "identity": str(client_key),
                         "python": str(python), "skip_workloads": True,
                         "expect": {"model": SIM_TARGET["model"], "compute": SIM_TARGET["compute"],
                                    "memory": SIM_TARGET["memory"], "vf": SIM_TARGET["is_vf"]}},
            "guests": [{"name": f"g{i:03d}"} for i in range(GUESTS)]}))
        out = tmp_path / "reports"
        result = CliRunner().invoke(cli, ["validate", "--guests", str(gfile), "--known-hosts", str(kh),
                                          "--report-dir", str(out), "--concurrency", "8", "-q"])
        report = json.loads((out / JSON_NAME).read_text())
        assert result.exit_code == ExitCode.OK, [(g["name"], g["detail"]) for g in report["guests"]]
        jsonschema.validate(report, SCHEMA)
        assert [g["name"] for g in report["guests"]] == [f"g{i:03d}" for i in range(GUESTS)]
        assert {g["outcome"] for g in report["guests"]} == {"ok"}
        # one session per guest, and it is the staged command: no sftp subsystem, no second command
        assert sessions.read_text().split() == ["sh"] * GUESTS
        dirs = seen.read_text().split()
        assert len(set(dirs)) == GUESTS and all(d.startswith("/tmp/vgpu-agent-") for d in dirs)
        assert not [d for d in dirs if Path(d).exists()]  # every private directory was removed
        assert kh.read_text().count("\n") == 201  # strict: nothing was added
    finally:
        server.stop()


def test_a_failed_upload_is_that_guests_agent_error_and_the_others_pass(tmp_path, ssh_dir, sshd_starter,
                                                                      client_key):
    """A guest where the private directory cannot be made says so, as that guest's agent error."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "mkdir").write_text("#!/bin/sh\necho 'mkdir: Read-only file system' >&2\nexit 1\n")
    (fakebin / "mkdir").chmod(0o755)
    wrapper = tmp_path / "guest-shell"
    wrapper.write_text("#!/bin/sh\n"
                       f'case "$SSH_ORIGINAL_COMMAND" in *VGPU_TEST_GUEST=g-bad*) PATH={fakebin}:$PATH ;; esac\n'
                       'export PATH\nexec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n')
    wrapper.chmod(0o755)
    server = sshd_starter(tmp_path / "sshd", ssh_dir / "authorized_keys", extra=(f"ForceCommand {wrapper}",))
    try:
        python = tmp_path / "python-standin"
        python.write_text(f"#!/bin/sh\nexec cat {tmp_path / 'result.json'}\n")
        python.chmod(0o755)
        (tmp_path / "result.json").write_text(json.dumps(RESULT))
        guests = [{"name": n, "host": server.address, "port": server.port, "user": "root",
                   "identity": str(client_key), "python": str(python), "skip_workloads": True,
                   "env": {"VGPU_TEST_GUEST": n},
                   "expect": {"model": SIM_TARGET["model"], "compute": SIM_TARGET["compute"],
                              "memory": SIM_TARGET["memory"], "vf": SIM_TARGET["is_vf"]}}
                  for n in ("g-good", "g-bad")]
        gfile = tmp_path / "guests.yaml"
        gfile.write_text(yaml.safe_dump({"version": "v1", "guests": guests}))
        kh = tmp_path / "known_hosts"
        kh.write_text(server.host_key_line)
        out = tmp_path / "reports"
        result = CliRunner().invoke(cli, ["validate", "--guests", str(gfile), "--known-hosts", str(kh),
                                          "--report-dir", str(out), "-q"])
        report = json.loads((out / JSON_NAME).read_text())
        by = {g["name"]: g for g in report["guests"]}
        assert result.exit_code == ExitCode.FAILURE, report
        assert by["g-good"]["outcome"] == "ok"
        assert by["g-bad"]["outcome"] == "agent-error"
        assert "could not stage the agent" in by["g-bad"]["detail"] and "cannot create" in by["g-bad"]["detail"]
    finally:
        server.stop()


def test_a_staged_run_gets_its_files_byte_for_byte_and_an_idle_connection_polls_rarely(tmp_path, sshd, client_key):
    """run_in_private_dir directly: binary files arrive whole in a 0700 directory that is gone afterwards, and
    the connection's reader thread wakes at most 2x a second while the command runs (not 10x, paramiko's
    default: with hundreds of guests waiting minutes for their agents, that polling was the controller's
    main cost)."""
    from vgpu.guest.transport import WORKDIR, Endpoint, KnownHosts, SshTransport, Timeouts

    kh = tmp_path / "known_hosts"
    kh.write_text(sshd.host_key_line)
    session = SshTransport(KnownHosts(kh)).open(Endpoint(sshd.address, sshd.port, "root", client_key), Timeouts())
    try:
        assert session._client.get_transport().sock.gettimeout() >= 0.5
        blob, small = os.urandom(300_000), b'{"x": 1}'
        result = session.run_in_private_dir(
            [("blob", blob), ("small.json", small)],
            ["sh", "-c", 'echo "$0 $A"; stat -c "%a %s" "$0" "$0/blob" "$0/small.json"; cat "$0/blob"', WORKDIR],
            env={"A": "b c"}, timeout=30)
    finally:
        session.close()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split(b"\n", 4)
    workdir, env_value = lines[0].decode().split(" ", 1)
    assert workdir.startswith("/tmp/vgpu-agent-") and env_value == "b c"
    (dir_mode, _), *files = [line.decode().split() for line in lines[1:4]]
    assert dir_mode == "700" and files == [["600", str(len(blob))], ["600", str(len(small))]]
    assert lines[4] == blob
    assert not Path(workdir).exists()
