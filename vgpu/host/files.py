"""Config files under a configurable /etc, written atomically with sane permissions."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from vgpu.errors import HostError, InputError
from vgpu.fsutil import atomic_write
from vgpu.inputs import InputFileError, read_text


class FileStore:
    """Reads and writes files below ``root`` (the host's /etc, or a simulated one)."""

    def __init__(self, root: Path | None):
        """``root`` None: a host whose config is unknown (a bare sysfs capture): every file reads as
        absent and writing is refused."""
        self.root = Path(root) if root is not None else None

    def path(self, rel: str) -> Path:
        if self.root is None:
            raise InputError("this capture has no etc/ directory, so its config files cannot be written")
        target = (self.root / rel)
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise InputError(f"refusing a config path outside {self.root}: {rel!r}")
        return target

    def read(self, rel: str) -> str | None:
        """The file's text; for a symlink, its target; None when absent.

        Read through vgpu.inputs: a file that is not a regular file, is over the cap, or is not
        UTF-8 text is an InputError naming it (plan would otherwise compare or rewrite garbage);
        one that cannot be read (permission, I/O) is a HostError."""
        if self.root is None:
            return None
        path = self.path(rel)
        if path.is_symlink():
            return os.readlink(path)
        try:
            return read_text(path, "config file")
        except InputFileError as exc:
            if exc.errno == errno.ENOENT:
                return None
            if exc.errno is not None:
                raise HostError(str(exc)) from None
            exc.hint = "repair or remove it: vgpu reads its config files as UTF-8 text"
            raise

    def write(self, rel: str, content: str | None, mode: int = 0o644) -> None:
        """Replace the file atomically (temp file + fsync + rename); ``None`` removes it."""
        path = self.path(rel)
        if content is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        try:
            atomic_write(path, content, mode)
        except OSError as exc:
            raise HostError(f"cannot write {path}: {exc.strerror}") from exc

    def symlink(self, rel: str, target: str | None) -> None:
        """Point ``rel`` at ``target`` atomically (as `systemctl enable` does); None removes it."""
        path = self.path(rel)
        if target is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(target, tmp)
        os.replace(tmp, path)
