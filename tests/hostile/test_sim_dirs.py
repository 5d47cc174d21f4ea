"""Simulator directories (issue 8, section 2): `--sim-dir ""` used to become `.`, and a directory holding
some other program's `root/` or `state.json` was taken for a simulated host and wiped by discover, reset or
remove. Now a simulator directory is recognised only by vgpu's own marker (`.vgpu-sim`, format
`vgpu.sim-dir/v1`); an empty value, `/`, `$HOME`, links and non-directories are refused with exit 5. Every
case points a real command at a decoy directory full of precious files and checks it is untouched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import Watch, assert_refused, vgpu

COMMANDS = {
    "discover": ("discover", "--simulate"),
    "provision": ("provision", "--profile", "mi300x-4vf", "--yes", "--simulate"),
    "sim-reset": ("sim", "reset"),
    "sim-remove": ("sim", "remove"),
    "sim-vm": ("sim", "vm", "guest1"),
}


def decoy(path: Path, *, state_json: bool = True, root: bool = True) -> Path:
    """A directory that looks like a simulated host to a careless check: precious files, a root/ and
    another program's state.json."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "thesis.tex").write_text("years of work\n")
    (path / ".ssh").mkdir()
    (path / ".ssh" / "id_ed25519").write_text("secret key\n")
    if root:
        (path / "root").mkdir()
        (path / "root" / "data.db").write_bytes(os.urandom(256))
    if state_json:
        (path / "state.json").write_text('{"owner": "another program"}\n')
    return path


def sim_value(tmp_path: Path, kind: str) -> tuple[str, Path]:
    """(the --sim-dir value, the directory to watch) for each hostile kind of value."""
    target = decoy(tmp_path / "decoy")
    if kind == "empty":
        return "", target  # run with the decoy as the working directory
    if kind == "decoy":
        return str(target), target
    if kind == "state-json-only":
        return str(decoy(tmp_path / "other", root=False)), tmp_path
    if kind == "root-only":
        return str(decoy(tmp_path / "other", state_json=False)), tmp_path
    if kind == "wrong-marker":
        (target / ".vgpu-sim").write_text("someone.else/v1\n")
        return str(target), target
    if kind == "fifo-marker":
        os.mkfifo(target / ".vgpu-sim")
        return str(target), target
    if kind == "file":
        f = tmp_path / "notes.txt"
        f.write_text("keep\n")
        return str(f), tmp_path
    if kind == "fifo":
        os.mkfifo(tmp_path / "pipe")
        return str(tmp_path / "pipe"), tmp_path
    if kind == "symlink":
        (tmp_path / "link").symlink_to(target)
        return str(tmp_path / "link"), tmp_path
    if kind == "home":
        return "HOME", target
    raise AssertionError(kind)


NEEDLES = {"empty": "empty", "decoy": "marker", "state-json-only": "marker", "root-only": "marker",
           "wrong-marker": "marker", "fifo-marker": "marker", "file": "not a directory", "fifo": "FIFO",
           "symlink": "symbolic link", "home": "not a directory of its own"}


# every command through --sim-dir; VGPU_SIM_DIR goes through the same resolution (cli.common.sim_dir_of), so
# two commands (one that builds, one that deletes) cover it
MATRIX = [(command, kind, "option") for command in sorted(COMMANDS) for kind in sorted(NEEDLES)] + \
         [(command, kind, "env") for command in ("discover", "sim-remove") for kind in sorted(NEEDLES)]


@pytest.mark.parametrize("command, kind, how", MATRIX)
def test_a_directory_vgpu_did_not_make_is_never_touched(tmp_path, command, kind, how):
    value, watched = sim_value(tmp_path, kind)
    (tmp_path / "home").mkdir()
    env = {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    if value == "HOME":  # the operator's home directory, which holds a root/ and a state.json
        value = env["HOME"] = str(watched)
    args = COMMANDS[command]
    if how == "option":
        args = (*args, "--sim-dir", value)
    else:
        env["VGPU_SIM_DIR"] = value
    watch = Watch(tmp_path)
    cwd = tmp_path / ("decoy" if kind == "empty" else "home")  # '' would be the decoy; '.' is tested below
    proc = vgpu(*args, env=env, cwd=cwd, timeout=600)
    assert_refused(proc, 5, NEEDLES[kind])
    watch.unchanged()
    assert watched.exists()


@pytest.mark.parametrize("command", ["discover", "sim-reset", "sim-remove"])
def test_the_file_system_root_is_refused(tmp_path, command):
    proc = vgpu(*COMMANDS[command], "--sim-dir", "/", timeout=600)
    assert_refused(proc, 5, "refusing /")
    proc = vgpu(*COMMANDS[command], env={"VGPU_SIM_DIR": "/"}, timeout=600)
    assert_refused(proc, 5, "refusing /")
    assert os.path.isdir("/root") and os.path.isdir("/etc")


def test_a_new_or_empty_directory_becomes_a_marked_simulated_host_that_remove_deletes(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (empty, tmp_path / "new" / "host"):
        proc = vgpu("discover", "--simulate", "--sim-dir", str(target), timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert (target / ".vgpu-sim").read_text().startswith("vgpu.sim-dir/v1\n")
        proc = vgpu("sim", "remove", "--sim-dir", str(target), timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert not target.exists()


def test_reset_replaces_a_marked_host_but_keeps_its_neighbours(tmp_path):
    host = tmp_path / "host"
    assert vgpu("sim", "reset", "--sim-dir", str(host), timeout=600).returncode == 0
    (tmp_path / "neighbour.txt").write_text("keep\n")
    watch = Watch(tmp_path / "neighbour.txt")
    proc = vgpu("sim", "reset", "--machine", "mixed", "--sim-dir", str(host), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (host / ".vgpu-sim").is_file()
    watch.unchanged()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host", "neighbour.txt"]  # no staging left


@pytest.mark.parametrize("value, cwd", [(".", "empty"), ("..", "empty/sub"), ("../..", "empty/sub/deeper"),
                                        ("", "empty")])
@pytest.mark.parametrize("command", ["discover", "sim-reset", "sim-remove"])
def test_the_current_directory_and_its_parents_are_refused_even_when_empty(tmp_path, command, value, cwd):
    """'.' or '..' in an empty directory would otherwise be adopted as a new simulated host, which
    `vgpu sim remove` then deletes with the operator standing in it."""
    (tmp_path / cwd).mkdir(parents=True)
    watch = Watch(tmp_path)
    proc = vgpu(*COMMANDS[command], "--sim-dir", value, cwd=tmp_path / cwd, timeout=600)
    assert_refused(proc, 5, "empty" if value == "" else "the current directory or one above it")
    watch.unchanged()


def test_a_marked_host_may_be_used_from_inside_it(tmp_path):
    host = tmp_path / "host"
    assert vgpu("sim", "reset", "--sim-dir", str(host), timeout=600).returncode == 0
    proc = vgpu("discover", "--simulate", "--sim-dir", ".", cwd=host, timeout=600)
    assert proc.returncode == 0, proc.stderr
