"""Run the vgpu.instinct roles and playbooks with the real ansible-playbook against localhost.

Nothing here changes this machine: plays that would install or write under /etc run in check mode,
and the shared task files that write (the reboot marker) or read (sysfs, DKMS trees) take paths
under tmp_path. Tools the roles ask (mokutil, dkms, grubby) are small fakes first on PATH.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loadsafe import HANG, burn_session, cpu_burners, signalled, wait_until  # noqa: E402,F401  (fixtures; no sleeps)

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
# The ansible-core that runs the roles: the venv's (the newest the collection supports), or VGPU_ANSIBLE_BIN, the
# bin directory of another one (make test-ansible-oldest: the oldest that meta/runtime.yml's requires_ansible allows).
ANSIBLE_BIN = Path(os.environ.get("VGPU_ANSIBLE_BIN") or VENV_BIN)
PLAYBOOKS = REPO / "playbooks"
TEST_PLAYBOOKS = Path(__file__).parent / "playbooks"
COLLECTIONS_CACHE = REPO / ".cache" / "collections" / "ansible_collections"
REQUIRE = os.environ.get("VGPU_REQUIRE_ANSIBLE") == "1"

# The host as Ubuntu 24.04 or RHEL 9.6 for the roles (their vgpu_* facts variables), whatever runs the tests.
UBUNTU_24 = {"vgpu_os_family": "Debian", "vgpu_distribution": "Ubuntu", "vgpu_distribution_version": "24.04",
             "vgpu_distribution_major": "24", "vgpu_distribution_release": "noble",
             "vgpu_kernel": "6.8.0-45-generic", "vgpu_cpu_vendor": "amd"}
UBUNTU_22 = {**UBUNTU_24, "vgpu_distribution_version": "22.04", "vgpu_distribution_major": "22",
             "vgpu_distribution_release": "jammy", "vgpu_kernel": "6.8.0-40-generic"}
RHEL_9 = {"vgpu_os_family": "RedHat", "vgpu_distribution": "RedHat", "vgpu_distribution_version": "9.6",
          "vgpu_distribution_major": "9", "vgpu_distribution_release": "Plow",
          "vgpu_kernel": "5.14.0-570.12.1.el9_6.x86_64", "vgpu_cpu_vendor": "intel"}


@dataclass
class PlayResult:
    rc: int
    doc: dict
    stderr: str
    host: str = "localhost"

    def on(self, host: str) -> "PlayResult":
        """The same run, seen from another inventory host."""
        return PlayResult(self.rc, self.doc, self.stderr, host)

    def tasks(self):
        """(task name without its "role : " prefix, host result) for every task run on self.host, in order."""
        for play in self.doc.get("plays", []):
            for task in play.get("tasks", []):
                res = task.get("hosts", {}).get(self.host)
                if res is not None:
                    yield task["task"]["name"].split(" : ", 1)[-1], res

    def task_names(self) -> list[str]:
        return [name for name, _ in self.tasks()]

    def failed(self) -> tuple[str, str]:
        """(name, message) of the task that failed on self.host."""
        for name, res in self.tasks():
            if res.get("failed"):
                items = [r for r in res.get("results", []) if r.get("failed")]
                return name, (items[0] if items else res).get("msg", "")
        raise AssertionError(f"no task failed on {self.host} (rc {self.rc}); stderr: {self.stderr[-2000:]}")

    @property
    def ok(self) -> bool:
        return not any(res.get("failed") or res.get("unreachable") for _, res in self.tasks()) and \
            bool(self.task_names())

    def changed_tasks(self) -> list[str]:
        return [name for name, res in self.tasks() if res.get("changed")]


def _require(what: str) -> None:
    if REQUIRE:
        pytest.fail(f"{what} (VGPU_REQUIRE_ANSIBLE=1 makes this a failure)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def ansible_env(tmp_path_factory) -> dict:
    if not (ANSIBLE_BIN / "ansible-playbook").exists():
        _require(f"{ANSIBLE_BIN}/ansible-playbook is missing: pip install -e '.[test]'")
    if not (COLLECTIONS_CACHE / "community" / "general" / "MANIFEST.json").exists():
        _require("community.general is missing: run tools/fetch-collections.sh (make test-ansible does)")
    home = tmp_path_factory.mktemp("ansible-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PIPELINING": "1",
        # No fact gathering: the tests give the roles their vgpu_* host variables (Ubuntu or RHEL).
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        # set_stats data in the json callback's output (AWX collects it as the job's artifacts anyway).
        "ANSIBLE_SHOW_CUSTOM_STATS": "1",
    })
    return env


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


def fake_tool(bin_dir: Path, name: str, stdout: str, rc: int = 0) -> None:
    """A stand-in for a host tool: prints stdout, exits rc, whatever its arguments."""
    out = bin_dir / f"{name}.out"
    out.write_text(stdout)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\ncat '{out}'\nexit {rc}\n")
    script.chmod(0o755)


@pytest.fixture(scope="module")
def module_bin(tmp_path_factory) -> Path:
    """fake_bin for module-scoped runs (several cases as hosts of one ansible-playbook run)."""
    return tmp_path_factory.mktemp("bin")


@pytest.fixture(scope="module")
def module_run(ansible_env, module_bin, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("play")

    def run(playbook: Path, hosts: dict[str, dict], extra: dict | None = None, check: bool = False,
            args: list[str] | None = None) -> PlayResult:
        return run_playbook(ansible_env, workdir, module_bin, playbook, extra, check, hosts, args=args)
    return run


def run_playbook(env: dict, workdir: Path, fake_bin: Path | None, playbook: Path, extra: dict | None = None,
                 check: bool = False, hosts: dict[str, dict] | None = None, diff: bool = False,
                 args: list[str] | None = None) -> PlayResult:
    """Run a playbook with the local connection; a PlayResult from the json callback.

    hosts: inventory host name -> that host's variables, so one run checks several cases (each host
    stands for one case, all of them this machine); default a single host "localhost". extra: -e
    variables, which win over host variables, for what every case shares. args: more ansible-playbook
    arguments, as an operator types them (e.g. ["-e", "vgpu_allow_reboot=no"], a string)."""
    workdir.mkdir(parents=True, exist_ok=True)
    n = len(list(workdir.glob("inventory-*")))
    inventory = workdir / f"inventory-{n}.json"
    # The venv's python runs the modules (interpreter discovery may find a pyenv shim without ansible).
    common = {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python")}
    inventory.write_text(json.dumps({"all": {"vars": common, "hosts": hosts or {"localhost": {}}}}))
    vars_file = workdir / f"extra-{n}.json"
    vars_file.write_text(json.dumps(extra or {}))
    env = dict(env)
    env["PATH"] = f"{fake_bin or ''}:{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    cmd = [str(ANSIBLE_BIN / "ansible-playbook"), "-i", str(inventory), "-e", f"@{vars_file}", *(args or []),
           str(playbook)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    try:
        doc = json.loads(proc.stdout[proc.stdout.index("{"):]) if "{" in proc.stdout else {}
    except json.JSONDecodeError:
        doc = {}
    if not doc:
        raise AssertionError(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return PlayResult(proc.returncode, doc, proc.stderr, next(iter(hosts or {"localhost": {}})))


@pytest.fixture
def run_play(ansible_env, fake_bin, tmp_path):
    def run(playbook: Path, extra: dict | None = None, check: bool = False,
            hosts: dict[str, dict] | None = None, diff: bool = False) -> PlayResult:
        return run_playbook(ansible_env, tmp_path / "play", fake_bin, playbook, extra, check, hosts, diff)
    return run


# What `vgpu playbook run` passes on to the processes of the run for the signal it got (automation/interrupt.py).
PASSED_ON = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGTERM"}
def signal_at_pause(proc: subprocess.Popen, pause: Path, signum: int, *, reaches: str | None = None
                    ) -> tuple[str, str]:
    """Send ``signum`` to ``proc`` while the simulator holds a step (VGPU_SIM_PAUSE_AT with VGPU_SIM_PAUSE_DIR=pause),
    wait until the paused `vgpu provision` on the host has received what is passed on for it (``reaches``, default
    PASSED_ON), then let the step finish; returns the process's stdout and stderr once it has exited. No sleep:
    each move waits for the event it depends on."""
    wait_until(lambda: (pause / "ready").exists(), proc, "the provision paused")
    proc.send_signal(signum)
    expected = reaches or PASSED_ON[signum]
    wait_until(lambda: expected in signalled(pause), proc, f"vgpu on the host received {expected}")
    (pause / "go").write_text("")  # the paused step finishes: vgpu then sees the signal and rolls back
    return proc.communicate(timeout=HANG)


# What a wheel is built from (pyproject.toml, setup.py and MANIFEST.in say what goes in): a copy of these, since
# setuptools writes build/ and *.egg-info beside the sources, never into the checkout.
WHEEL_SOURCES = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "ansible.cfg", "vgpu", "playbooks",
                 "collections/ansible_collections/vgpu/instinct"]


def build_vgpu_wheel(src: Path, out: Path) -> Path:
    """vgpu's wheel, built from a copy of this checkout in src (offline: the venv's setuptools, no isolation)."""
    import shutil

    for name in WHEEL_SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "output"))
        else:
            shutil.copy2(REPO / name, src / name)
    proc = subprocess.run([str(VENV_BIN / "python"), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("vgpu-*.whl")
    return wheel


@pytest.fixture(scope="session", autouse=True)
def _state_home(tmp_path_factory):
    """`vgpu playbook run` keeps a failed run's artifacts under $XDG_STATE_HOME (docs/ansible.md): the tier's
    runs keep theirs in a directory of the session, never in the real home."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before
