"""Output paths (issue 8, section 3): `vgpu host snapshot -o PATH` and `vgpu export -o PATH`. As root,
renaming a temporary file over `-o /dev/null` used to replace the device. Now `-o -` is stdout, an
existing target that is not a regular file is refused and left exactly as it was, and a full disk or a
missing directory is one line (exit 5). Each case watches the output directory and the device nodes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from .conftest import REPO, Watch, as_nobody, assert_refused, vgpu

COMMANDS = {"snapshot": ("host", "snapshot"), "export": ("export",)}


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("out") / "sim"
    assert vgpu("discover", "--simulate", "--sim-dir", str(root)).returncode == 0
    return root


def run(command: str, sim: Path, output: str, **kw) -> subprocess.CompletedProcess:
    return vgpu(*COMMANDS[command], "--simulate", "--sim-dir", str(sim), "-o", output, timeout=600, **kw)


def device_id(path: str) -> tuple:
    st = os.lstat(path)
    return st.st_ino, st.st_mode, st.st_rdev


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("device", ["/dev/null", "/dev/full", "/dev/zero"])
def test_a_device_is_refused_and_stays_a_device(sim, tmp_path, command, device):
    before = device_id(device)
    proc = run(command, sim, device)
    assert_refused(proc, 5, device, "character device")
    assert device_id(device) == before and stat.S_ISCHR(os.lstat(device).st_mode)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind, needle", [("fifo", "FIFO"), ("directory", "a directory"),
                                          ("symlink", "symbolic link"), ("missing-dir", "does not exist"),
                                          ("parent-is-file", "not a directory"), ("empty", "empty output path")])
def test_targets_that_are_not_a_regular_file_are_refused(sim, tmp_path, command, kind, needle):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep\n")
    target = out / "result"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
        (target / "inside.txt").write_text("keep\n")
    elif kind == "symlink":
        target.symlink_to(out / "precious.txt")
    elif kind == "missing-dir":
        target = out / "no" / "such" / "result"
    elif kind == "parent-is-file":
        target = out / "precious.txt" / "result"
    watch = Watch(out)
    proc = run(command, sim, "" if kind == "empty" else str(target))
    assert_refused(proc, 5, needle)
    watch.unchanged()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_stdout_on_a_full_device_is_one_line(sim, command):
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([sys.executable, "-m", "vgpu", *COMMANDS[command], "--simulate", "--sim-dir", str(sim),
                               "-o", "-"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=600,
                              env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1"))
    assert_refused(proc, 5, "standard output", "no space left")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_dash_is_stdout_and_a_regular_file_is_replaced(sim, tmp_path, command):
    proc = subprocess.run([sys.executable, "-m", "vgpu", *COMMANDS[command], "--simulate", "--sim-dir", str(sim),
                           "-o", "-"], capture_output=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"\x1f\x8b" if command == "snapshot" else b"version: v1")
    assert not list(tmp_path.iterdir())  # nothing written beside it
    target = tmp_path / "result"
    target.write_text("old\n")
    proc = run(command, sim, str(target))
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes() != b"old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["result"]
    if command == "snapshot":
        assert stat.S_IMODE(target.stat().st_mode) == 0o600  # it describes the host
        with tarfile.open(target) as tar:
            assert "MANIFEST.json" in tar.getnames()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_socket_target_is_refused(sim, tmp_path, command):
    import socket
    target = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(target))
        watch = Watch(tmp_path)
        assert_refused(run(command, sim, str(target)), 5, "socket")
        watch.unchanged()
    finally:
        server.close()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_link_to_dev_null_is_refused_and_both_stay(sim, tmp_path, command):
    link = tmp_path / "out.tar.gz"
    link.symlink_to("/dev/null")
    before = device_id("/dev/null")
    watch = Watch(tmp_path)
    assert_refused(run(command, sim, str(link)), 5, "symbolic link")
    watch.unchanged()
    assert device_id("/dev/null") == before


def _limit_file_size():  # in the child: files may not grow past 64 bytes (a profile is ~250), and the
    import resource     # signal is ignored, so the write fails with EFBIG
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_write_that_fails_midway_is_one_line_and_keeps_the_old_file(sim, tmp_path, command):
    """A real write error on the file (RLIMIT_FSIZE: EFBIG, the same path as a full disk): exit 5, one
    line naming the file, the old content kept and no temporary file left beside it."""
    target = tmp_path / "result"
    target.write_text("old\n")
    watch = Watch(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "vgpu", *COMMANDS[command], "--simulate", "--sim-dir",
                           str(sim), "-o", str(target)], capture_output=True, text=True, timeout=600,
                          preexec_fn=_limit_file_size,
                          env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1"))
    assert_refused(proc, 5, str(target), "cannot write")
    watch.unchanged()


def test_a_directory_the_user_cannot_write_is_one_line(python_for_nobody, area):
    """As a normal user, -o into a directory it cannot write: exit 5 (permission denied), not 70."""
    home = area / "nobody"
    target = area / "snap.tar.gz"  # area itself is root's
    proc = as_nobody(python_for_nobody, "host", "snapshot", "--simulate", "--sim-dir", str(home / "sim"),
                     "-o", str(target), home=str(home))
    assert_refused(proc, 5, str(target), "permission denied")
    assert not target.exists()
    assert sorted(os.listdir(area)) == ["nobody"]
