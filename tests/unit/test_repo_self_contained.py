"""The repository stands on its own (issue #8, section 10): a bare clone has everything its tests, code comments,
profiles and docs refer to. Nothing points beside the repository, every cited `docs/hardware.md §N` exists, and
every upper-case markdown file name mentioned is a file of the repository.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HARDWARE = REPO / "docs" / "hardware.md"
# Built from pieces so that this file does not match itself.
OUTSIDE = re.compile("|".join(re.escape(s) for s in ("../" + "shared", "shared" + "/docs", "shared" + "/fixtures")))
SECTION = "(?:\u00a7|\\\\u00a7)"  # § as written, or as json.dumps(ensure_ascii=True) writes it
CITATION = re.compile(r"docs/hardware\.md,? \(?((?:" + SECTION + r"\d+(?:-\d+)?(?:, | and )?)+)")
UPPER_MD = re.compile(r"(?<![\w/.-])([A-Z][A-Z0-9_-]*\.md)\b")
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".sim", "reports", "build", "dist"}


def _tracked_files() -> list[Path]:
    """Files git tracks or would track (what a clone has); without git (an unpacked sdist), every file under the repo."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(REPO)) for p in REPO.rglob("*")
                 if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(REPO).parts)]
    return [REPO / n for n in names if not n.startswith("tests/fixtures/") and (REPO / n).is_file()
            and not (REPO / n).is_symlink()]


def _texts() -> dict[str, str]:
    texts = {}
    for path in _tracked_files():
        try:
            texts[str(path.relative_to(REPO))] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files cite nothing
    return texts


TEXTS = _texts()


def _sections() -> set[int]:
    return {int(m) for m in re.findall(r"^## (\d+)\. ", HARDWARE.read_text(encoding="utf-8"), re.M)}


def _cited(text: str) -> list[int]:
    numbers = []
    for run in CITATION.findall(text):
        for first, last in re.findall(r"(\d+)(?:-(\d+))?", re.sub(SECTION, " ", run)):
            numbers.extend(range(int(first), int(last or first) + 1))
    return numbers


def test_the_scan_sees_the_repository():
    assert "vgpu/catalog.py" in TEXTS and "README.md" in TEXTS and "docs/hardware.md" in TEXTS
    assert not any(name.startswith("tests/fixtures/") for name in TEXTS)


def test_nothing_refers_beside_the_repository():
    hits = [f"{name}:{i}: {line.strip()}" for name, text in sorted(TEXTS.items())
            for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, "copy what it needs into the repository (tests/fixtures, docs/hardware.md):\n" + "\n".join(hits)


def test_hardware_sections_are_numbered_one_to_n():
    sections = _sections()
    assert sections == set(range(1, len(sections) + 1)) and len(sections) >= 8


def test_every_hardware_citation_names_an_existing_section():
    sections = _sections()
    bad, total = [], 0
    for name, text in TEXTS.items():
        cited = _cited(text)
        if name == "docs/hardware.md":  # cross-references inside the file itself are bare §N
            cited += [int(n) for n in re.findall("\u00a7(\\d+)", text)]
        total += len(cited)
        bad += [f"{name}: §{n}" for n in cited if n not in sections]
        for i, line in enumerate(text.splitlines(), 1):
            if "docs/hardware.md" in line and "hardware.md \u00a7" not in line and "hardware.md (" not in line \
                    and "hardware.md \\u00a7" not in line and not _allowed_bare_mention(name, line):
                bad.append(f"{name}:{i}: cite a section: docs/hardware.md §N ({line.strip()})")
    assert not bad, "\n".join(bad)
    assert total >= 60, "the code, profiles and docs cite docs/hardware.md; the scan found too few citations"


def _allowed_bare_mention(name: str, line: str) -> bool:
    """Places that name the whole file on purpose (the catalog's provenance line, this kind of test, docs indexes)."""
    return name in {"vgpu/catalog.py", "tests/unit/test_repo_self_contained.py", "README.md", "docs/hardware.md",
                    "tests/unit/test_catalog.py"} or "](" in line


def test_citation_parser_reads_each_form():
    assert _cited("docs/hardware.md §3") == [3]
    assert _cited("(docs/hardware.md §3-4)") == [3, 4]
    assert _cited("docs/hardware.md (§2-4, §6, §7)") == [2, 3, 4, 6, 7]
    assert _cited("docs/hardware.md §1 and §8), never") == [1, 8]
    assert _cited('"(docs/hardware.md \\u00a77)."') == [7]
    assert _cited("docs/hardware.md " + "\u00a7" + "99") == [99]  # split: the scan reads this file too


def test_every_upper_case_md_mentioned_exists():
    present = {Path(name).name for name in TEXTS} | {"README.md"}
    missing = {f"{name}: {m}" for name, text in TEXTS.items() for m in UPPER_MD.findall(text) if m not in present}
    assert not missing, "mentioned but not in the repository:\n" + "\n".join(sorted(missing))


def test_license_is_an_spdx_expression():
    """setuptools >= 77 deprecates `license = {text = ...}` and warns on every install; the SPDX string needs 77."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in meta["build-system"]["requires"]
