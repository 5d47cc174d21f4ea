"""`vgpu validate` against several "guests", each an sshd in its own network namespace.

Layout (10.77.0.0/24 only): a client namespace holds a bridge (10.77.0.1)
and runs vgpu; each guest namespace has one veth end on that bridge and an sshd on port 22.
Nothing is added to the host's own network namespace, so the test cannot collide with the
machine's routes. Namespaces and daemons are removed in the fixture's finalizer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import junitparser
import pytest
import yaml

from vgpu.guest.report import JSON_NAME, JUNIT_NAME
from vgpu.sim.guests import SIM_TARGET, sim_guest_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "vgpu" / "schemas" / "validation-report-v1.json").read_text())
GUESTS = 3
ABSENT = "10.77.0.99"  # on the bridge's subnet, but nobody answers ARP for it


@pytest.fixture
def netns_guests(tmp_path, sshd_namespaces):
    with sshd_namespaces([f"g{i}" for i in range(1, GUESTS + 1)], letter="g", first=10, base_dir=tmp_path) as (
            client, servers):
        yield client, list(servers.values())


def test_guests_in_network_namespaces_are_validated_and_an_absent_one_is_unreachable(
        tmp_path, netns_guests, client_key):
    client, servers = netns_guests
    expect = {"model": SIM_TARGET["model"], "compute": SIM_TARGET["compute"], "memory": SIM_TARGET["memory"],
              "vf": SIM_TARGET["is_vf"]}
    scenarios = ["healthy", "slow", "healthy"]
    guests = [{"name": f"ns-guest-{i + 1}", "host": s.address, "user": "root", "identity": str(client_key),
               "expect": expect, "env": sim_guest_env(tmp_path / "sim" / str(i), scenario=scenarios[i])}
              for i, s in enumerate(servers)]
    guests.append({"name": "absent", "host": ABSENT, "identity": str(client_key), "expect": expect})
    gfile = tmp_path / "guests.yaml"
    gfile.write_text(yaml.safe_dump({"version": "v1", "guests": guests}))
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(s.host_key_line for s in servers))
    out = tmp_path / "reports"
    proc = subprocess.run(["ip", "netns", "exec", client, sys.executable, "-m", "vgpu", "validate",
                           "--guests", str(gfile), "--known-hosts", str(kh), "--report-dir", str(out),
                           "--connect-timeout", "2", "--quiet"],
                          cwd=REPO, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 9, proc.stderr
    report = json.loads((out / JSON_NAME).read_text())
    jsonschema.validate(report, SCHEMA)
    got = {g["name"]: (g["outcome"], g["verdict"]) for g in report["guests"]}
    assert got == {"ns-guest-1": ("ok", "pass"), "ns-guest-2": ("ok", "fail"), "ns-guest-3": ("ok", "pass"),
                   "absent": ("unreachable", "error")}, [g["detail"] for g in report["guests"]]
    assert [g["address"] for g in report["guests"]][:3] == ["10.77.0.11:22", "10.77.0.12:22", "10.77.0.13:22"]
    suites = {s.name: s for s in junitparser.JUnitXml.fromfile(str(out / JUNIT_NAME))}
    assert suites["ns-guest-2"].failures >= 1 and suites["absent"].errors == 1
