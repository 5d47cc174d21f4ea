"""Config files under a configurable /etc, written atomically with sane permissions."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from vgpu.errors import HostError, InputError
from vgpu.fsutil import atomic_write
from vgpu.inputs import InputFileError, read_text


_WHY = {errno.EROFS: "it is on a read-only file system",
        errno.EPERM: "operation not permitted (an immutable file or directory? see `lsattr`)",
        errno.EACCES: "permission denied"}


def _cannot_write(path: Path, err: int | None, strerror: str | None, blocker: Path | None = None) -> HostError:
    why = _WHY.get(err or 0, strerror or "unknown error")
    if blocker is not None and blocker != path:
        return HostError(f"cannot write {path}: its directory {blocker}: {why}")
    return HostError(f"cannot write {path}: {why}")


def _existing_parent(path: Path) -> Path:
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    return parent


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


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
            raise _cannot_write(path, exc.errno, exc.strerror) from exc

    def check_writable(self, rel: str) -> None:
        """Before a write changes anything: HostError naming the file when it, or the directory it
        goes in, cannot be written (read-only file system, immutable (chattr +i), permission). The
        kernel's access check sees these for root too, so an unwritable /etc is one line naming the
        path, not a half-applied run whose rollback fails on the same file."""
        path = self.path(rel)
        where = path if os.path.lexists(path) else _existing_parent(path)
        for target in (where, where.parent) if where == path else (where,):
            if not os.access(target, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
                err = errno.EROFS if _read_only_fs(target) else errno.EPERM if os.geteuid() == 0 else errno.EACCES
                raise _cannot_write(path, err, os.strerror(err), blocker=target)

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

    def missing_dirs(self, rel: str) -> list[str]:
        """The directories writing ``rel`` would create (shallowest first), for its undo to remove."""
        if self.root is None:
            return []
        parents = [p for p in Path(rel).parents if p != Path(".")]
        return [str(p) for p in reversed(parents) if not os.path.lexists(self.path(str(p)))]

    def remove_dirs(self, rels: list[str]) -> None:
        """Remove the directories a write created (deepest first), each only while it is empty, so a
        rolled-back run leaves no empty /etc/vgpu or /etc/systemd/system/... behind."""
        for rel in sorted(set(rels), key=lambda r: len(Path(r).parts), reverse=True):
            with contextlib.suppress(OSError):  # not empty (someone else's file), or already gone
                self.path(rel).rmdir()
