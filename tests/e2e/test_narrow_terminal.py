"""At 80 columns (piped with COLUMNS=80, piped with no COLUMNS at all, and in a real 80-column pseudo-terminal),
`discover`, `plan` and `status` print every PCI address whole and no line wider than the terminal (issue #8,
section 11: addresses used to come out as `0000…`)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from vgpu.sim import SimHost

REPO = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
SGR = re.compile(r"\x1b\[[0-9;]*m")
WIDTH = 80
MODES = ("columns-80", "piped-no-columns", "pty-80")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    env.update(PYTHONPATH=str(REPO), NO_COLOR="1", **extra)
    return env


def run(mode: str, *args: str) -> tuple[int, str]:
    """The real CLI with stdout and stderr together, as the terminal or the pipe receives them."""
    argv = [sys.executable, "-m", "vgpu", *args]
    if mode != "pty-80":
        env = _env(COLUMNS=str(WIDTH)) if mode == "columns-80" else _env()
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=env, cwd=REPO, timeout=600)
        return proc.returncode, proc.stdout.decode()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, WIDTH, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=_env(TERM="xterm"), cwd=REPO,
                            close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=600), b"".join(chunks).decode().replace("\r\n", "\n")


def assert_fits(text: str, addresses: set[str]) -> None:
    lines = SGR.sub("", text).splitlines()
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, f"{len(wide)} line(s) wider than {WIDTH}:\n" + "\n".join(wide[:5])
    assert "…" not in text, "something was cut off"
    shown = set(ADDRESS.findall(text))
    missing = sorted(addresses - shown)
    assert addresses and not missing, f"addresses not shown whole: {missing[:8]}\n{text[:3000]}"


def _addresses(text: str) -> set[str]:
    return set(ADDRESS.findall(text))


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """A fresh 8xmi300x, the mixed machine, and an 8xmi300x provisioned with 8 VFs per GPU (64 VFs)."""
    root = tmp_path_factory.mktemp("narrow")
    SimHost.create(root / "fresh", machine="8xmi300x")
    SimHost.create(root / "mixed", machine="mixed")
    SimHost.create(root / "eight", machine="8xmi300x")
    proc = subprocess.run([sys.executable, "-m", "vgpu", "provision", "--profile", "mi300x-8vf", "--yes",
                           "--simulate", "--sim-dir", str(root / "eight")], capture_output=True, env=_env(),
                          cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()
    return root


def _inventory_addresses(sim_dir: Path) -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "vgpu", "discover", "--json", "--simulate", "--sim-dir",
                           str(sim_dir)], capture_output=True, env=_env(), cwd=REPO, timeout=600, check=True)
    doc = json.loads(proc.stdout)
    return {g["address"] for g in doc["gpus"]} | {v["address"] for g in doc["gpus"] for v in g["vfs"]}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("machine", ["fresh", "mixed", "eight"])
def test_discover_keeps_every_address_whole(hosts, machine, mode):
    rc, text = run(mode, "discover", "--simulate", "--sim-dir", str(hosts / machine))
    assert rc == 0, text
    assert_fits(text, _inventory_addresses(hosts / machine))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("machine,profile", [("fresh", "mi300x-8vf"), ("eight", "mi300x-1vf")])
def test_plan_keeps_every_address_whole(hosts, machine, profile, mode):
    args = ("plan", "--profile", profile, "--simulate", "--sim-dir", str(hosts / machine))
    wide = subprocess.run([sys.executable, "-m", "vgpu", *args], capture_output=True, text=True,
                          env=_env(COLUMNS="400"), cwd=REPO, timeout=600)
    rc, text = run(mode, *args)
    assert rc == wide.returncode == 3, text
    assert_fits(text, _addresses(wide.stdout))


@pytest.mark.parametrize("mode", MODES)
def test_status_keeps_every_address_whole(hosts, mode):
    sim_dir = hosts / "eight"
    proc = subprocess.run([sys.executable, "-m", "vgpu", "status", "--json", "--simulate", "--sim-dir",
                           str(sim_dir)], capture_output=True, env=_env(), cwd=REPO, timeout=600)
    subjects = {i["subject"] for i in json.loads(proc.stdout)["items"] if ADDRESS.fullmatch(i["subject"])}
    rc, text = run(mode, "status", "--simulate", "--sim-dir", str(sim_dir))
    assert rc == proc.returncode, text
    assert_fits(text, subjects)


def test_wide_terminals_get_the_full_table(hosts):
    proc = subprocess.run([sys.executable, "-m", "vgpu", "discover", "--simulate", "--sim-dir", str(hosts / "fresh")],
                          capture_output=True, text=True, env=_env(COLUMNS="200"), cwd=REPO, timeout=600)
    assert "64-bit BARs" in proc.stdout and "narrow terminal" not in proc.stdout
