"""Hostile inputs: each case builds its input, runs the real CLI, and checks the exit code, the one
error line, and that nothing outside the target changed (trees hashed before and after)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def tree_digest(root: Path) -> dict[str, str]:
    """path -> kind and content hash (or link target / mode) of everything below ``root``, without
    following symlinks and without opening FIFOs or devices. Equal digests: nothing changed."""
    root = Path(root)
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    todo = [root]
    while todo:
        path = todo.pop()
        st = os.lstat(path)
        rel = os.path.relpath(path, root)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = f"link {os.readlink(path)}"
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = f"dir {mode:o}"
            todo.extend(Path(path) / n for n in os.listdir(path))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = f"file {mode:o} {hashlib.sha256(Path(path).read_bytes()).hexdigest()}"
        else:
            out[rel] = f"special {st.st_mode:o} {st.st_rdev}"
    return out


class Watch:
    """Hash a set of trees now; ``unchanged()`` asserts they are identical later."""

    def __init__(self, *roots: Path):
        self.roots = [Path(r) for r in roots]
        self.before = [tree_digest(r) for r in self.roots]

    def unchanged(self) -> None:
        for root, before in zip(self.roots, self.before):
            after = tree_digest(root)
            if after != before:
                added = sorted(set(after) - set(before))[:10]
                removed = sorted(set(before) - set(after))[:10]
                changed = sorted(k for k in set(after) & set(before) if after[k] != before[k])[:10]
                pytest.fail(f"{root} changed: added {added} removed {removed} changed {changed}")


def vgpu(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 60,
         input: str | None = None) -> subprocess.CompletedProcess:
    """The real ``vgpu`` entry point in its own process, as an operator runs it."""
    base = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", COLUMNS="200")
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "vgpu", *args], capture_output=True, text=True,
                          env=base, cwd=cwd or REPO, timeout=timeout, input=input)


def assert_refused(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """Exit ``code``, an ``error:`` line on stderr containing each needle, no traceback."""
    err = proc.stderr
    assert proc.returncode == code, (proc.returncode, proc.stdout[-1500:], err[-1500:])
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle.lower() in lines[0].lower(), (needle, lines[0])
    return lines[0]


@pytest.fixture
def watch():
    return Watch
