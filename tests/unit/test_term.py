"""vgpu.cli.term: the markup, wrapping and tables every human output goes through (rich's look, without rich)."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu.cli import term
from vgpu.cli.term import Cell, Console, Table, cell_len, escape, parse, wrap

SGR = re.compile(r"\x1b\[[0-9;]*m")


def plain(markup: str) -> str:
    return "".join(t for t, _ in parse(markup))


# --- markup ---------------------------------------------------------------------------------------------------

def test_markup_styles_nest_and_close():
    assert parse("[yellow]warning:[/] x") == [("warning:", "yellow"), (" x", "")]
    assert parse("[bold][red]a[/red]b[/]c") == [("a", "bold red"), ("b", "bold"), ("c", "")]
    assert parse("a[/]b[/nothing]c") == [("a", ""), ("b", ""), ("c", "")]  # unmatched closings are ignored


def test_text_that_is_not_a_tag_prints_as_written():
    for text in ("list[0]", "a [1] b", "[", "]", "x[]y", "[ space]", "C:\\path\\"):
        assert plain(text) == text


@pytest.mark.parametrize("text", ["[bold red]X[/]", "\\[bold]", "\\", "a\\", "[/]", "[@click]", "[#ff0000]x",
                                  "\\\\[red]y[/]", "[link=http://x]z"])
def test_escape_makes_markup_literal(text):
    assert plain(escape(text)) == text
    assert {style for _, style in parse(escape(text))} <= {""}
    assert plain(escape(text) + "[bold]b[/]") == text + "b"  # a trailing backslash cannot escape what follows


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("[]/\\ab @#=x"), max_size=40))
def test_escaped_text_always_prints_as_written(text):
    assert plain(escape(text)) == text
    assert all(style == "" for _, style in parse(escape(text)))


# --- widths and wrapping --------------------------------------------------------------------------------------

def test_cell_length_counts_terminal_cells():
    assert cell_len("0000:05:00.0") == 12
    assert cell_len("日本") == 4  # wide
    assert cell_len("e\u0301") == 1  # combining accent
    assert cell_len("a\u200db") == 2  # zero-width joiner


def lines_of(text: str, width: int) -> list[str]:
    return [text[a:b] for a, b in wrap(text, width)]


def test_wrap_breaks_at_spaces_and_folds_long_words():
    assert lines_of("reload gim with vf_num=8,8,8,8 (removes every VF)", 16) == [
        "reload gim with", "vf_num=8,8,8,8", "(removes every", "VF)"]
    assert lines_of("0123456789abcdef", 6) == ["012345", "6789ab", "cdef"]
    assert lines_of("  - 0000:05:02.0", 40) == ["  - 0000:05:02.0"]  # indentation kept
    assert lines_of("", 10) == [""]
    assert lines_of("日本語のテキスト", 5) == ["日本", "語の", "テキ", "スト"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab 日é-"), max_size=80), st.integers(min_value=1, max_value=30))
def test_wrapped_lines_fit_and_lose_no_word(text, width):
    lines = lines_of(text, width)
    assert all(cell_len(line) <= width or len(line) == 1 for line in lines)
    assert "".join(text.split()) == "".join("".join(lines).split())


# --- tables ---------------------------------------------------------------------------------------------------

def status_table() -> Table:
    t = Table(title="Status of simulated 8xmi300x against recorded profile mi300x-4vf")
    for name, whole in (("", False), ("subject", True), ("item", False), ("expected", False), ("actual", False)):
        t.add_column(name, no_wrap=whole)
    for n in range(3):
        t.add_row(Cell("ok", "green"), f"0000:0{n}:02.0", "driver", "vfio-pci " * 4, "vfio-pci " * 4)
    return t


def test_a_table_that_fits_keeps_its_natural_widths_in_richs_box():
    t = Table(title="t")
    t.add_column("a")
    t.add_column("bb")
    t.add_row("x", Cell("yyy", "bold"))
    assert t.lines(80) == ["t", "┏━━━┳━━━━━┓", "┃ a ┃ bb  ┃", "┡━━━╇━━━━━┩", "│ x │ yyy │", "└───┴─────┘"]
    assert t.natural_width() == 11


@pytest.mark.parametrize("width", [52, 60, 80, 120])
def test_a_wide_table_shrinks_to_the_width_and_keeps_whole_columns_whole(width):
    lines = status_table().lines(width)
    assert all(cell_len(line) <= width for line in lines), "\n".join(lines)
    body = "\n".join(lines)
    for n in range(3):
        assert f"0000:0{n}:02.0" in body  # never wrapped
    assert body.count("vfio-pci") == 3 * 4 * 2  # nothing cut off
    assert "…" not in body


def test_narrow_columns_keep_their_width_while_the_widest_wrap():
    widths = status_table().widths(60)
    assert widths[0] == 2 and widths[1] == 12 and widths[2] == len("driver")
    assert widths[3] + widths[4] == 60 - 16 - (2 + 12 + 6)


def test_rows_may_be_short_but_not_long():
    t = Table()
    t.add_column("a")
    t.add_column("b")
    t.add_row("only a")
    assert "only a" in "\n".join(t.lines(40))
    with pytest.raises(ValueError):
        t.add_row("1", "2", "3")


def test_styles_and_colours_only_where_asked():
    t = status_table()
    assert not any(SGR.search(line) for line in t.lines(80))
    styled = "\n".join(t.lines(80, styles=True, colour=True))
    assert "\x1b[32mok\x1b[0m" in styled and "\x1b[1msubject\x1b[0m" in styled
    no_colour = "\n".join(t.lines(80, styles=True, colour=False))
    assert "\x1b[32m" not in no_colour and "\x1b[1msubject\x1b[0m" in no_colour
    assert SGR.sub("", styled) == "\n".join(t.lines(80))


def test_a_live_view_draws_the_same_table_through_rich():
    from rich.console import Console as RichConsole

    t = status_table()
    out = RichConsole(file=io.StringIO(), width=70, force_terminal=False)
    out.print(t)
    assert out.file.getvalue().splitlines() == t.lines(70)


# --- the console ----------------------------------------------------------------------------------------------

class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def env(monkeypatch):
    for name in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def printed(env, stream, markup: str, **vars) -> str:
    for name, value in vars.items():
        env.setenv(name, value)
    env.setattr("sys.stdout", stream)
    Console().print(markup)
    return stream.getvalue()


def test_piped_output_has_no_escape_sequences_and_80_columns(env):
    text = printed(env, io.StringIO(), "[bold red]refused[/]: " + "word " * 40)
    assert not SGR.search(text)
    assert max(len(line) for line in text.splitlines()) <= 80 and text.startswith("refused: word")


def test_columns_sets_the_width(env):
    text = printed(env, io.StringIO(), "word " * 40, COLUMNS="30")
    assert max(len(line) for line in text.splitlines()) <= 30
    assert Console().width == 30
    env.setenv("COLUMNS", "junk")
    assert Console().width == 80


def test_a_terminal_gets_styles_no_color_keeps_bold_and_dumb_gets_none(env):
    assert "\x1b[1;31mrefused\x1b[0m" in printed(env, Tty(), "[bold red]refused[/]", TERM="xterm")
    assert "\x1b[1mrefused\x1b[0m" in printed(env, Tty(), "[bold red]refused[/]", TERM="xterm", NO_COLOR="1")
    assert printed(env, Tty(), "[bold red]refused[/]", TERM="dumb") == "refused\n"


def test_force_color_styles_a_pipe(env):
    assert "\x1b[32mok\x1b[0m" in printed(env, io.StringIO(), "[green]ok[/]", FORCE_COLOR="1")


def test_stderr_console_writes_to_stderr(env):
    err = io.StringIO()
    env.setattr("sys.stderr", err)
    env.setattr("sys.stdout", io.StringIO())
    Console(stderr=True).print("warning")
    assert err.getvalue() == "warning\n"


def test_plain_text_is_not_parsed_as_markup(env):
    env.setattr("sys.stdout", io.StringIO())
    Console().print("[bold]x[/]", markup=False)
    assert term.sys.stdout.getvalue() == "[bold]x[/]\n"


def test_piped_into_a_pager_takes_the_width_of_the_terminal_on_stdin(env):
    import os
    import pty
    import struct
    import termios
    import fcntl

    leader, follower = pty.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 132, 0, 0))
        saved = os.dup(0)
        os.dup2(follower, 0)
        try:
            env.setattr("sys.stdout", io.StringIO())
            assert Console().width == 132
        finally:
            os.dup2(saved, 0)
            os.close(saved)
    finally:
        os.close(leader)
        os.close(follower)


def test_a_cell_of_several_lines_stays_inside_its_column():
    t = Table()
    t.add_column("check")
    t.add_column("what to do")
    t.add_row("iommu", "add intel_iommu=on\nthen reboot")
    lines = t.lines(80)
    assert lines[3:5] == ["│ iommu │ add intel_iommu=on │", "│       │ then reboot        │"]
