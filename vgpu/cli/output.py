"""Writing a command's output file (``-o FILE|-``): one place for every ``-o``.

The path was checked by :func:`vgpu.inputs.output_target` before the command did any work (``-``
is stdout; an existing target must be a regular file, never a device, FIFO, directory or link).
Here the bytes go to stdout or, atomically (temp file beside it, fsync, rename), to the file; a
full disk, a read-only file system or a permission error is one line naming the path (exit 5).
Text written to a terminal shows control characters as visible escapes (vgpu.cli.render.safe, line by
line): a VM name or label value from outside cannot drive the terminal of the person reading it. A file or
a pipe gets the bytes exactly (a Prometheus label keeps its value).
"""

from __future__ import annotations

import sys
from pathlib import Path

from vgpu.fsutil import atomic_write
from vgpu.inputs import output_target, write_error


def write_output(target: Path | None, data: bytes, what: str, *, mode: int, text: bool = True) -> None:
    """``data`` to ``target`` (None: standard output). ``text``: it is text (not an archive), to be shown
    safely when standard output is a terminal."""
    if target is None:
        if text and _is_terminal(sys.stdout):
            data = _visible(data)
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


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _visible(data: bytes) -> bytes:
    from vgpu.cli.render import safe
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    return "\n".join(safe(line, markup=False) for line in lines).encode("utf-8")
