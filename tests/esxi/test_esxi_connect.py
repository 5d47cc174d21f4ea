"""--esxi URL, thumbprint and deadline handling (issue 25, items 16 and 17): one line, a documented exit
code, never a traceback and never a hang."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from conftest import REPO

THUMB = ":".join(["AB"] * 32)


def vgpu(*args, env: dict | None = None, timeout: float = 60):
    base = {k: v for k, v in os.environ.items() if not k.startswith("VGPU_")}
    base.update(VGPU_ESXI_PASSWORD="pw", VGPU_STATE_DIR="/nonexistent/vgpu-state", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "vgpu", *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})})


@pytest.mark.parametrize("url,says", [
    ("https://[x:1", "not a URL"),
    ("https://esxi01:0", "the port is not a number from 1 to 65535"),
    ("https://esxi01:70000", "not a URL"),
    ("https://esxi01:https", "not a URL"),
])
def test_bad_urls_are_one_line_exit_5(url, says):
    r = vgpu("discover", "--esxi", url, "--insecure")
    assert r.returncode == 5, r.stderr
    assert r.stderr.startswith("error: ") and says in r.stderr and "Traceback" not in r.stderr


def test_a_thumbprint_with_a_trailing_newline_is_refused_as_malformed():
    r = vgpu("discover", "--esxi", "https://127.0.0.1:9", "--esxi-thumbprint", THUMB + "\n")
    assert r.returncode == 5 and "32 hex pairs" in r.stderr, r.stderr


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_an_endpoint_that_accepts_and_never_answers_is_exit_9_after_the_deadline(scheme):
    with socket.socket() as silent:  # the kernel completes the TCP handshake (backlog); nobody ever reads
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        r = vgpu("discover", "--esxi", f"{scheme}://127.0.0.1:{port}", "--insecure",
                 env={"VGPU_ESXI_TIMEOUT": "0.5"})
    assert r.returncode == 9, r.stdout + r.stderr
    assert "127.0.0.1" in r.stderr and "no answer within 0.5 s" in r.stderr and "Traceback" not in r.stderr


def test_a_bad_timeout_setting_is_exit_5():
    r = vgpu("discover", "--esxi", "https://127.0.0.1:9", "--insecure", env={"VGPU_ESXI_TIMEOUT": "soon"})
    assert r.returncode == 5 and "VGPU_ESXI_TIMEOUT" in r.stderr, r.stderr
