"""Writing a command's output file (``-o FILE|-``): one place for every ``-o``.

The path was checked by :func:`vgpu.inputs.output_target` before the command did any work (``-``
is stdout; an existing target must be a regular file, never a device, FIFO, directory or link).
Here the bytes go to stdout or, atomically (temp file beside it, fsync, rename), to the file; a
full disk, a read-only file system or a permission error is one line naming the path (exit 5).
"""

from __future__ import annotations

import sys
from pathlib import Path

from vgpu.fsutil import atomic_write
from vgpu.inputs import output_target, write_error


def write_output(target: Path | None, data: bytes, what: str, *, mode: int) -> None:
    if target is None:
        try:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except OSError as exc:
            raise write_error(exc, what, "(standard output)") from None
        return
    output_target(target, what)  # again, just before the rename: it may have changed meanwhile
    try:
        atomic_write(target, data, mode)
    except OSError as exc:
        raise write_error(exc, what, target) from None
