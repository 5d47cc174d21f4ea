"""Terminal output drawn with the standard library: styled lines and tables for people.

A read command (`status`, `plan`, `discover`, `metrics`, `profiles list`, ...) prints one table and a few lines,
then exits. rich's import and layout engine were a sixth of such a command's start-up (benchmarks/README.md,
"CLI start-up"), so static output is drawn here in one pass, with the look and the rules operators know from rich:

- markup: ``[bold red]text[/]`` (rich's tag syntax; :func:`escape` makes outside text literal, as rich's does);
- tables in rich's default box (heavy header), the title above, a caption below;
- every line fits the terminal: text wraps at spaces, words longer than a line fold, table columns shrink
  widest-first and wrap; columns marked ``no_wrap`` (PCI addresses) never shrink;
- the width is ``$COLUMNS``, else the terminal's (of the output, else of standard input or error: piped into
  ``less``), else 80 (no terminal at all: files, CI);
- styles only on a terminal (or with ``FORCE_COLOR``), none with ``TERM=dumb``, no colours with ``NO_COLOR``.

rich stays for what only it does, redrawing in place (live views, progress bars): a :class:`Table` from here is
also a rich renderable (``__rich_console__``), so a live view shows the same table.
"""

from __future__ import annotations

import os
import re
import sys

# rich's markup tag: a "[" starting with a letter, "#", "/" or "@", up to the first "]"; backslashes before it
# escape it when odd in number (then half of them print).
_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")
_ESCAPE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")

_SGR = {"bold": "1", "dim": "2", "italic": "3", "underline": "4", "reverse": "7", "strike": "9",
        "black": "30", "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35", "cyan": "36",
        "white": "37"}
_COLOURS = frozenset(("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"))

Spans = list[tuple[str, str]]  # (text, style) pieces of one logical line or cell


def escape(text: str) -> str:
    """``text`` with every markup-like ``[...]`` escaped, so that printing it as markup shows it as written.
    Backslashes that end it are doubled, so that they cannot escape a tag that follows (before a tag, or at
    the end of what is printed, a doubled run prints once)."""
    text = _ESCAPE.sub(r"\1\1\\\2", text)
    trailing = len(text) - len(text.rstrip("\\"))
    return text + "\\" * trailing


def parse(markup: str) -> Spans:
    """Markup to (text, style) spans. Closing tags: ``[/]`` ends the innermost style, ``[/name]`` the innermost
    ``name``; an unmatched one is ignored. Style words vgpu does not know are kept and draw nothing."""
    spans: Spans = []
    stack: list[str] = []
    pos = 0
    for m in _TAG.finditer(markup):
        if m.start() > pos:
            spans.append((markup[pos:m.start()], " ".join(stack)))
        pos = m.end()
        backslashes, escaped = divmod(len(m.group(1)), 2)
        literal = "\\" * backslashes + (f"[{m.group(2)}]" if escaped else "")
        if literal:
            spans.append((literal, " ".join(stack)))
        if escaped:
            continue
        tag = m.group(2).strip()
        if not tag.startswith("/"):
            stack.append(tag)
        elif tag == "/":
            if stack:
                stack.pop()
        elif tag[1:].strip() in stack:
            del stack[len(stack) - 1 - stack[::-1].index(tag[1:].strip())]
    if pos < len(markup):
        tail = markup[pos:]
        trailing = len(tail) - len(tail.rstrip("\\"))
        spans.append((tail[:len(tail) - trailing] + "\\" * ((trailing + 1) // 2), " ".join(stack)))
    return spans


def cell_len(text: str) -> int:
    """Terminal cells ``text`` takes: East Asian wide and full-width characters 2, combining marks and
    format characters 0, everything else 1."""
    if text.isascii():
        return len(text)
    return sum(_char_width(c) for c in text)


def _char_width(char: str) -> int:
    if char.isascii():
        return 1
    import unicodedata
    if unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _fold(text: str, start: int, end: int, width: int) -> list[tuple[int, int]]:
    """``text[start:end]`` (no spaces) cut into pieces of at most ``width`` cells (a wide character that does
    not fit a 1-cell width still takes a piece of its own)."""
    pieces, begin, used = [], start, 0
    for i in range(start, end):
        w = _char_width(text[i])
        if used + w > width and i > begin:
            pieces.append((begin, i))
            begin, used = i, 0
        used += w
    pieces.append((begin, end))
    return pieces


def wrap(text: str, width: int) -> list[tuple[int, int]]:
    """Where to cut ``text`` (one line, no newline) into lines of at most ``width`` cells: (start, end) index
    pairs. Breaks at spaces (the spaces at a break are dropped; leading indentation is kept); a word wider than
    the line folds."""
    width = max(1, width)
    if cell_len(text) <= width:
        return [(0, len(text))]
    lines: list[tuple[int, int]] = []
    begin, end, used = 0, 0, 0  # the line being filled: text[begin:end], `used` cells
    for m in re.finditer(r" *[^ ]+| +$", text):
        token_width = cell_len(m.group())
        if used + token_width <= width:
            end, used = m.end(), used + token_width
            continue
        word_start = m.start() + len(m.group()) - len(m.group().lstrip(" "))
        if word_start == m.end():  # trailing spaces past the edge
            break
        if end > begin:
            lines.append((begin, end))
        pieces = _fold(text, word_start, m.end(), width)
        lines.extend(pieces[:-1])
        begin, end = pieces[-1]
        used = cell_len(text[begin:end])
    if end > begin or not lines:
        lines.append((begin, end))
    return lines


def _slice(spans: Spans, start: int, end: int) -> Spans:
    """The spans covering characters ``start:end`` of their joined text."""
    out: Spans = []
    pos = 0
    for text, style in spans:
        a, b = max(start, pos), min(end, pos + len(text))
        if a < b:
            out.append((text[a - pos:b - pos], style))
        pos += len(text)
        if pos >= end:
            break
    return out


def wrap_spans(spans: Spans, width: int) -> list[Spans]:
    """Styled text (newlines allowed) as styled lines of at most ``width`` cells."""
    plain = "".join(t for t, _ in spans)
    lines: list[Spans] = []
    offset = 0
    for line in plain.split("\n"):
        for a, b in wrap(line, width):
            lines.append(_slice(spans, offset + a, offset + b))
        offset += len(line) + 1
    return lines


def _sgr(style: str, colour: bool) -> str:
    codes = [_SGR[w] for w in style.split() if w in _SGR and (colour or w not in _COLOURS)]
    return ";".join(codes)


def draw(spans: Spans, styles: bool, colour: bool) -> str:
    """Spans as text, with SGR sequences around styled pieces when ``styles``."""
    if not styles:
        return "".join(t for t, _ in spans)
    out = []
    for text, style in spans:
        code = _sgr(style, colour) if style else ""
        out.append(f"\x1b[{code}m{text}\x1b[0m" if code and text else text)
    return "".join(out)


class Cell:
    """A table cell: plain text (never markup) and a style."""

    __slots__ = ("text", "style")

    def __init__(self, text: str, style: str = ""):
        self.text = text
        self.style = style or ""

    def __str__(self) -> str:
        return self.text


class Table:
    """A table in rich's default box: heavy header, light body. Cells are :class:`Cell` or plain text."""

    def __init__(self, title: str | None = None, caption: str | None = None):
        self.title = title
        self.caption = caption
        self.columns: list[str] = []
        self.no_wrap: list[bool] = []
        self.rows: list[tuple[list[Cell], str]] = []

    def add_column(self, name: str, no_wrap: bool = False) -> None:
        self.columns.append(name)
        self.no_wrap.append(no_wrap)

    def add_row(self, *cells, style: str | None = None) -> None:
        if len(cells) > len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        row = [c if isinstance(c, Cell) else Cell(str(c)) for c in cells]
        row += [Cell("") for _ in range(len(self.columns) - len(row))]
        self.rows.append((row, style or ""))

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def _natural(self) -> list[int]:
        widths = [max(1, cell_len(name)) for name in self.columns]
        for row, _ in self.rows:
            for i, c in enumerate(row):
                widths[i] = max(widths[i], *(cell_len(line) for line in c.text.split("\n")))
        return widths

    def natural_width(self) -> int:
        """The width the table takes when nothing limits it."""
        return sum(self._natural()) + 3 * len(self.columns) + 1

    def widths(self, width: int) -> list[int]:
        """Column widths for a ``width``-cell line: natural when they fit; otherwise the wrapping columns shrink,
        widest first (a column narrower than the others' share keeps its width), never below one cell."""
        natural = self._natural()
        room = width - 3 * len(self.columns) - 1
        if sum(natural) <= room:
            return natural
        flex = [i for i in range(len(natural)) if not self.no_wrap[i]]
        room -= sum(w for i, w in enumerate(natural) if self.no_wrap[i])
        if not flex or room <= len(flex):
            return [natural[i] if self.no_wrap[i] else 1 for i in range(len(natural))]
        cap, left = 0, room
        ordered = sorted(natural[i] for i in flex)
        for n, w in enumerate(ordered):
            share = left // (len(ordered) - n)
            if w > share:
                cap = share
                break
            left -= w
        out = [min(w, cap) if i in flex else w for i, w in enumerate(natural)]
        spare = room - sum(out[i] for i in flex)
        for i in sorted(flex, key=lambda i: -natural[i]):  # what rounding left over, to the widest columns
            if spare <= 0:
                break
            if out[i] < natural[i]:
                out[i] += 1
                spare -= 1
        return out

    def lines(self, width: int, styles: bool = False, colour: bool = False) -> list[str]:
        """The table drawn for a ``width``-cell terminal, one string per line."""
        widths = self.widths(width)
        total = sum(widths) + 3 * len(widths) + 1
        out = []
        if self.title:
            out += [draw(line, styles, colour) for line in wrap_spans([(self.title, "italic")], max(total, 1))]
        out.append("┏" + "┳".join("━" * (w + 2) for w in widths) + "┓")
        out += self._row([Cell(name, "bold") for name in self.columns], "", widths, "┃", styles, colour)
        out.append("┡" + "╇".join("━" * (w + 2) for w in widths) + "┩")
        for row, style in self.rows:
            out += self._row(row, style, widths, "│", styles, colour)
        out.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
        if self.caption:
            out += [draw(line, styles, colour) for line in wrap_spans([(self.caption, "dim italic")], max(total, 1))]
        return out

    @staticmethod
    def _row(cells: list[Cell], row_style: str, widths: list[int], bar: str, styles: bool,
             colour: bool) -> list[str]:
        wrapped = []
        for c, w in zip(cells, widths):
            style = f"{row_style} {c.style}".strip()
            wrapped.append([(line[a:b], style) for line in c.text.split("\n") for a, b in wrap(line, w)])
        height = max(len(w) for w in wrapped)
        lines = []
        for n in range(height):
            parts = []
            for pieces, w in zip(wrapped, widths):
                text, style = pieces[n] if n < len(pieces) else ("", "")
                parts.append(draw([(text, style)], styles, colour) + " " * (w - cell_len(text)))
            lines.append(f"{bar} " + f" {bar} ".join(parts) + f" {bar}")
        return lines

    def __rich_console__(self, console, options):  # a live view (rich) shows the same table
        from rich.text import Text
        styles = console.is_terminal and not console.is_dumb_terminal
        yield Text.from_ansi("\n".join(self.lines(options.max_width, styles, not console.no_color)))


class Console:
    """Where styled lines and tables go: standard output, or standard error with ``stderr``."""

    def __init__(self, stderr: bool = False):
        self.stderr = stderr
        self._width: int | None = None

    @property
    def file(self):
        return sys.stderr if self.stderr else sys.stdout  # looked up at each print: tests swap the streams

    @property
    def is_terminal(self) -> bool:
        if os.environ.get("FORCE_COLOR"):
            return True
        try:
            return self.file.isatty()
        except (AttributeError, ValueError):
            return False

    @property
    def width(self) -> int:
        if self._width is not None:
            return self._width
        columns = os.environ.get("COLUMNS", "")
        if columns.isascii() and columns.isdigit() and 0 < int(columns) < 100_000:
            return int(columns)
        try:
            streams = [self.file.fileno()]
        except (AttributeError, ValueError, OSError):
            streams = []
        for fd in (*streams, 0, 1, 2):  # piped into less or grep: the terminal the operator reads it on
            try:
                return os.get_terminal_size(fd).columns or 80
            except (ValueError, OSError):
                continue
        return 80

    @width.setter
    def width(self, value: int) -> None:
        self._width = value

    def _styles(self) -> tuple[bool, bool]:
        styles = self.is_terminal and os.environ.get("TERM", "") not in ("dumb", "unknown")
        return styles, styles and not os.environ.get("NO_COLOR")

    def print(self, what, *, markup: bool = True, highlight: bool | None = None) -> None:  # noqa: ARG002
        """A :class:`Table`, or a line of markup (of plain text with ``markup=False``), wrapped to the width.
        ``highlight`` is accepted for rich's signature; nothing is highlighted."""
        styles, colour = self._styles()
        width = self.width
        if isinstance(what, Table):
            lines = what.lines(width, styles, colour)
        else:
            text = str(what)
            spans = parse(text) if markup else [(text, "")]
            lines = [draw(line, styles, colour) for line in wrap_spans(spans, width)]
        self.file.write("\n".join(lines) + "\n")
        self.file.flush()
