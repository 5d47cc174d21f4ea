"""The reboot gate on real hosts (molecule/reboot_gate): two systemd-nspawn Debian 12 hosts, the real playbook
playbooks/prepare_passthrough_hosts.yml over SSH, whose IOMMU kernel arguments need a reboot.

Every answer that means "no" - the AWX survey's "false" as AWX passes it (a string in the extra vars),
`-e vgpu_allow_reboot=false`, `=no`, `=0`, and the variable unset - stops the play with "reboot required" and
leaves both hosts in the boot they were in (the start time of their PID 1, recorded before each converge). Then
`-e vgpu_allow_reboot=true` (one host) and the survey's "true" (the other) reboot them, and a last converge finds
nothing left to reboot. The answers run on the newest ansible-core (the venv's) and the oldest the collection
declares (requires_ansible; make test-molecule builds its venv), alternately, the survey's "false" on both; the
fast tier (tests/ansible/test_booleans.py) runs every answer on both.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from conftest import REPO, VENV_BIN, _leftovers, _unavailable

SCENARIO = "reboot_gate"
HOSTS = ["gate-1", "gate-2"]
RUNTIME = REPO / "collections" / "ansible_collections" / "vgpu" / "instinct" / "meta" / "runtime.yml"
OLDEST = yaml.safe_load(RUNTIME.read_text())["requires_ansible"].lstrip(">=").rsplit(".", 1)[0]  # 2.16
OLDEST_BIN = REPO / f".venv-ansible-{OLDEST}" / "bin"
# Both hosts in one batch, neither failure stopping the other: each meets the gate in every converge.
BOTH = ["-e", json.dumps({"vgpu_serial": "100%", "vgpu_max_fail_percentage": 100})]
SURVEY_FALSE = ["-e", json.dumps({"vgpu_allow_reboot": "false"})]
SURVEY_TRUE = ["-e", json.dumps({"vgpu_allow_reboot": "true"})]
NO = [  # (what the operator gave, ansible-core)
    (["-e", "vgpu_allow_reboot=false"], "newest"),
    (["-e", "vgpu_allow_reboot=no"], "oldest"),
    (["-e", "vgpu_allow_reboot=0"], "newest"),
    ([], "oldest"),
    (SURVEY_FALSE, "newest"),
    (SURVEY_FALSE, "oldest"),
]


class Run:
    def __init__(self, env: dict, base: Path):
        self.env, self.base, self.step, self.log = env, base, 0, []

    def molecule(self, command: str, *args: str, core: str = "newest") -> subprocess.CompletedProcess:
        self.step += 1
        path = f"{OLDEST_BIN}:{self.env['PATH']}" if core == "oldest" else self.env["PATH"]
        env = dict(self.env, PATH=path, VGPU_GATE_STEP=str(self.step))
        args = (*BOTH, *args) if command == "converge" else args
        argv = [str(VENV_BIN / "molecule"), command, "-s", SCENARIO, *(["--", *args] if args else [])]
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        self.log.append(f"### step {self.step}: {argv} ({core}) rc {proc.returncode}\n{proc.stdout}{proc.stderr}")
        (self.base / "molecule.log").write_text("\n".join(self.log))
        return proc

    def boot(self, host: str) -> tuple[str, str]:
        """(start time of PID 1, ansible-core version) recorded on host before the last converge."""
        boot, version = (self.base / "boots" / f"{host}-{self.step}").read_text().split()
        return boot, version


def test_no_answer_but_true_reboots_a_host(molecule_env, molecule_lock, tmp_path):
    if not (OLDEST_BIN / "ansible-playbook").exists():
        _unavailable(f"{OLDEST_BIN} is missing (make test-molecule builds it: ansible-core {OLDEST} from PyPI)")
    (tmp_path / "boots").mkdir()
    run = Run(dict(molecule_env, VGPU_MOLECULE_DIR=str(tmp_path)), tmp_path)
    try:
        for step in ("destroy", "create", "prepare"):
            assert run.molecule(step).returncode == 0, run.log[-1][-4000:]
        first = None
        for given, core in NO:
            proc = run.molecule("converge", *given, core=core)
            out = proc.stdout + proc.stderr
            for h in HOSTS:
                stop = [ln for ln in out.splitlines() if ln.startswith(f"fatal: [{h}]")]
                assert proc.returncode != 0 and len(stop) == 1 and \
                    '"reboot required: the running kernel lacks' in stop[0], (h, run.log[-1][-4000:])
            boots = {h: run.boot(h) for h in HOSTS}
            want = "2.16" if core == "oldest" else ""
            assert all(v.startswith(want) for _, v in boots.values()), (core, boots)
            first = first or {h: b for h, (b, _) in boots.items()}
            assert {h: b for h, (b, _) in boots.items()} == first, f"{given} rebooted a host: {boots} vs {first}"
        # the previous converges did not reboot either host (seen at the start of this one)
        assert run.molecule("converge", "-e", "vgpu_allow_reboot=true", "-e", f"vgpu_passthrough_hosts={HOSTS[0]}").returncode == 0, \
            run.log[-1][-4000:]
        assert run.boot(HOSTS[0])[0] == first[HOSTS[0]] and run.boot(HOSTS[1])[0] == first[HOSTS[1]]
        assert run.molecule("converge", *SURVEY_TRUE, "-e", f"vgpu_passthrough_hosts={HOSTS[1]}", core="oldest").returncode == 0, \
            run.log[-1][-4000:]
        assert run.boot(HOSTS[0])[0] != first[HOSTS[0]], "vgpu_allow_reboot=true did not reboot gate-1"
        assert run.boot(HOSTS[1])[0] == first[HOSTS[1]]
        last = run.molecule("converge")  # unset: nothing left to reboot, the play passes on both
        assert last.returncode == 0, run.log[-1][-4000:]
        assert run.boot(HOSTS[1])[0] != first[HOSTS[1]], "the survey's \"true\" did not reboot gate-2"
    finally:
        destroyed = run.molecule("destroy")
    assert destroyed.returncode == 0, run.log[-1][-4000:]
    assert _leftovers(tmp_path) == [], "hosts, network namespaces or mounts outlived the scenario"
