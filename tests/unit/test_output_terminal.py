"""vgpu.cli.output.write_output: text for a terminal shows control characters as escapes (a VM name or label
value from outside cannot drive the reader's terminal); a file or a pipe gets the bytes exactly."""

from __future__ import annotations

import io

from vgpu.cli.output import write_output

LINE = 'vgpu_vf_info{vf="0000:05:02.0",vm="evil\x1b]0;owned\x07\u202e"} 1.0\n'.encode()


class Stdout:
    def __init__(self, tty: bool):
        self.buffer = io.BytesIO()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def flush(self) -> None:
        pass


def test_a_terminal_sees_escapes_and_keeps_its_lines(monkeypatch):
    out = Stdout(tty=True)
    monkeypatch.setattr("sys.stdout", out)
    write_output(None, LINE + b"# HELP x y\n", "metrics output", mode=0o644)
    shown = out.buffer.getvalue().decode()
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert 'vm="evil\\x1b]0;owned\\x07\\u202e"' in shown
    assert shown.count("\n") == 2 and shown.endswith("\n")


def test_a_pipe_and_a_file_get_the_bytes_exactly(monkeypatch, tmp_path):
    out = Stdout(tty=False)
    monkeypatch.setattr("sys.stdout", out)
    write_output(None, LINE, "metrics output", mode=0o644)
    assert out.buffer.getvalue() == LINE
    target = tmp_path / "vgpu.prom"
    write_output(target, LINE, "metrics output", mode=0o644)
    assert target.read_bytes() == LINE


def test_an_archive_is_never_rewritten(monkeypatch):
    out = Stdout(tty=True)
    monkeypatch.setattr("sys.stdout", out)
    data = bytes(range(256))
    write_output(None, data, "snapshot output", mode=0o600, text=False)
    assert out.buffer.getvalue() == data
