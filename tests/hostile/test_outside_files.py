"""Hostile files from outside (issue 8, sections 6-8): every kind of file vgpu reads, made into a FIFO, a
link to /dev/zero, a directory, a sparse file over its cap, binary, bad UTF-8, deeply nested or the wrong
shape, run through the real command that reads it. Each case: the documented exit code, one error line
naming the file (and the limit), a bounded runtime (a FIFO hang fails the 30 s timeout), nothing changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import Watch, as_nobody, assert_refused, copy_sim, planned_sim, special_file, vgpu
from vgpu.inputs import LIMITS

TIMEOUT = 30  # a FIFO that blocks the reader fails the case instead of hanging the suite
HOW = ("fifo", "dev-zero", "directory", "over-cap", "nul", "bad-utf8", "deep", "wrong-shape")
NEEDLE = {"fifo": "FIFO", "dev-zero": "character device", "directory": "a directory, not a regular file",
          "nul": "holds binary data", "bad-utf8": "bad byte 0xe9"}


def hostile(path: Path, how: str, kind: str, *, text: bytes = b"version: v1\n", deep: bytes = b"[" * 100_000,
            wrong: bytes = b"- 1\n- 2\n") -> Path:
    """Make ``path`` into the hostile file ``how`` for a file of ``kind`` (its cap from LIMITS)."""
    if special_file(path, how, LIMITS[kind]):
        pass
    elif how == "nul":
        path.write_bytes(text + b"\x00\x01\x02\x7fELF")
    elif how == "bad-utf8":
        path.write_bytes(text + b"# caf\xe9\n")
    elif how == "deep":
        path.write_bytes(deep)
    elif how == "wrong-shape":
        path.write_bytes(wrong)
    return path


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return vgpu(*args, env=env, timeout=TIMEOUT)


def limit_text(kind: str) -> str:
    n = LIMITS[kind]
    return f"{n // (1 << 20)} MiB" if n >= 1 << 20 else f"{n // 1024} KiB"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One simulated 8xmi300x host, built once; cases copy it."""
    return planned_sim(tmp_path_factory, "outside")


@pytest.fixture
def sim(base, tmp_path):
    return copy_sim(base, tmp_path)


def sim_env(sim: Path) -> dict:
    return {"VGPU_SIM_DIR": str(sim)}


# --- profiles: vgpu plan --profile FILE ---------------------------------------------------------------------

PROFILE_NEEDLE = {**NEEDLE, "over-cap": "256 KiB", "deep": "nested deeper than 16", "wrong-shape": "YAML mapping"}


@pytest.mark.parametrize("how", HOW)
def test_profile_file(sim, tmp_path, how):
    path = hostile(tmp_path / "p.yaml", how, "profile")
    watch = Watch(tmp_path)
    proc = run("plan", "--profile", str(path), "--simulate", "--sim-dir", str(sim), env=sim_env(sim))
    assert_refused(proc, 5, str(path), PROFILE_NEEDLE[how])
    watch.unchanged()


# --- guests files and inventories: vgpu validate --guests/--inventory FILE ---------------------------------

GUESTS_NEEDLE = {**NEEDLE, "over-cap": "4 MiB", "deep": "nested deeper than 32",
                 "wrong-shape": "top level: Input should be a valid dictionary"}


@pytest.mark.parametrize("how", HOW)
def test_guests_file(tmp_path, how):
    path = hostile(tmp_path / "guests.yaml", how, "guests file")
    watch = Watch(tmp_path)
    proc = run("validate", "--guests", str(path), "--report-dir", str(tmp_path / "reports"))
    assert_refused(proc, 5, "guests file", str(path), GUESTS_NEEDLE[how])
    watch.unchanged()


INVENTORY_NEEDLE = {**NEEDLE, "over-cap": "4 MiB", "deep": "nested deeper than 32",
                    "wrong-shape": "expected a mapping of groups"}


@pytest.mark.parametrize("how", HOW)
def test_inventory_file(tmp_path, how):
    path = hostile(tmp_path / "inventory.yaml", how, "inventory", text=b"all:\n  hosts:\n    vm1:\n",
                   deep=b"all:\n  hosts: " + b"[" * 100_000, wrong=b"---\n- all\n")
    watch = Watch(tmp_path)
    proc = run("validate", "--inventory", str(path), "--report-dir", str(tmp_path / "reports"))
    assert_refused(proc, 5, "inventory", str(path), INVENTORY_NEEDLE[how])
    watch.unchanged()


def laughs(top: str, levels: int = 9) -> bytes:
    """A "billion laughs" document: few bytes, 10**levels nodes once its aliases are expanded."""
    lines = ["lol0: &lol0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"lol{i}: &lol{i} [{', '.join([f'*lol{i - 1}'] * 10)}]" for i in range(1, levels)]
    return (top + "\n".join(lines) + "\n").encode()


ALIAS_FILES = {
    "guests file": ("guests.yaml", "--guests", b"version: v1\nguests: []\n"),
    "inventory": ("inventory.yaml", "--inventory", b"all:\n  hosts: {}\n"),
}


@pytest.mark.parametrize("kind", sorted(ALIAS_FILES))
def test_aliases_expanding_past_the_node_cap_are_refused(tmp_path, kind):
    """Anchors are allowed in guests files and inventories (people share an expectation with &mi300x),
    but counted as what they expand to: a billion-laughs file is refused at once, not built."""
    name, option, top = ALIAS_FILES[kind]
    path = tmp_path / name
    path.write_bytes(laughs(top.decode()))
    assert len(path.read_bytes()) < 2000
    watch = Watch(tmp_path)
    proc = run("validate", option, str(path), "--report-dir", str(tmp_path / "reports"))
    assert_refused(proc, 5, kind, str(path), "once its aliases are expanded")
    watch.unchanged()


LOOPS = {  # an alias inside the value its anchor names: a structure that contains itself
    "guests file": ("guests.yaml", "--guests", "version: v1\nguests: &g\n  - name: vm1\n    host: 10.0.0.1\n  - *g\n"),
    "inventory": ("inventory.yaml", "--inventory", "all: &a\n  hosts:\n    vm1:\n  children:\n    g: *a\n"),
}


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_alias_inside_its_own_anchor_is_refused(tmp_path, kind):
    """Was a pydantic error about a nested field (guests file) or Ansible's 'maximum recursion depth exceeded'
    (inventory): now the line of the alias and why."""
    name, option, text = LOOPS[kind]
    path = tmp_path / name
    path.write_text(text)
    watch = Watch(tmp_path)
    proc = run("validate", option, str(path), "--report-dir", str(tmp_path / "reports"))
    assert_refused(proc, 5, kind, str(path), "line 5: the alias", "(a loop)")
    watch.unchanged()


UNBUILDABLE = {  # libyaml parses these; building them failed inside PyYAML or Python (was exit 70)
    "integer of 5000 digits": ("9" * 5000, "a number too long to read"),
    "date that does not exist": ("2026-13-45", "an impossible value (month must be in 1..12)"),
    # explicit tags on values that are not theirs: PyYAML's KeyError, AttributeError, TypeError (exit 70)
    "!!bool on a word": ("!!bool maybe", "'maybe' is not a boolean"),
    "!!timestamp on a word": ("!!timestamp junk", "'junk' is not a timestamp"),
    "!!set on a list": ("!!set [a]", "expected a mapping node, but found sequence"),
    "!!int on nothing": ("!!int ''", "'' is not an integer"),
}
UNBUILDABLE_FILES = {
    "profile": ("p.yaml", ("plan", "--profile"), "version: v1\nname: x\ndescription: {}\n"),
    "guests file": ("guests.yaml", ("validate", "--guests"), "version: v1\nguests: []\nnote: {}\n"),
    "inventory": ("inventory.yaml", ("validate", "--inventory"), "all:\n  vars:\n    n: {}\n"),
}


@pytest.mark.parametrize("kind", sorted(UNBUILDABLE_FILES))
@pytest.mark.parametrize("value", sorted(UNBUILDABLE))
def test_yaml_scalar_python_cannot_build(sim, tmp_path, kind, value):
    name, command, text = UNBUILDABLE_FILES[kind]
    scalar, needle = UNBUILDABLE[value]
    path = tmp_path / name
    path.write_text(text.format(scalar))
    watch = Watch(tmp_path)
    proc = run(*command, str(path), "--simulate", "--sim-dir", str(sim), env=sim_env(sim)) if kind == "profile" \
        else run(*command, str(path), "--report-dir", str(tmp_path / "reports"))
    assert_refused(proc, 5, str(path), "not valid YAML", needle)
    watch.unchanged()


RANGES = {
    "thirty million hosts": ("inv.ini", "[gpu]\nvm[0:30000000]\n", "names more hosts than the limit of 4096"),
    "nested ranges multiply": ("inv.ini", "vm[0:99]-[0:99]\n", "names more hosts than the limit of 4096"),
    "three nested ranges": ("inv.ini", "h[0:999][0:999][0:999]\n", "limit of 4096 hosts per inventory"),
    "lines add up": ("inv.ini", "a[0:3000]\nb[0:3000]\n", "limit of 4096 hosts per inventory"),
    "range in a group name": ("inv.ini", "[g[0:30000000]]\nvm1\n", "limit of 4096 hosts per inventory"),
    "range in a YAML host": ("inv.yaml", "all:\n  hosts:\n    'vm[0:30000000]':\n", "limit of 4096"),
    "YAML ranges in children": ("inv.yaml", "all:\n  children:\n    g1:\n      hosts:\n        'a[0:3000]':\n"
                                "    g2:\n      hosts:\n        'b[0:3000]':\n", "limit of 4096"),
    "zero step": ("inv.ini", "vm[0:10:0]\n", "bad host range"),
    "a number too long for a range": ("inv.ini", "vm[0:" + "9" * 5000 + "]\n", "bad host range"),
    "many groups": ("inv.ini", "".join(f"[g{i}]\nvm{i}\n" for i in range(1100)), "limit is 1024 groups"),
}


@pytest.mark.parametrize("case", RANGES)
def test_inventory_ranges_are_counted_before_expanding(tmp_path, case):
    name, text, needle = RANGES[case]
    path = tmp_path / name
    path.write_text(text)
    watch = Watch(tmp_path)
    proc = run("validate", "--inventory", str(path), "--report-dir", str(tmp_path / "reports"))
    assert_refused(proc, 5, "inventory", str(path), needle)
    watch.unchanged()


# --- validation reports: vgpu report --from FILE ------------------------------------------------------------

GOOD_CHECK = {"name": "lspci.function", "status": "pass", "measured": 1, "expected": 1, "unit": None,
              "detail": "", "seconds": 0.1}
GOOD_GUEST = {"name": "vm1", "address": "vm1:22", "outcome": "ok", "verdict": "pass", "detail": "",
              "seconds": 1.0, "expectation": {"model": "MI300X", "compute": None, "memory": None, "is_vf": True,
                                              "profile": None},
              "agent": {"hostname": "vm1", "agent_version": "1", "started": "2026-01-01T00:00:00Z", "seconds": 1},
              "checks": [GOOD_CHECK]}


def report_doc(**guest) -> bytes:
    return json.dumps({"schema": "vgpu.validation-report/v1", "generated": "2026-01-01T00:00:00Z",
                       "vgpu_version": "0", "guests": [{**GOOD_GUEST, **guest}]}).encode()


REPORT_NEEDLE = {**NEEDLE, "over-cap": "64 MiB", "deep": "nests deeper than 64 levels",
                 "wrong-shape": "not a vgpu validation report"}


@pytest.mark.parametrize("how", HOW)
def test_report_file(tmp_path, how):
    path = hostile(tmp_path / "report.json", how, "report", text=b'{"schema": ', wrong=b"[1, 2]")
    if how == "directory":  # a report directory is read through the report inside it: make that one a directory
        (path / "validation-report.json").mkdir()
    watch = Watch(tmp_path)
    proc = run("report", "--from", str(path), "--report-dir", str(tmp_path / "out"))
    assert_refused(proc, 5, str(path), REPORT_NEEDLE[how])
    watch.unchanged()


SHAPES = {
    "checks is a string": ({"checks": "abc"}, "guests[0].checks: expected array, got string"),
    "a check is a number": ({"checks": [1]}, "guests[0].checks[0]: expected an object, got number"),
    "an unknown status": ({"checks": [{**GOOD_CHECK, "status": "great"}]}, "'great' is not one of pass"),
    "an unknown outcome": ({"outcome": "fine"}, "guests[0].outcome: 'fine' is not one of ok"),
    "agent is a list": ({"agent": [1]}, "guests[0].agent: expected object, got array"),
    "name missing": ({"name": None}, "guests[0].name: is null"),
    "measured is an object": ({"checks": [{**GOOD_CHECK, "measured": {"a": 1}}]},
                              "checks[0].measured: expected number or string, got object"),
    "seconds is text": ({"seconds": "soon"}, "guests[0].seconds: expected number, got string"),
}


@pytest.mark.parametrize("case", SHAPES)
def test_report_of_the_wrong_shape_is_one_line_per_problem(tmp_path, case):
    guest, needle = SHAPES[case]
    path = tmp_path / "report.json"
    path.write_bytes(report_doc(**guest))
    watch = Watch(tmp_path)
    proc = run("report", "--from", str(path), "--report-dir", str(tmp_path / "out"))
    assert_refused(proc, 5, str(path), "malformed validation report", needle)
    watch.unchanged()


def test_report_listing_every_problem_stays_one_line(tmp_path):
    path = tmp_path / "report.json"
    doc = json.loads(report_doc())
    doc["guests"] = ["x"] * 20
    path.write_text(json.dumps(doc))
    proc = run("report", "--from", str(path), "--report-dir", str(tmp_path / "out"))
    assert_refused(proc, 5, "guests[4]: expected an object", "(and 15 more)")
    assert not (tmp_path / "out").exists()


# --- captures: vgpu plan --sysfs-root DIR with a hostile attribute -----------------------------------------

CAPTURE = {"fifo": "FIFO", "dev-zero": "character device", "directory": "directory", "over-cap": "64 KiB"}


@pytest.fixture
def capture(base, tmp_path):
    root = tmp_path / "capture"
    shutil.copytree(base / "root", root, symlinks=True)
    return root


def first_gpu(capture: Path) -> Path:
    for dev in sorted((capture / "sys/bus/pci/devices").iterdir()):
        if (dev / "vendor").read_text().strip() == "0x1002" and (dev / "sriov_totalvfs").exists():
            return dev
    raise AssertionError("no GPU in the capture")


@pytest.mark.parametrize("attribute", ["vendor", "sriov_totalvfs"])
@pytest.mark.parametrize("how", sorted(CAPTURE))
def test_capture_attribute(capture, tmp_path, how, attribute):
    target = first_gpu(capture) / attribute
    target.unlink()
    hostile(target, how, "sysfs attribute")
    watch = Watch(tmp_path)
    proc = run("plan", "--profile", "mi300x-4vf", "--sysfs-root", str(capture / "sys"))
    assert_refused(proc, 5, "sysfs attribute", attribute, CAPTURE[how])
    watch.unchanged()


@pytest.mark.parametrize("rel,kind", [("proc/cmdline", "proc file"), ("etc/modprobe.d/evil.conf", "config file")])
@pytest.mark.parametrize("how", ["fifo", "dev-zero"])
def test_capture_proc_and_modprobe_files(capture, tmp_path, rel, kind, how):
    target = capture / rel
    target.unlink(missing_ok=True)
    hostile(target, how, kind)
    watch = Watch(tmp_path)
    proc = run("host", "check", "--sysfs-root", str(capture / "sys"))
    assert_refused(proc, 5, kind, rel, CAPTURE[how])
    watch.unchanged()


# --- a simulated host's /etc, journal and recorded state ---------------------------------------------------

# (a symlink is not in the list: tracked links, like systemd's enable link, read as their target's name)
ETC = {"fifo": "FIFO", "directory": "a directory, not a regular file", "over-cap": "1 MiB", "nul": "holds binary data",
       "bad-utf8": "bad byte 0xe9"}


@pytest.mark.parametrize("command", [("plan", "--profile", "mi300x-4vf"), ("provision", "--profile", "mi300x-4vf",
                                                                          "--yes"), ("release", "--yes")])
@pytest.mark.parametrize("how", sorted(ETC))
def test_tracked_etc_file(sim, how, command):
    gim_config = sim / "root/etc/gim_config"
    gim_config.unlink(missing_ok=True)
    hostile(gim_config, how, "config file", text=b"vf_num=4\n")
    watch = Watch(sim / "root/sys", sim / "root/etc", sim / "state.json")  # the host lock may be created
    proc = run(*command, "--simulate", "--sim-dir", str(sim), env=sim_env(sim))
    assert_refused(proc, 5, "config file", "gim_config", ETC[how])
    watch.unchanged()


@pytest.mark.parametrize("which", ["simulator state", "recorded profile"])
def test_json_with_a_key_twice_is_refused(sim, which):
    """JSON leaves a key given twice in one object undefined (Python keeps the last): vgpu refuses it, as it
    refuses duplicate keys in YAML, instead of acting on whichever copy a parser picks."""
    if which == "simulator state":
        path = sim / "state.json"
        text = path.read_text()
        assert text.startswith("{")
        path.write_text('{"generation": 0, ' + text[1:])  # the real one comes later in the object
    else:
        path = sim / "root/etc/vgpu/state.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"spec": {"version": "v1"}, "spec": {"version": "v1", "name": "\\u001b[31m"}}')
    watch = Watch(sim / "root", sim / "state.json")
    proc = run("status", "--simulate", "--sim-dir", str(sim), env=sim_env(sim))
    line = assert_refused(proc, 5, "twice in one object")
    assert "\x1b" not in line
    watch.unchanged()


@pytest.mark.parametrize("how", ["nul", "bad-utf8", "deep", "wrong-shape"])
def test_recorded_state_file(sim, how):
    record = sim / "root/etc/vgpu/state.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    hostile(record, how, "config file", text=b'{"spec": ', wrong=b'{"not a spec": 1}')
    watch = Watch(sim / "root", sim / "state.json")  # not the simulator's own .lock
    proc = run("status", "--simulate", "--sim-dir", str(sim), env=sim_env(sim))
    needle = {"nul": "binary data", "bad-utf8": "not UTF-8", "deep": "nests deeper than 64",
              "wrong-shape": "corrupt"}[how]
    assert_refused(proc, 5, "vgpu/state.json", needle)
    watch.unchanged()


# A record that is well-formed JSON but whose profile is not: checked like a profile file (status reads it as
# JSON, without a YAML round trip), one line naming the record and the problem, nothing changed.
RECORDED_SPECS = {
    "list": ([1, 2], "a profile is a mapping"),
    "no-version": ({"gpu": {"model": "MI300X"}}, "version: missing"),
    "unknown-key": ({"version": "v1", "name": "x", "gpu": {"model": "MI300X", "mode": "sriov", "vfs_per_gpu": 4},
                     "hypervisor": "kvm", "evil": 1}, "evil"),
    "extends-outside": ({"version": "v1", "extends": "/etc/passwd"}, "extends"),
    "bad-escape": ({"version": "v1", "name": "\x1b[31mred", "gpu": {"model": "MI300X"}}, "vgpu/state.json"),
}


@pytest.mark.parametrize("how", sorted(RECORDED_SPECS))
def test_recorded_profile_that_is_not_a_profile(sim, how):
    spec, needle = RECORDED_SPECS[how]
    record = sim / "root/etc/vgpu/state.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"spec": spec}))
    watch = Watch(sim / "root", sim / "state.json")
    proc = run("status", "--simulate", "--sim-dir", str(sim), env=sim_env(sim))
    assert_refused(proc, 5, needle)
    assert "\x1b[31m" not in proc.stdout + proc.stderr
    watch.unchanged()


JOURNAL = {"fifo": "FIFO", "dev-zero": "character device", "directory": "directory", "over-cap": "4 MiB",
           "nul": "binary data", "bad-utf8": "not UTF-8", "deep": "nests deeper than 64",
           "wrong-shape": "not a vgpu.journal/v1 journal"}


@pytest.mark.parametrize("how", HOW)
def test_damaged_journal_keeps_the_documented_recovery_path(sim, how):
    journal = sim / "root/var/lib/vgpu/journal.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    hostile(journal, how, "journal", text=b'{"schema": "vgpu.journal/v1"', wrong=b"[1, 2]")
    watch = Watch(sim / "root/sys", sim / "root/etc", journal)
    proc = run("provision", "--profile", "mi300x-4vf", "--yes", "--simulate", "--sim-dir", str(sim),
               env=sim_env(sim))
    line = assert_refused(proc, 5, "the journal", str(journal), "is damaged", JOURNAL[how])
    assert "then remove it" in proc.stderr, line  # docs/troubleshooting.md: inspect, then remove
    watch.unchanged()


# --- known_hosts: vgpu validate --known-hosts FILE ----------------------------------------------------------

@pytest.mark.parametrize("how", ["fifo", "dev-zero", "directory", "nul", "over-cap"])
def test_known_hosts_file(tmp_path, how):
    guests = tmp_path / "guests.yaml"
    guests.write_text("version: v1\nguests: [{host: 127.0.0.1, port: 9, expect: {model: MI300X}}]\n")
    known = hostile(tmp_path / "known_hosts", how, "known_hosts", text=b"host ssh-ed25519 AAAA\n")
    watch = Watch(tmp_path)
    proc = run("validate", "--guests", str(guests), "--known-hosts", str(known), "--report-dir",
               str(tmp_path / "reports"), "-q")
    assert_refused(proc, 5, "known_hosts", str(known), {**NEEDLE, "over-cap": "16 MiB"}[how])
    watch.unchanged()


# --- permission and disk errors ----------------------------------------------------------------------------

@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs mounted for the case (skipped where mounting is not allowed); unmounted after."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> None:
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.fixture
def good_report(tmp_path):
    path = tmp_path / "good.json"
    path.write_bytes(report_doc())
    return path


def test_report_dir_on_a_full_disk(tiny_tmpfs, good_report):
    fill(tiny_tmpfs)
    watch = Watch(good_report.parent / "good.json")
    proc = run("report", "--from", str(good_report), "--report-dir", str(tiny_tmpfs / "out"), "-q")
    assert_refused(proc, 5, "report directory", str(tiny_tmpfs / "out"), "no space left")
    watch.unchanged()
    assert not list((tiny_tmpfs / "out").glob(".validation-report*")) if (tiny_tmpfs / "out").exists() else True


@pytest.mark.parametrize("command", ["report", "validate"])
def test_report_dir_on_a_read_only_file_system(tiny_tmpfs, good_report, tmp_path, command):
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True)
    guests = tmp_path / "guests.yaml"
    guests.write_text("version: v1\nguests: [{host: 127.0.0.1, port: 9, expect: {model: MI300X}}]\n")
    args = ["--from", str(good_report)] if command == "report" else ["--guests", str(guests)]
    watch = Watch(tiny_tmpfs, tmp_path / "good.json", guests)
    proc = run(command, *args, "--report-dir", str(tiny_tmpfs / "out"), "-q")
    assert_refused(proc, 5, "report directory", str(tiny_tmpfs / "out"), "read-only or not writable")
    watch.unchanged()


def test_report_dir_not_writable_by_a_normal_user(python_for_nobody, area, good_report):
    locked = area / "locked"
    locked.mkdir(mode=0o755)  # root's, not writable by nobody
    report = good_report  # in the same tmp_path as area
    os.chmod(report, 0o644)
    watch = Watch(area)
    proc = as_nobody(python_for_nobody, "report", "--from", str(report), "--report-dir", str(locked / "out"), "-q",
                     home=str(area / "nobody"))
    assert_refused(proc, 5, "report directory", str(locked / "out"), "not writable")
    watch.unchanged()


def test_host_lock_on_a_full_disk(sim, tmp_path):
    lock_dir = sim / "root/var/lib/vgpu"
    lock_dir.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(lock_dir)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        fill(lock_dir)
        watch = Watch(sim / "root/sys", sim / "root/etc")
        proc = run("provision", "--profile", "mi300x-4vf", "--yes", "--simulate", "--sim-dir", str(sim),
                   env=sim_env(sim))
        assert_refused(proc, 1, "cannot take the host lock", str(lock_dir / "lock"), "no space left")
        watch.unchanged()
    finally:
        subprocess.run(["umount", "-l", str(lock_dir)], check=False)


@pytest.mark.parametrize("how", ["fifo", "dev-zero"])
def test_holder_process_name_in_a_simulated_proc(sim, how):
    root = sim / "root"
    vf = next(d for d in sorted((root / "sys/bus/pci/devices").iterdir()) if (d / "iommu_group").exists())
    group = os.path.basename(os.readlink(vf / "iommu_group"))
    (root / "proc/4242/fd").mkdir(parents=True)
    os.symlink(f"/dev/vfio/{group}", root / "proc/4242/fd/7")
    hostile(root / "proc/4242/comm", how, "proc file")
    watch = Watch(sim / "root/sys", sim / "root/etc", sim / "root/proc")
    proc = run("plan", "--profile", "mi300x-4vf", "--simulate", "--sim-dir", str(sim), env=sim_env(sim))
    assert_refused(proc, 5, "proc file", "4242/comm", NEEDLE[how])
    watch.unchanged()


@pytest.mark.parametrize("how", ["fifo", "dev-zero", "deep", "wrong-shape"])
def test_replay_dir_guest_description(tmp_path, how):
    replay = tmp_path / "replay"
    replay.mkdir()
    hostile(replay / "guest.json", how, "replay file", wrong=b"[1, 2]")
    watch = Watch(tmp_path)
    proc = run("validate", "--simulate", "--guests", "1", "--replay-dir", str(replay), "--report-dir",
               str(tmp_path / "reports"), "-q")
    needle = {**NEEDLE, "deep": "nests deeper than 64", "wrong-shape": "not a simulated guest description"}[how]
    assert_refused(proc, 5, "replay file", "guest.json", needle)
    watch.unchanged()


@pytest.mark.parametrize("how", ["fifo", "over-cap"])
def test_simulated_modprobe_d_file(sim, how):
    hostile(sim / "root/etc/modprobe.d/zz-hostile.conf", how, "config file")
    watch = Watch(sim / "root/sys", sim / "root/etc", sim / "state.json")
    proc = run("provision", "--profile", "mi300x-4vf", "--yes", "--simulate", "--sim-dir", str(sim), env=sim_env(sim))
    assert_refused(proc, 5, "config file", "zz-hostile.conf", {"fifo": "FIFO", "over-cap": "1 MiB"}[how])
    watch.unchanged()
