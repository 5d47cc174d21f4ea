"""CLI start-up: read commands import only what they use (issue #12, benchmarks/README.md "CLI start-up").

Each case runs one `vgpu` command in a fresh interpreter on a provisioned simulated host and checks which
heavy modules it left in sys.modules. Nothing is timed: an import that creeps back into a read path (rich
for a JSON output, the simulator's machine-spec models and kernel model for a host that is only read,
pydantic for `discover` on a simulated host, the report model for `metrics` without --report) fails here by
name, whatever the machine's load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simhelp import fresh_host

REPO = Path(__file__).resolve().parents[2]

# Runs vgpu's real entry point, then writes the exit code and every imported module's name to argv[1].
RUNNER = r"""
import json, sys
from vgpu.cli import main
out, argv = sys.argv[1], sys.argv[2:]
try:
    main(argv)
    rc = 0
except SystemExit as exc:
    rc = exc.code
with open(out, "w") as fh:
    json.dump({"rc": rc, "modules": sorted(sys.modules)}, fh)
"""

# Building a simulated machine and changing it: a read command that opens an existing host needs none of it.
SIM_BUILD = ("vgpu.sim.spec", "vgpu.sim.presets", "vgpu.sim.build", "vgpu.sim.gim", "vgpu.sim.modules",
             "vgpu.sim.pcicore")
NEVER = ("jsonschema", "paramiko", "pyVmomi", "vgpu.esxi", "vgpu.rollout", "ansible_runner", *SIM_BUILD)
PLAIN = ("rich",)  # no read command's output is rendered by rich (vgpu.cli.term draws tables and styled lines)
PROFILES = ("yaml", "vgpu.profiles", "vgpu.model.profile")
# The simulator's state is plain records checked by vgpu.sim.state itself: opening a host for a read needs no
# pydantic (only building a machine does, for its spec), so a command that loads no profile imports none.
MODELS = ("pydantic", "pydantic_core", "annotated_types")


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory) -> str:
    """A simulated 8xmi300x with mi300x-4vf applied, so plan and status compare everything."""
    from vgpu.profiles import load_profile
    from vgpu.provision import provision

    host = fresh_host(tmp_path_factory.mktemp("startup"))
    provision(host.target(), load_profile("mi300x-4vf"))
    return str(host.state_dir)


def imported(tmp_path: Path, *argv: str, rc: int = 0, stderr: str = "") -> set[str]:
    """The modules `vgpu ARGV` imported; it must exit ``rc`` and write ``stderr`` (a part of it) on stderr."""
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(out), *argv], cwd=tmp_path,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    assert out.exists(), proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (result["rc"] or 0) == rc, (argv, result["rc"], proc.stderr[-2000:])
    assert stderr in proc.stderr
    return set(result["modules"])


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (packages count with their submodules) are among ``modules``."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize("argv", [("--help",), ("validate", "--help"), ("plan", "--help"), ("status", "--help"),
                                  ("discover", "--help"), ("metrics", "--help"), ("export", "--help")])
def test_help_imports_no_library_a_command_needs_only_when_it_runs(tmp_path, argv):
    # validate's --scenario help lists the simulator's scenario names: the package (lazy) and that one
    # import-free module, nothing else of the simulator
    modules = imported(tmp_path, *argv) - {"vgpu.sim", "vgpu.sim.scenarios"}
    assert loaded(modules, (*NEVER, *PLAIN, *PROFILES, "pydantic", "vgpu.sim", "libvirt", "prometheus_client",
                            "importlib.metadata")) == []


SIM = ("--simulate", "--sim-dir")

# (argv after the simulator options are added, modules that must not be imported)
READS = [
    (("discover", "--json"), (*NEVER, *PLAIN, *PROFILES, *MODELS, "libvirt", "prometheus_client")),
    (("discover",), (*NEVER, *PLAIN, *PROFILES, *MODELS, "libvirt", "prometheus_client")),
    # status reads its record (the resolved profile) as JSON: no PyYAML
    (("status", "--json"), (*NEVER, *PLAIN, "prometheus_client", "vgpu.guest", "yaml")),
    (("status",), (*NEVER, *PLAIN, "prometheus_client", "vgpu.guest", "yaml")),
    (("plan", "--json", "--profile", "mi300x-4vf"), (*NEVER, *PLAIN, "prometheus_client", "vgpu.guest")),
    (("plan", "--profile", "mi300x-4vf"), (*NEVER, *PLAIN, "prometheus_client", "vgpu.guest")),
    # export reads the VM assignment from the (simulated) libvirt: libvirt is what it uses
    (("export",), (*NEVER, *PLAIN, "prometheus_client", "vgpu.guest")),
    (("metrics",), (*NEVER, *PLAIN, "vgpu.guest")),
]


@pytest.mark.parametrize("argv, absent", READS, ids=[" ".join(a) for a, _ in READS])
def test_a_read_command_on_a_simulated_host_imports_only_what_it_uses(tmp_path, sim_dir, argv, absent):
    modules = imported(tmp_path, *argv, *SIM, sim_dir)
    assert "vgpu.sim.host" in modules  # the simulated host was opened: the check looked at the real path
    assert loaded(modules, absent) == []


def test_profiles_list_draws_its_table_without_rich(tmp_path):
    modules = imported(tmp_path, "profiles", "list")
    assert "vgpu.cli.term" in modules
    assert loaded(modules, (*NEVER, *PLAIN, "vgpu.sim", "libvirt")) == []


# Every way a command reaches an existing simulated host: open it (kernel.repair validates state.json and
# re-renders a tree a crash left behind), its target, its state and machine name, a read-only kernel call.
OPEN_HOST = r"""
import json, sys
from vgpu.sim import SimHost
out, sim_dir = sys.argv[1], sys.argv[2]
host = SimHost.open(sim_dir)
target = host.target()
state = host.state
host.kernel.settle(1.0)
json.dump({"name": host.machine_name, "functions": len(state.functions), "modules": sorted(sys.modules)},
          open(out, "w"))
"""


def test_opening_a_simulated_host_imports_no_pydantic(tmp_path, sim_dir):
    (Path(sim_dir) / "tree-generation").write_text("-1")  # as after a crash: open() re-renders the tree
    out = tmp_path / "open.json"
    proc = subprocess.run([sys.executable, "-c", OPEN_HOST, str(out), sim_dir], cwd=tmp_path,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (result["name"], result["functions"] > 100) == ("8xmi300x", True)
    assert (Path(sim_dir) / "tree-generation").read_text() != "-1"  # the repair path really ran
    assert loaded(set(result["modules"]), (*MODELS, *SIM_BUILD)) == []


def test_profiles_show_prints_without_rich(tmp_path):
    modules = imported(tmp_path, "profiles", "show", "mi300x-4vf")
    assert "vgpu.profiles" in modules
    assert loaded(modules, (*NEVER, *PLAIN, "vgpu.sim", "libvirt")) == []


def test_an_error_line_is_printed_without_rich(tmp_path):
    """A failing command's one `error:` line goes through render.safe, which needs no rich."""
    modules = imported(tmp_path, "plan", "--profile", "no-such-profile", "--sysfs-root", str(tmp_path),
                       rc=5, stderr="error: no-such-profile: no shipped profile")
    assert loaded(modules, (*NEVER, *PLAIN, "vgpu.sim", "libvirt")) == []


def test_the_simulators_default_machine_is_one_name():
    """vgpu.sim.host keeps its own copy of the default machine's name so that opening a host does not import
    the spec's models; the two must agree."""
    from vgpu.sim import host, spec

    assert host.DEFAULT_MACHINE == spec.DEFAULT_MACHINE
