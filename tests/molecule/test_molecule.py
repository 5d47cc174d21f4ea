"""Tier 3: the roles converged on real Debian 12 hosts by Molecule (molecule/<scenario>): systemd-nspawn hosts in
network namespaces, reached over SSH, installing from a local signed apt repository (tools/molecule/).

Each scenario runs Molecule's whole sequence: create, prepare, converge, idempotence (a second converge that
changes nothing), verify, destroy. Where the machine cannot run it (not root, no systemd-nspawn, debootstrap,
overlayfs or Debian mirror) the test skips with the reason; VGPU_REQUIRE_MOLECULE=1 (make test-molecule) makes
that a failure.
"""
from __future__ import annotations

import subprocess

import pytest

from conftest import REPO, VENV_BIN, _leftovers

SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
# Scenarios Molecule runs whole (`molecule test`); reboot_gate's steps are driven by test_reboot_gate.py.
WHOLE = [s for s in SCENARIOS if s != "reboot_gate"]


@pytest.mark.parametrize("scenario", WHOLE)
def test_scenario_converges_idempotently_and_verifies(molecule_env, molecule_lock, scenario, tmp_path):
    env = dict(molecule_env, VGPU_MOLECULE_DIR=str(tmp_path))
    proc = subprocess.run([str(VENV_BIN / "molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    (tmp_path / "molecule.log").write_text(log)
    assert proc.returncode == 0, f"molecule test -s {scenario} failed (log: {tmp_path}/molecule.log):\n{log[-6000:]}"
    for step in ("converge", "idempotence", "verify"):
        assert f"[{scenario} > {step}] Executed: Successful" in log, f"{step} did not run: {log[-3000:]}"
    assert _leftovers(tmp_path) == [], "hosts, network namespaces or mounts outlived the scenario"


def test_every_scenario_is_found():
    assert SCENARIOS == ["fleet", "reboot_gate"]
