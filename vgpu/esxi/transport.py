"""Bounds on what vgpu reads from a vSphere endpoint: every HTTP answer is read within a deadline and up
to a size, so that a hostile or broken endpoint can neither hang vgpu nor exhaust its memory.

The socket timeout (vgpu/esxi/connect.py) bounds each read, not an answer that drips one byte at a
time; and pyVmomi reads an answer (even its version discovery's vimServiceVersions.xml) to the end before
parsing it. :class:`BoundedResponse` counts the bytes and the time of each answer and raises
:class:`AnswerRefused` (an OSError: "stopped answering", exit 9) past either bound. It is the
``response_class`` of the connections pyVmomi opens for vgpu: the stub's own connection class, and
http.client's while pyVmomi discovers the API version.
"""

from __future__ import annotations

import contextlib
import http.client
import time

MAX_ANSWER = 64 << 20  # bytes; vgpu's largest read (the host and its VMs, chosen paths) is KiBs to a few MiB


class AnswerRefused(OSError):
    """An answer past its size or its deadline."""


class BoundedResponse(http.client.HTTPResponse):
    deadline_s = 30.0  # set per connection class (connect.timeout())

    def begin(self):
        self._vgpu_until = time.monotonic() + self.deadline_s
        self._vgpu_read = 0
        super().begin()

    def _count(self, n: int) -> None:
        self._vgpu_read += n
        if self._vgpu_read > MAX_ANSWER:
            raise AnswerRefused(f"an answer larger than {MAX_ANSWER >> 20} MiB")
        if time.monotonic() > self._vgpu_until:
            raise AnswerRefused(f"an answer not complete within {self.deadline_s:g} s")

    def read(self, amt=None):
        if amt is None:  # never unbounded: read in pieces, counting
            parts = []
            while chunk := self.read(1 << 16):
                parts.append(chunk)
            return b"".join(parts)
        # as read(amt) (amt bytes unless the answer ends), one receive at a time (read1), so that the bounds are
        # checked between receives: read(amt) itself would wait for all amt bytes, one dripped byte at a time
        out = bytearray()
        while len(out) < amt:
            data = super().read1(amt - len(out))
            if not data:
                break
            self._count(len(data))
            out += data
        if not self.chunked and self.length == 0:
            super().read()  # the end: read() closes the answer (read1 does not), so the connection is reused
        return bytes(out)

    def readinto(self, b):
        n = super().readinto(b)
        self._count(n or 0)
        return n


def bounded(connection_class: type, deadline: float) -> type:
    """``connection_class`` whose answers are bounded (for pyVmomi's stub)."""
    response = type("BoundedResponse", (BoundedResponse,), {"deadline_s": deadline})
    return type(f"Bounded{connection_class.__name__}", (connection_class,), {"response_class": response})


@contextlib.contextmanager
def bounded_discovery(deadline: float):
    """While pyVmomi discovers the API version with plain http.client connections: bound their answers too."""
    response = type("BoundedResponse", (BoundedResponse,), {"deadline_s": deadline})
    old = http.client.HTTPConnection.response_class
    http.client.HTTPConnection.response_class = response  # HTTPSConnection inherits it
    try:
        yield
    finally:
        http.client.HTTPConnection.response_class = old
