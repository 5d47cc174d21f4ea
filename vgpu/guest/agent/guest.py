"""The guest as the agent sees it: a root directory, a PATH, and tool runs that never hang.

Every path the agent reads (/sys, /opt/rocm) goes through ``Guest.path`` so that a simulated guest
(``VGPU_AGENT_ROOT``, vgpu.sim.guests) is read by exactly the production code. Tools are found on
PATH, then in <root>/opt/rocm/bin; they run from argument lists (never a shell), in their own
process group, and the whole group is killed at the timeout.
Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT_ENV = "VGPU_AGENT_ROOT"
TORCH_PYTHON_ENV = "VGPU_AGENT_TORCH_PYTHON"
OUTPUT_LIMIT = 4 * 1024 * 1024  # a tool printing more than this is not one we understand


@dataclass
class Run:
    """The outcome of one tool run. ``missing``: the tool was not found; ``timed_out``: killed."""

    argv: List[str]
    rc: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    missing: bool = False
    timed_out: bool = False
    os_error: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not (self.missing or self.timed_out or self.os_error)

    def why(self) -> str:
        """One line saying why the run failed ("" when it did not)."""
        cmd = " ".join(self.argv)
        if self.missing:
            return "%s not found on PATH or in /opt/rocm/bin" % self.argv[0]
        if self.timed_out:
            return "%s timed out after %.0f s and was killed" % (cmd, self.seconds)
        if self.os_error:
            return "%s could not start: %s" % (cmd, self.os_error)
        if self.rc != 0:
            tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-1:] or [""]
            return "%s exited with %s: %s" % (cmd, self.rc, tail[0][:200])
        return ""


class Guest:
    """Paths and tools of the machine under test."""

    def __init__(self, root: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.root = Path(root or self.env.get(ROOT_ENV) or "/")

    def path(self, absolute: str) -> Path:
        """The guest path ``absolute`` ("/sys/bus/pci/devices") under the agent root."""
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> Optional[str]:
        """The stripped text of a guest file, or None when it cannot be read."""
        try:
            return self.path(absolute).read_text(errors="replace").strip()
        except OSError:
            return None

    def which(self, tool: str) -> Optional[str]:
        search = os.pathsep.join(p for p in (self.env.get("PATH", ""), str(self.path("/opt/rocm/bin"))) if p)
        return shutil.which(tool, path=search)

    def run(self, argv: Sequence[str], timeout: float, cwd: Optional[str] = None,
            extra_env: Optional[Dict[str, str]] = None) -> Run:
        """Run ``argv`` (argv[0] resolved with ``which``) and capture its output; never raises."""
        argv = [str(a) for a in argv]
        exe = argv[0] if os.sep in argv[0] else self.which(argv[0])
        if exe is None:
            return Run(argv, missing=True)
        env = dict(self.env)
        env.update(extra_env or {})
        start = time.monotonic()
        try:
            proc = subprocess.Popen([exe] + argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, cwd=cwd, env=env, start_new_session=True)
        except OSError as exc:
            return Run(argv, os_error=exc.strerror or str(exc))
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a grandchild left its own session holding the pipes
                out, err = b"", b""
            return Run(argv, proc.returncode, _text(out), _text(err), time.monotonic() - start, timed_out=True)
        return Run(argv, proc.returncode, _text(out), _text(err), time.monotonic() - start)


def _kill_group(proc: "subprocess.Popen") -> None:
    # The tool may have children (hipcc runs clang): kill the whole session it leads.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def _text(data: Optional[bytes]) -> str:
    return (data or b"")[:OUTPUT_LIMIT].decode("utf-8", errors="replace")
