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


class _Hostile:
    """A local HTTP endpoint whose every answer is hostile: it drips a byte at a time for ever, or is larger
    than vgpu reads (vgpu/esxi/transport.py: 64 MiB)."""

    def __init__(self, how: str):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(1 << 40))
                self.end_headers()
                self.wfile.write(b"<namespaces><namespace><version>")
                chunk = b"8" * (1 << 20) if how == "huge" else b"8"
                stop = threading.Event()
                try:
                    while not stop.wait(0 if how == "huge" else 0.05):  # until vgpu hangs up
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:
                    return
            do_GET = do_POST = answer

            def log_message(self, *args):
                pass
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self.server.server_address[1]

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("how,deadline,says", [("drip", "1", "not complete within 1 s"),
                                               ("huge", "600", "larger than 64 MiB")])
def test_an_answer_that_drips_for_ever_or_never_ends_is_refused(how, deadline, says):
    with _Hostile(how) as port:  # each bound trips for ever-growing answers, whatever the machine's speed
        r = vgpu("discover", "--esxi", f"http://127.0.0.1:{port}", "--insecure",
                 env={"VGPU_ESXI_TIMEOUT": deadline}, timeout=300)
    assert r.returncode == 9, r.stdout + r.stderr[-2000:]
    assert says in r.stderr and "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr[-2000:]
