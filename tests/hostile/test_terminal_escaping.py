"""Strings from outside never drive the terminal (issue #8, section 1): a host name in a snapshot, a sysfs value in a
capture, a snapshot's file name, a process name holding a VF, a guest name in a report, a profile's file name or
description. Each case builds its hostile input, runs the real CLI (colour forced and not), and checks on the raw
bytes that no ESC/BEL/CR/C1/bidi character of the payload reaches stdout or stderr, that rich markup in it is
printed literally, and that its visible escape is shown instead. Only SGR colour sequences that rich itself writes
(FORCE_COLOR) are allowed through.

Bytes, not text: subprocess's text mode turns a raw CR into a newline and would hide it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

MARKUP = "[bold red]X[/]"
NAME_MARKUP = "[bold red]X[reverse]"  # markup a file name can hold (no "/")
PAYLOAD = f"n{MARKUP}\x1b[2J\x1b]0;title\x07\rEVIL\u202eabc\u2066d\x9b31m\x7f"
VISIBLE = ("\\x1b[2J", "\\x07", "\\x0d", "\\u202e", "\\u2066", "\\x9b", "\\x7f")  # what safe() shows instead
TEXT_VISIBLE = ("\\x1b[2J", "\\x07", "\\u202e", "\\x9b")  # from files read as text: a CR arrives as a newline
FORBIDDEN = ("\x1b", "\x07", "\r", "\x9b", "\x9d", "\x7f", "\u202e", "\u2066", "\u2069")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # colour and style codes rich writes under FORCE_COLOR
COLOUR = {"plain": {"NO_COLOR": "1"}, "forced": {"NO_COLOR": "", "FORCE_COLOR": "1", "TERM": "xterm-256color"}}


def run(*args: str, env: dict | None = None, colour: str = "plain", timeout: float = 90) -> subprocess.CompletedProcess:
    """The real CLI, like conftest.vgpu() but capturing bytes (a raw CR must stay visible to the assertions)."""
    base = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400")
    base.update(COLOUR[colour])
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "vgpu", *args], capture_output=True, env=base, cwd=REPO,
                          timeout=timeout)


def assert_clean(proc: subprocess.CompletedProcess, *, literal: bool = True, visible: tuple[str, ...] = VISIBLE):
    """Nothing of the payload acts on the terminal; its markup (when shown at all) is printed as written."""
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")[-2000:]
    texts = {name: SGR.sub("", data.decode("utf-8")) for name, data in (("stdout", proc.stdout),
                                                                         ("stderr", proc.stderr))}
    for name, text in texts.items():
        found = sorted({repr(c) for c in FORBIDDEN if c in text})
        assert not found, f"{name} carries raw {found}: {text[-1500:]!r}"
    both = texts["stdout"] + texts["stderr"]
    if literal:
        assert MARKUP in both, both[-2000:]
    for escape in visible:
        assert escape in both, (escape, both[-2000:])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One simulated 8xmi300x host and a snapshot of it, built once; cases copy what they change."""
    root = tmp_path_factory.mktemp("escaping")
    sim = root / "sim"
    proc = run("host", "snapshot", "-o", str(root / "base.tar.gz"), "--simulate", "--sim-dir", str(sim))
    assert proc.returncode == 0, proc.stderr
    return root


def _members(snapshot: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(snapshot) as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]


def craft_snapshot(base: Path, out: Path, host: str | None = None, files: dict[str, bytes] | None = None) -> Path:
    """The base snapshot with the manifest's host name and/or the content of files ending in a key replaced."""
    files = files or {}
    with tarfile.open(out, "w:gz") as tar:
        for info, data in _members(base / "base.tar.gz"):
            if info.name == "MANIFEST.json" and host is not None:
                manifest = json.loads(data)
                manifest["host"] = host
                data = json.dumps(manifest).encode()
            for suffix, content in files.items():
                if info.isfile() and info.name.endswith(suffix):
                    data = content
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out


@pytest.fixture
def host_snapshot(base, tmp_path):
    return craft_snapshot(base, tmp_path / "host.tar.gz", host=PAYLOAD)


# --- a snapshot whose manifest names a hostile host: every command that shows the host -----------------------

HOST_COMMANDS = {
    "discover": ("discover",),
    "plan": ("plan", "--profile", "mi300x-4vf"),
    "plan-in-sync-or-not-1vf": ("plan", "--profile", "mi300x-1vf"),
    "status": ("status",),
}


@pytest.mark.parametrize("colour", sorted(COLOUR))
@pytest.mark.parametrize("command", sorted(HOST_COMMANDS))
def test_snapshot_host_name_is_shown_escaped(host_snapshot, watch, command, colour):
    watch = watch(host_snapshot.parent)
    proc = run(*HOST_COMMANDS[command], "--snapshot", str(host_snapshot), colour=colour)
    assert proc.returncode in (0, 3), proc.stderr.decode(errors="replace")
    assert_clean(proc)
    watch.unchanged()


# --- values read from sysfs files inside a capture ------------------------------------------------------------

@pytest.mark.parametrize("colour", sorted(COLOUR))
@pytest.mark.parametrize("attribute,command", [("/current_link_speed", "discover"), ("module/gim/version", "host")])
def test_sysfs_values_are_shown_escaped(base, tmp_path, attribute, command, colour):
    snap = craft_snapshot(base, tmp_path / "attr.tar.gz", files={attribute: PAYLOAD.encode() + b"\n"})
    proc = run(*({"discover": ("discover",), "host": ("host", "check")}[command]), "--snapshot", str(snap),
               colour=colour)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_clean(proc, visible=TEXT_VISIBLE)


# --- the snapshot's own file name ------------------------------------------------------------------------------

@pytest.mark.parametrize("colour", sorted(COLOUR))
def test_snapshot_file_name_is_shown_escaped(base, tmp_path, colour):
    snap = tmp_path / f"h{NAME_MARKUP}\x1b[2J\u202e.tar.gz"
    shutil.copyfile(base / "base.tar.gz", snap)
    proc = run("discover", "--snapshot", str(snap), colour=colour)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_clean(proc, literal=False, visible=("\\x1b[2J", "\\u202e", NAME_MARKUP))


@pytest.mark.parametrize("colour", sorted(COLOUR))
def test_error_line_quoting_a_path_is_escaped(tmp_path, colour):
    missing = tmp_path / f"gone{NAME_MARKUP}\x1b]0;title\x07\r.tar.gz"
    proc = run("plan", "--profile", "mi300x-4vf", "--snapshot", str(missing), colour=colour)
    assert proc.returncode == 5, proc.stderr.decode(errors="replace")
    lines = [ln for ln in proc.stderr.decode().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1
    assert_clean(proc, literal=False, visible=("\\x1b]0;title\\x07\\x0d", NAME_MARKUP))


# --- a process holding a VF, as /proc shows it --------------------------------------------------------------

@pytest.fixture
def held_sim(base, tmp_path):
    """A copy of the simulated host where a process named PAYLOAD has the first VF's VFIO group open."""
    sim = tmp_path / "sim"
    shutil.copytree(base / "sim", sim, symlinks=True)
    root = sim / "root"
    vf = next((root / "sys/bus/pci/devices").glob("0000:05:02.*"))
    group = os.path.basename(os.readlink(vf / "iommu_group"))
    proc_dir = root / "proc" / "4242"
    (proc_dir / "fd").mkdir(parents=True)
    (proc_dir / "comm").write_text(PAYLOAD + "\n")
    os.symlink(f"/dev/vfio/{group}", proc_dir / "fd" / "7")
    return sim


@pytest.mark.parametrize("colour", sorted(COLOUR))
def test_holder_process_name_is_shown_escaped_in_the_plan(held_sim, colour):
    proc = run("plan", "--profile", "mi300x-4vf", "--simulate", "--sim-dir", str(held_sim), colour=colour)
    assert proc.returncode == 3, proc.stderr.decode(errors="replace")
    assert b"pid 4242" in proc.stdout
    assert_clean(proc, visible=TEXT_VISIBLE)


@pytest.mark.parametrize("colour", sorted(COLOUR))
def test_holder_process_name_is_escaped_in_the_refusal(held_sim, watch, colour):
    watch = watch(held_sim / "root" / "etc")
    proc = run("provision", "--profile", "mi300x-4vf", "--yes", "--simulate", "--sim-dir", str(held_sim),
               colour=colour)
    assert proc.returncode == 6, proc.stderr.decode(errors="replace")
    assert_clean(proc, visible=TEXT_VISIBLE)
    watch.unchanged()


# --- a validation report from elsewhere -------------------------------------------------------------------

@pytest.fixture(scope="module")
def report_doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    proc = run("validate", "--simulate", "--guests", "1", "--skip-workloads", "--report-dir", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "validation-report.json").read_text())


@pytest.mark.parametrize("colour", sorted(COLOUR))
@pytest.mark.parametrize("field", ["name", "detail", "check"])
def test_report_strings_are_shown_escaped(report_doc, tmp_path, field, colour):
    doc = json.loads(json.dumps(report_doc))
    guest = doc["guests"][0]
    if field == "check":
        guest["checks"][0].update(name=PAYLOAD, status="fail")
        guest["verdict"], guest["detail"] = "fail", ""
    else:
        guest[field] = PAYLOAD
    src = tmp_path / "in.json"
    src.write_text(json.dumps(doc))
    proc = run("report", "--from", str(src), "--report-dir", str(tmp_path / "out"), colour=colour)
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
    assert_clean(proc)


# --- file names an operator passes: profiles, -o targets ------------------------------------------------

@pytest.fixture
def hostile_profile(tmp_path):
    path = tmp_path / f"p{NAME_MARKUP}\x1b[2J\u202e.yaml"
    shutil.copyfile(REPO / "profiles" / "mi300x-1vf.yaml", path)
    return path


@pytest.mark.parametrize("command", [("profiles", "validate"), ("profiles", "show")])
def test_profile_file_name_is_echoed_escaped(hostile_profile, command):
    proc = run(*command, str(hostile_profile), colour="forced")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_clean(proc, literal=False, visible=("\\x1b[2J", "\\u202e", NAME_MARKUP))


@pytest.mark.parametrize("command", [("export",), ("host", "snapshot")])
def test_output_path_is_echoed_escaped(base, tmp_path, watch, command):
    sim = tmp_path / "sim"
    shutil.copytree(base / "sim", sim, symlinks=True)
    target = tmp_path / "out" / f"o{NAME_MARKUP}\x1b]0;title\x07.tar.gz"
    target.parent.mkdir()
    watch = watch(sim / "root")  # the simulated host (the state dir itself gets its .lock)
    proc = run(*command, "-o", str(target), "--simulate", "--sim-dir", str(sim), colour="forced")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert target.is_file() and os.listdir(target.parent) == [target.name]
    assert_clean(proc, literal=False, visible=("\\x1b]0;title\\x07", NAME_MARKUP))
    watch.unchanged()


# --- the one function all of the above goes through --------------------------------------------------------

@pytest.mark.parametrize("char,shown", [
    ("\x1b", "\\x1b"), ("\x07", "\\x07"), ("\r", "\\x0d"), ("\n", "\\x0a"), ("\t", "\\x09"), ("\x00", "\\x00"),
    ("\x7f", "\\x7f"), ("\x9b", "\\x9b"), ("\x9d", "\\x9d"), ("\u202a", "\\u202a"), ("\u202e", "\\u202e"),
    ("\u2066", "\\u2066"), ("\u2069", "\\u2069"), ("\u200f", "\\u200f"), ("\u2028", "\\u2028"),
    ("\u200b", "\\u200b"), ("\u200d", "\\u200d"), ("\u2060", "\\u2060"), ("\ufeff", "\\ufeff")])
def test_safe_makes_each_control_visible(char, shown):
    from vgpu.cli.render import safe
    assert safe(f"a{char}b", markup=False) == f"a{shown}b"


def test_safe_keeps_ordinary_text_and_escapes_markup(monkeypatch):
    from vgpu.cli.render import add_row, cell, console, safe, table
    assert safe("MI300X é 日本 0000:85:00.0", markup=False) == "MI300X é 日本 0000:85:00.0"
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("sys.stdout", io.StringIO())
    rows = table(MARKUP, ("a",))
    add_row(rows, cell(MARKUP, "bold"))
    out = console()
    out.print(f"host {safe(MARKUP)}")
    out.print(rows)
    printed = SGR.sub("", sys.stdout.getvalue())
    assert SGR.search(sys.stdout.getvalue())  # styles were drawn; the markup in the text was not taken as style
    assert printed.count(MARKUP) == 3
    assert safe(None) == "-"


@pytest.mark.parametrize("stdout_errors", ["default", "strict"])
def test_path_bytes_that_are_not_utf8_are_shown_escaped(base, tmp_path, watch, stdout_errors):
    """A directory name with bytes that are not UTF-8 (Python keeps them as surrogates U+DC80-U+DCFF): 0x9b
    alone is CSI to an 8-bit terminal, and was written back raw; with a strict UTF-8 stdout (a UTF-8 locale
    without Python's UTF-8 mode) it was exit 70. Now shown as \\x9b, nothing changed."""
    capture = Path(os.fsdecode(bytes(tmp_path) + b"/c1\x9bx\xff"))
    shutil.copytree(base / "sim" / "root" / "sys", capture / "sys", symlinks=True)
    seen = watch(tmp_path)
    env = {"PYTHONIOENCODING": "utf-8:strict"} if stdout_errors == "strict" else {}
    proc = run("discover", "--sysfs-root", str(capture / "sys"), env=env)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert b"\x9b" not in proc.stdout and b"\xff" not in proc.stdout
    assert b"c1\\x9bx\\xff" in proc.stdout, proc.stdout[:300]
    seen.unchanged()


def test_safe_shows_surrogates_as_the_bytes_they_stand_for():
    from vgpu.cli.render import safe
    assert safe(os.fsdecode(b"a\x9bb\xff"), markup=False) == "a\\x9bb\\xff"
    assert safe("a\ud800b", markup=False) == "a\\ud800b"
