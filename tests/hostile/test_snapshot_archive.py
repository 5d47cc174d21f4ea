"""Hostile snapshot archives (issue 8, section 1): `--snapshot FILE` comes from another host, often a
ticket. Each case builds its archive here (a real snapshot of a simulated host plus the hostile members,
so without the checks `plan` would print a normal plan), runs the real command, and checks exit 5, one
error line, that nothing appeared outside the extraction directory (a decoy directory the attacks aim
at, the archive's own directory) and that the temporary directory was cleaned up.

The interpreter here (3.11.7) predates the tarfile fix for CVE-2025-4517, so the symlink-chain cases
fail if vgpu goes back to `extractall(filter="data")`.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest

from .conftest import NOBODY, Watch, as_nobody, assert_refused, special_file, vgpu
from vgpu.host.archive import MAX_MEMBER_SIZE, MAX_MEMBERS, MAX_STREAM, MAX_UNPACKED
from vgpu.inputs import LIMITS

# <TMPDIR>/vgpu-snapshot-XXXX/tree is the extraction root: three levels up is the test's directory
UP = "../../../"


@pytest.fixture(scope="module")
def real_members(tmp_path_factory) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """The members of a real snapshot of a simulated 8xmi300x host."""
    root = tmp_path_factory.mktemp("snap")
    snap = root / "real.tar.gz"
    proc = vgpu("host", "snapshot", "--simulate", "--sim-dir", str(root / "sim"), "-o", str(snap))
    assert proc.returncode == 0, proc.stderr
    out = []
    with tarfile.open(snap) as tar:
        for m in tar.getmembers():
            out.append((m, tar.extractfile(m).read() if m.isfile() else None))
    return out


class Case:
    """A test directory: the archive's folder, a decoy full of precious files, a private TMPDIR."""

    def __init__(self, tmp_path: Path):
        self.dir = tmp_path
        self.inbox = tmp_path / "inbox"
        self.decoy = tmp_path / "decoy"
        self.tmp = tmp_path / "tmp"
        for d in (self.inbox, self.decoy, self.tmp):
            d.mkdir()
        (self.decoy / "precious.txt").write_text("keep me\n")
        (self.decoy / "pwned").write_text("original\n")
        self.watch: Watch | None = None

    def run(self, archive: Path, *command: str) -> subprocess.CompletedProcess:
        """Run with the archive in place; everything under the test directory is hashed first."""
        self.watch = Watch(self.dir)
        args = command or ("discover",)
        return vgpu(*args, "--snapshot", str(archive), env={"TMPDIR": str(self.tmp)}, timeout=600)

    def assert_untouched(self) -> None:
        assert self.watch is not None
        self.watch.unchanged()
        assert not os.listdir(self.tmp), os.listdir(self.tmp)  # the extraction directory is gone


@pytest.fixture
def case(tmp_path):
    return Case(tmp_path)


def info(name: str, kind: bytes = tarfile.REGTYPE, *, size: int = 0, link: str = "", mode: int = 0o644):
    m = tarfile.TarInfo(name)
    m.type, m.size, m.linkname, m.mode = kind, size, link, mode
    return m


def build(path: Path, real, extra, *, before: bool = False, compress: str = "gz",
          fmt: int = tarfile.GNU_FORMAT) -> Path:
    """Write the real members plus ``extra`` ((TarInfo, bytes|None) pairs) as one archive."""
    members = (list(extra) + list(real)) if before else (list(real) + list(extra))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
    raw = buffer.getvalue()
    packed = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress, "none": lambda b: b}[compress](raw)
    path.write_bytes(packed)
    return path


def file_member(name: str, data: bytes = b"pwned\n", mode: int = 0o644):
    return info(name, size=len(data), mode=mode), data


def link_member(name: str, target: str):
    return info(name, tarfile.SYMTYPE, link=target, mode=0o777), None


# --- escapes: names and links that leave the tree --------------------------------------------------------------

def cve_2025_4517_chain(decoy_rel: str, comp_len: int):
    """The published CVE-2025-4517 layout: directories with long names, one-letter links to them, a
    deep link climbing back through the letters, and a link through it to the target."""
    steps = "abcdefghijklmnop"
    comp = "d" * comp_len
    out, path = [], ""
    for letter in steps:
        out.append((info(os.path.join(path, comp), tarfile.DIRTYPE, mode=0o755), None))
        out.append(link_member(os.path.join(path, letter), comp))
        path = os.path.join(path, comp)
    deep = os.path.join("/".join(steps), "l" * 254)
    out.append(link_member(deep, "../" * len(steps)))
    out.append(link_member("escape", deep + "/" + UP + decoy_rel))
    out.append(file_member("escape/pwned"))
    return out


ESCAPES = {
    "absolute-name": [file_member("{decoy}/pwned")],
    "dotdot-name": [file_member(UP + "decoy/pwned")],
    "dotdot-inside-name": [file_member("sys/bus/../../" + UP + "decoy/pwned")],
    "absolute-link-then-file": [link_member("esc", "{decoy}"), file_member("esc/pwned")],
    "relative-link-then-file": [link_member("esc", UP + "decoy"), file_member("esc/pwned")],
    "link-out-alone": [link_member("sys/module/evil", "../../" + UP + "decoy/precious.txt")],
    "link-to-etc-passwd": [link_member("etc/gim_config", "../../../../../../../../../../etc/passwd")],
    "link-via-inner-link": [link_member("up1", ".."), link_member("sys/up2", "../up1/" + UP + "decoy"),
                            file_member("sys/up2/pwned")],
    "dangling-then-climb": [link_member("sys/dang", "missing/../../../" + UP + "decoy")],
    "link-loop": [link_member("sys/loop1", "loop2"), link_member("sys/loop2", "loop1")],
    "dir-replaced-by-link": [(info("sys/zz", tarfile.DIRTYPE, mode=0o755), None), link_member("sys/zz", UP)],
    "file-through-inner-link": [link_member("sysalias", "sys"), file_member("sysalias/bus/pci/x")],
    "backslash-name": [file_member("..\\..\\..\\decoy\\pwned")],
    "link-then-file-same-name": [link_member("sys/x", UP + "decoy/pwned"), file_member("sys/x")],
    "file-then-link-same-name": [file_member("sys/x"), link_member("sys/x", UP + "decoy")],
    "link-then-dir-same-name": [link_member("sys/x", UP + "decoy"),
                                (info("sys/x", tarfile.DIRTYPE, mode=0o755), None), file_member("sys/x/pwned")],
    "dir-link-in-member-path": [link_member("sys/d", "bus"), link_member("sys/d/up", UP + "decoy")],
    "chain-of-links-climbing": [link_member("c1", "."), link_member("c2", "c1/c1/.."), link_member("c3", "c2/c2/.."),
                                link_member("c4", "c3/" + UP + "decoy"), file_member("c4/pwned")],
    "name-too-long": [file_member("sys/" + "a/" * 2100 + "pwned")],
    "cve-2025-4517-chain": "chain247",
    "cve-2025-4517-short-chain": "chain100",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escaping_archive_is_refused_and_writes_nothing_outside(case, real_members, name):
    extra = ESCAPES[name]
    if isinstance(extra, str):
        extra = cve_2025_4517_chain("decoy", int(extra[5:]))
    else:
        extra = [(_fmt(m, case), d) for m, d in extra]
    archive = build(case.inbox / "snap.tar.gz", real_members, extra)
    proc = case.run(archive, "plan", "--profile", "mi300x-4vf")
    assert_refused(proc, 5, "snapshot", str(archive))
    assert proc.stdout == ""  # no plan printed from a hostile archive
    case.assert_untouched()


def _fmt(m: tarfile.TarInfo, case: Case) -> tarfile.TarInfo:
    m.name = m.name.replace("{decoy}", str(case.decoy))
    m.linkname = m.linkname.replace("{decoy}", str(case.decoy))
    return m


# --- member kinds and modes -------------------------------------------------------------------------------------

KINDS = {
    "hardlink-inside": (info("sys/hl", tarfile.LNKTYPE, link="MANIFEST.json"), None, "hard link"),
    "hardlink-outside": (info("sys/hl", tarfile.LNKTYPE, link="/etc/passwd"), None, "hard link"),
    "char-device": (info("sys/null", tarfile.CHRTYPE), None, "a device"),
    "block-device": (info("sys/sda", tarfile.BLKTYPE), None, "a device"),
    "fifo": (info("sys/fifo", tarfile.FIFOTYPE), None, "a FIFO"),
    "setuid-file": (info("sys/suid", size=3, mode=0o4755), b"#!\n", "set-id"),
    "setgid-dir": (info("sys/sgid", tarfile.DIRTYPE, mode=0o2755), None, "set-id"),
    "sticky-dir": (info("sys/sticky", tarfile.DIRTYPE, mode=0o1777), None, "sticky"),
    "gnu-sparse": (info("sys/sparse", tarfile.GNUTYPE_SPARSE), None, "sparse"),
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_member_kinds_other_than_files_dirs_and_inner_links_are_refused(case, real_members, name):
    member, data, needle = KINDS[name]
    archive = build(case.inbox / "snap.tar.gz", real_members, [(member, data)])
    assert_refused(case.run(archive), 5, needle)
    case.assert_untouched()


def test_a_name_given_twice_is_refused(case, real_members):
    archive = build(case.inbox / "snap.tar.gz", real_members,
                    [file_member("sys/twice", b"a"), file_member("sys/twice", b"b")])
    assert_refused(case.run(archive), 5, "twice")
    case.assert_untouched()


def test_a_name_with_a_nul_byte_is_refused(case, real_members):
    """A pax header can carry a NUL inside a name, which the C library would cut short."""
    member, data = file_member("sys/ok")
    member.pax_headers = {"path": "sys/pwned\x00/" + UP + "decoy/pwned"}
    archive = build(case.inbox / "snap.tar.gz", real_members, [(member, data)], fmt=tarfile.PAX_FORMAT)
    assert_refused(case.run(archive), 5, "unusable name")
    case.assert_untouched()


# --- sizes: bombs and caps --------------------------------------------------------------------------------------

def test_member_over_the_size_cap_is_refused_before_it_is_written(case, real_members):
    big = b"\0" * (MAX_MEMBER_SIZE + 1)
    archive = build(case.inbox / "snap.tar.gz", real_members, [file_member("sys/big", big)])
    assert archive.stat().st_size < 100_000  # a bomb: small archive, big member
    assert_refused(case.run(archive), 5, "over the limit", "per member")
    case.assert_untouched()


def test_a_size_in_a_pax_header_is_refused_before_it_is_read(case, real_members):
    """The header says 8 GiB, the archive holds one byte: refused on the header, nothing read on."""
    member, data = file_member("sys/liar", b"x")
    member.pax_headers = {"size": str(8 << 30)}
    archive = build(case.inbox / "snap.tar.gz", real_members, [(member, data)], fmt=tarfile.PAX_FORMAT)
    assert_refused(case.run(archive), 5, "sys/liar", f"limit of {MAX_MEMBER_SIZE >> 20} MiB per member")
    case.assert_untouched()


def test_total_unpacked_size_is_capped(case, real_members):
    chunk = b"\0" * MAX_MEMBER_SIZE
    count = MAX_UNPACKED // MAX_MEMBER_SIZE + 1
    archive = build(case.inbox / "snap.tar.gz", real_members,
                    [file_member(f"sys/fill{i}", chunk) for i in range(count)])
    assert archive.stat().st_size < 1_000_000
    assert_refused(case.run(archive), 5, f"more than {MAX_UNPACKED >> 20} MiB")
    case.assert_untouched()


def test_member_count_is_capped(case):
    extra = [(info(f"d{i}", tarfile.DIRTYPE, mode=0o755), None) for i in range(MAX_MEMBERS + 1)]
    archive = build(case.inbox / "snap.tar", [], extra, compress="none")
    assert_refused(case.run(archive), 5, f"more than {MAX_MEMBERS} members")
    case.assert_untouched()


def test_a_compressed_stream_bomb_stops_at_the_stream_cap(case):
    """A GNU long-name header of 200 MiB (tarfile reads such headers into memory): refused at the
    decompressed-stream cap, long before 200 MiB."""
    size = 200 << 20
    header = info("././@LongLink", tarfile.GNUTYPE_LONGNAME, size=size).tobuf(format=tarfile.GNU_FORMAT)
    path = case.inbox / "bomb.tar.gz"
    with open(path, "wb") as raw:
        comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip container
        raw.write(comp.compress(header))
        block = b"a" * (1 << 20)
        for _ in range(size >> 20):
            raw.write(comp.compress(block))
        raw.write(comp.flush())
    assert path.stat().st_size < 1_000_000
    assert_refused(case.run(path), 5, f"more than {MAX_STREAM >> 20} MiB")
    case.assert_untouched()


def test_an_xz_stream_bomb_stops_at_the_stream_cap(case):
    """A pax extended header of 200 MiB of zeros (tarfile reads it whole), xz-compressed to a few KiB:
    refused when the decompressed stream passes its cap, before tarfile gets the header."""
    size = 200 << 20
    header = info("././@PaxHeader", tarfile.XHDTYPE, size=size).tobuf(format=tarfile.USTAR_FORMAT)
    comp = lzma.LZMACompressor(preset=0)
    path = case.inbox / "bomb.tar.xz"
    with open(path, "wb") as raw:
        raw.write(comp.compress(header))
        block = b"\0" * (4 << 20)
        for _ in range(size // len(block)):
            raw.write(comp.compress(block))
        raw.write(comp.flush())
    assert path.stat().st_size < 1_000_000
    assert_refused(case.run(path), 5, f"more than {MAX_STREAM >> 20} MiB")
    case.assert_untouched()


# --- files that are no archive, or no snapshot -----------------------------------------------------------------

def test_truncated_archive(case, real_members):
    whole = build(case.inbox / "whole.tar", real_members, [], compress="none").read_bytes()
    cut = case.inbox / "cut.tar"
    cut.write_bytes(whole[: len(whole) // 2 + 100])
    assert_refused(case.run(cut), 5, "snapshot", "cut.tar")
    case.assert_untouched()


@pytest.mark.parametrize("content, needle", [
    (b"", "too short"),
    (b"hello, this is not a tar file\n" * 40, "not a readable archive"),
    (gzip.compress(b"just text, gzipped\n", mtime=0), "snapshot"),
    (b"\x1f\x8b" + os.urandom(4000), "not a readable archive"),
    (b"\xfd7zXZ\x00" + os.urandom(100), "not a readable archive"),
])
def test_not_an_archive(case, content, needle):
    path = case.inbox / "snap.tar.gz"
    path.write_bytes(content)
    assert_refused(case.run(path), 5, needle)
    case.assert_untouched()


def test_an_empty_archive_is_not_a_snapshot(case):
    path = case.inbox / "empty.tar.gz"
    build(path, [], [])
    assert tarfile.open(path).getmembers() == []  # a valid, empty archive
    assert_refused(case.run(path), 5, "not a vgpu host snapshot", "MANIFEST")
    case.assert_untouched()


@pytest.mark.parametrize("problem", ["missing", "bad-schema", "not-json", "link-out"])
def test_manifest_problems(case, real_members, problem):
    real = [(m, d) for m, d in real_members if m.name != "MANIFEST.json"]
    extra = {"missing": [],
             "bad-schema": [file_member("MANIFEST.json", b'{"schema": "someone.else/v9"}')],
             "not-json": [file_member("MANIFEST.json", b"\x00\x01binary")],
             "link-out": [link_member("MANIFEST.json", UP + "decoy/precious.txt")]}[problem]
    archive = build(case.inbox / "snap.tar.gz", real, extra)
    assert_refused(case.run(archive), 5, "snapshot" if problem == "link-out" else "MANIFEST")
    case.assert_untouched()


# --- the --snapshot path itself ---------------------------------------------------------------------------------

@pytest.mark.parametrize("how, needle", [
    ("missing", "does not exist"),
    ("fifo", "FIFO"),
    ("dev-zero", "character device"),
    ("dev-zero-itself", "character device"),
    ("directory", "directory"),
    ("over-cap", f"{LIMITS['snapshot'] >> 20} MiB"),
])
def test_snapshot_path_that_is_not_a_regular_file(case, how, needle):
    path = case.inbox / "snap.tar.gz"
    special_file(path, how, LIMITS["snapshot"])
    proc = case.run(Path("/dev/zero") if how == "dev-zero-itself" else path)
    assert_refused(proc, 5, needle)  # 5 (bad input), never click's 2
    case.assert_untouched()


# --- what must keep working -------------------------------------------------------------------------------------

@pytest.mark.parametrize("compress", ["gz", "xz", "bz2", "none"])
def test_a_real_snapshot_opens_in_every_compression(case, real_members, compress):
    archive = build(case.inbox / "snap.tar", real_members, [], compress=compress)
    proc = case.run(archive)
    assert proc.returncode == 0, proc.stderr
    assert "0000:" in proc.stdout
    case.assert_untouched()


def test_inner_links_that_stay_inside_are_kept(case, real_members):
    """Links between parts of the tree are what a sysfs snapshot is made of: they stay."""
    extra = [link_member("sys/module/alias", "../bus/pci"), link_member("sys/chain1", "module/alias"),
             link_member("sys/chain2", "chain1/../module")]
    archive = build(case.inbox / "snap.tar.gz", real_members, extra)
    proc = case.run(archive)
    assert proc.returncode == 0, proc.stderr
    case.assert_untouched()


def test_an_unreadable_snapshot_is_exit_5_not_2(python_for_nobody, area, real_members):
    """chmod 000 stops only a normal user (root reads anything): run as nobody. Exit 5 and one line,
    never click's usage error 2 or a traceback."""
    home = area / "nobody"
    tmp = home / "tmp"
    tmp.mkdir()
    os.chown(tmp, NOBODY, NOBODY)
    snap = build(home / "snap.tar.gz", real_members, [])
    os.chown(snap, NOBODY, NOBODY)
    snap.chmod(0)
    watch = Watch(area)
    proc = as_nobody(python_for_nobody, "discover", "--snapshot", str(snap), home=str(home), TMPDIR=str(tmp))
    assert_refused(proc, 5, str(snap), "permission denied")
    watch.unchanged()
