"""Atomic file writes, shared by config files, reports and simulator state."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def atomic_write(path: Path, data: bytes | str | Iterable[bytes], mode: int = 0o644, *, durable: bool = True) -> None:
    """Temp file beside ``path``, fsync, chmod, os.replace: readers see the old or the new file.
    ``data`` may be an iterable of byte chunks, written as they come (a large report, streamed).
    ``durable=False`` skips the fsync: still atomic for readers and against a killed process, not
    against power loss (the simulator, which only has to survive SIGKILL, writes thousands of files)."""
    import tempfile  # here: read commands import this module but write nothing

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, (bytes, str)):
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            else:
                for chunk in data:
                    fh.write(chunk)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def absolute(path: Path | str) -> Path:
    """``path`` as vgpu writes it into a file another program reads (an inventory, an sshd_config, a playbook's
    variables): absolute, so it names the same file whatever directory that program runs in (sshd, for one,
    works from /). Normalised, not resolved: a symlinked directory stays the one the user named."""
    return Path(os.path.abspath(os.path.expanduser(path)))
