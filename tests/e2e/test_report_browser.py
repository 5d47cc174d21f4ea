"""The HTML reports in a real headless browser (Chromium from Debian): what a person sees, not only what we wrote.

Reports come from the real CLI (`vgpu validate --simulate`, `vgpu report --from`, `vgpu report --compare`).
Chromium loads each page from a file with every network path closed (a dead proxy, no name resolution), then
either prints the DOM after parsing and scripts (`--dump-dom`: the SVG marks, threshold lines, names, pages) or
takes a screenshot (`--screenshot`, decoded here with zlib: the charts are painted). Chromium missing is a skip
with the reason; VGPU_REQUIRE_BROWSER=1 (set by `make test-e2e`) makes it a failure.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

from vgpu.guest.agent.result import AgentResult, CheckResult
from vgpu.guest.report import json as json_report
from vgpu.guest.report.rollup import short
from vgpu.guest.report.model import Expectation, GuestReport, Outcome, ValidationReport

REQUIRE = os.environ.get("VGPU_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BAR_GREY = (0x8C, 0x95, 0x9F)  # rollup.CSS: .bar


# -- the browser ------------------------------------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path):
    if not CHROMIUM:
        why = "chromium is not installed (apt-get install chromium; `make deps-test` installs it)"
        if REQUIRE:
            pytest.fail(f"{why} (VGPU_REQUIRE_BROWSER=1 makes this a failure)")
        pytest.skip(why)
    return Chromium(CHROMIUM, tmp_path / "chromium-profile")


class Chromium:
    def __init__(self, exe: str, profile: Path):
        self.exe, self.profile = exe, profile

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        argv = [self.exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                f"--user-data-dir={self.profile}",
                # no network: any fetch the page tried would fail, so what renders is the file alone
                "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", *args]
        proc = subprocess.run(argv, capture_output=True, timeout=timeout,
                              env=dict(os.environ, HOME=str(self.profile.parent)))
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
        return proc

    def dom(self, page: Path, fragment: str = "") -> "Node":
        out = self._run("--dump-dom", page.resolve().as_uri() + (f"#{fragment}" if fragment else ""))
        return parse_dom(out.stdout.decode())

    def screenshot(self, page: Path, width: int = 1280, height: int = 1000) -> "Image":
        png = self.profile.parent / f"shot-{page.stem}.png"
        self._run(f"--screenshot={png}", f"--window-size={width},{height}", "--hide-scrollbars",
                  page.resolve().as_uri())
        return Image.from_png(png.read_bytes())


# -- a small DOM from Chromium's serialisation ------------------------------------------------------------------


class Node:
    def __init__(self, tag: str, attrs: dict, parent: "Node | None"):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []
        self.texts: list[str] = []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        return "".join(self.texts) + "".join(c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def all(self, tag: str | None = None, cls: str | None = None, **attrs) -> list["Node"]:
        return [n for n in self.iter() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#document", {}, None)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        if tag not in _VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag):
        node = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data):
        # text in order with the children is not needed: a node's own text, then its children's
        self.cur.texts.append(data)


def parse_dom(text: str) -> Node:
    b = _Builder()
    b.feed(text)
    b.close()
    return b.root


# -- a small PNG reader (8-bit RGB/RGBA, not interlaced: what Chromium writes) ---------------------------------


def _unfilter(kind: int, line: bytearray, prev: bytes, ch: int) -> bytearray:
    """Undo one scanline's PNG filter (RFC 2083 section 6). None and Up are whole-row numpy operations; Sub,
    Average and Paeth depend on the pixel to the left and run byte by byte."""
    if kind == 0:
        return line
    if kind == 2:
        return bytearray((np.frombuffer(bytes(line), np.uint8) + np.frombuffer(prev, np.uint8)).tobytes())
    if kind == 1:
        arr = np.frombuffer(bytes(line), np.uint8).reshape(-1, ch).astype(np.uint64)
        return bytearray((np.cumsum(arr, axis=0) % 256).astype(np.uint8).tobytes())
    n = len(line)
    for i in range(n):
        a = line[i - ch] if i >= ch else 0
        b = prev[i]
        if kind == 3:
            line[i] = (line[i] + ((a + b) >> 1)) & 255
        else:
            c = prev[i - ch] if i >= ch else 0
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return line


class Image:
    """A decoded screenshot: ``rgb`` is a numpy array (height, width, 3)."""

    def __init__(self, rgb):
        self.rgb = rgb
        self.height, self.width = rgb.shape[:2]

    @classmethod
    def from_png(cls, data: bytes) -> "Image":
        assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
        pos, idat, head = 8, b"", None
        while pos < len(data):
            length, kind = struct.unpack(">I4s", data[pos:pos + 8])
            body = data[pos + 8:pos + 8 + length]
            if kind == b"IHDR":
                head = struct.unpack(">IIBBBBB", body)
            elif kind == b"IDAT":
                idat += body
            pos += 12 + length
        width, height, depth, color, _, _, interlace = head
        assert depth == 8 and color in (2, 6) and interlace == 0, head
        ch = 3 if color == 2 else 4
        raw, stride = zlib.decompress(idat), width * ch
        rows, prev = [], bytes(stride)
        for y in range(height):
            start = y * (stride + 1)
            prev = bytes(_unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), prev, ch))
            rows.append(prev)
        pixels = np.frombuffer(b"".join(rows), np.uint8).reshape(height, width, ch)
        return cls(pixels[:, :, :3].astype(np.int16))

    def count(self, test, box=None) -> int:
        x0, y0, x1, y1 = box or (0, 0, self.width, self.height)
        return int(test(self.rgb[y0:y1, x0:x1]).sum())

    def bars(self, color=BAR_GREY, run: int = 12, tol: int = 4) -> list[tuple[int, int]]:
        """(x, bottom y) of every column holding a vertical run of at least ``run`` pixels of ``color``: solid
        rectangles (histogram bars), which no glyph of text makes."""
        match = (np.abs(self.rgb - np.array(color, np.int16)) <= tol).all(axis=2)
        found = []
        for x in np.nonzero(match.sum(axis=0) >= run)[0]:
            edges = np.diff(np.concatenate(([0], match[:, x].astype(np.int8), [0])))
            starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
            found += [(int(x), int(e) - 1) for st, e in zip(starts, ends) if e - st >= run]
        return found


def first_strip(shot: Image) -> tuple[int, int, int, int]:
    """The box of the first chart's strip of marks: under its histogram's bars (their common bottom), left of the
    list of names beside the chart."""
    bars = shot.bars()
    assert bars, "no histogram bar was painted"
    bottom = min(y for _, y in bars)
    right = max(x for x, y in bars if y == bottom)
    return (0, bottom + 2, right + 12, bottom + 80)


def green(rgb):
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return (g > r + 40) & (g > b + 25)


def red(rgb):
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return (r > g + 70) & (r > b + 60)


# -- reports ----------------------------------------------------------------------------------------------------


def _guest(name: str, fp8: float, bw: float) -> GuestReport:
    checks = [CheckResult("fp8.hipblaslt", "pass" if fp8 >= 891.1 else "fail", fp8, 891.1, "TFLOPS", "", 0.3),
              CheckResult("hip.bandwidth", "pass" if bw >= 2650.0 else "fail", bw, 2650.0, "GB/s", "", 0.3)]
    return GuestReport(name, f"{name}:22", Outcome.OK, "", 3.0, Expectation("MI300X", "SPX", "NPS1", True),
                       AgentResult("h", "0.1.0", "2026-12-04T00:00:00Z", 3.0, checks))


def _write(report: ValidationReport, path: Path) -> Path:
    path.write_bytes(json_report.render(report))
    return path


def _fleet(n: int) -> ValidationReport:
    rnd = random.Random(12)
    guests = [_guest(f"vm-{i:04d}", round(rnd.gauss(1050, 20) * (0.55 if i % 25 == 7 else 1), 1),
                     round(rnd.gauss(4200, 60) * (0.5 if i % 25 == 7 else 1), 1)) for i in range(n)]
    return ValidationReport("2026-12-04T00:00:00Z", "0.1.0", guests)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """A real `vgpu validate --simulate` of four guests, two of them slow (read only by the tests)."""
    base = tmp_path_factory.mktemp("simulated")
    out = base / "sim"
    run_cli("validate", "--simulate", "--guests", "4", "--scenario", "healthy,slow", "--quiet", "--report-dir",
            str(out), sim_dir=base / "simhost", check_rc=1, timeout=600)
    return out


def _figure(dom: Node, metric: str) -> Node:
    (fig,) = [f for f in dom.all("figure", "metric") if f.attrs.get("data-metric") == metric][:1]
    return fig


# -- tests ------------------------------------------------------------------------------------------------------


def test_validation_report_shows_each_guest_against_the_threshold(browser, simulated):
    page = simulated / "validation-report.html"
    dom = browser.dom(page)
    assert not dom.all("script") and not dom.all("img") and not dom.all("link")
    doc = json.loads((simulated / "validation-report.json").read_text())
    names = {g["name"]: g for g in doc["guests"]}
    slow = sorted(n for n, g in names.items() if g["verdict"] == "fail")
    assert len(names) == 4 and len(slow) == 2
    for metric, threshold in (("fp8.hipblaslt", "1215 TFLOPS"), ("hip.bandwidth", "2650 GB/s")):  # RVS target
        fig = _figure(dom, metric)
        (svg,) = fig.all("svg")
        marks = svg.all("circle", "mark")
        assert len(marks) == 4  # one per guest
        assert sorted(m.text().split(":")[0] for m in marks if "fail" in m.classes) == slow
        (line,) = svg.all("line", "threshold")
        assert line.text() == f"threshold {threshold}"
        # the failing guests' marks lie left of the threshold, the passing ones right of it
        x = float(line.attrs["x1"])
        assert all((float(m.attrs["cx"]) < x) == ("fail" in m.classes) for m in marks)
        named = [a.text() for a in fig.all("ol", "slowest")[0].all("a")]
        assert sorted(named) == slow  # the slowest two of four named, and linked to their rows
        assert all(dom.all(id=f"row-{n}") for n in named)

    shot = browser.screenshot(page, 1100, 640)
    band = first_strip(shot)
    assert shot.count(green, band) >= 60 and shot.count(red, band) >= 60, "guest marks were not painted"


def test_a_report_of_1000_guests_opens_summarised_and_paged(browser, tmp_path):
    src = _write(_fleet(1000), tmp_path / "fleet.json")
    out = tmp_path / "out"
    run_cli("report", "--from", str(src), "--report-dir", str(out), "--quiet", sim_dir=tmp_path, check_rc=1)
    page = out / "validation-report.html"
    size = page.stat().st_size
    assert size < 1_200_000, size  # ~0.6 MB, against ~3 MB of JSON
    dom = browser.dom(page)
    for metric in ("fp8.hipblaslt", "hip.bandwidth"):
        assert len(_figure(dom, metric).all("circle", "mark")) == 1000
    pages = dom.all("details", "page")
    assert len(pages) == 10 and [("open" in p.attrs) for p in pages] == [True] + [False] * 9
    assert sum(len(p.all("tr")) - 1 for p in pages) == 1000
    assert pages[0].all("summary")[0].text() == "guests 1-100 of 1000: 40 failed, 60 passed"
    # a link into a collapsed page (here a passing guest on the last page) opens that page, and only it
    last = pages[-1].all("tr")[-1].attrs["id"]
    moved = browser.dom(page, last).all("details", "page")
    assert [("open" in p.attrs) for p in moved] == [True] + [False] * 8 + [True]

    shot = browser.screenshot(page, 1100, 640)
    band = first_strip(shot)
    assert shot.count(green, band) > 2000 and shot.count(red, band) > 150, "guest marks were not painted"


def test_hostile_guest_names_stay_text_in_the_browser(browser, tmp_path):
    evil = ["<script>document.body.setAttribute('data-pwned','script')</script>",
            "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">",
            "</title></svg><svg onload=\"document.body.setAttribute('data-pwned','svg')\">",
            "\"><a id=pwned href=//evil.example>x</a>"]
    rep = ValidationReport("2026-12-04T00:00:00Z", "0.1.0",
                           [_guest(name, 500.0 + i, 4000.0) for i, name in enumerate(evil)])
    rep.guests[0].detail = "<iframe src=//evil.example></iframe>"
    out = tmp_path / "out"
    run_cli("report", "--from", str(_write(rep, tmp_path / "evil.json")), "--report-dir", str(out), "--quiet",
            sim_dir=tmp_path, check_rc=1)
    dom = browser.dom(out / "validation-report.html")
    (body,) = dom.all("body")
    assert "data-pwned" not in body.attrs  # no guest text ran as a script
    assert not dom.all("script") and not dom.all("img") and not dom.all("iframe") and not dom.all(id="pwned")
    assert len(dom.all("svg")) >= 2 and all(s.attrs.get("onload") is None for s in dom.all("svg"))
    named = [a.text() for a in _figure(dom, "fp8.hipblaslt").all("ol", "slowest")[0].all("a")]
    assert named == [short(n) for n in evil[:2]]  # shown as the text they are, slowest first (half of four)
    assert set(evil) <= {td.text() for td in dom.all("td")}  # and every one whole, as text, in the table


def test_comparison_charts_each_guests_change(browser, simulated, tmp_path):
    current = json.loads((simulated / "validation-report.json").read_text())
    baseline = json.loads(json.dumps(current))
    best = {}
    for g in current["guests"]:
        for c in g["checks"]:
            if c["name"] in ("fp8.hipblaslt", "hip.bandwidth"):
                best[c["name"]] = max(best.get(c["name"], 0.0), c["measured"])
    for g in baseline["guests"]:  # before the change every guest was as fast as the fastest is now
        for c in g["checks"]:
            if c["name"] in best:
                c["measured"], c["status"] = best[c["name"]], "pass"
    base = tmp_path / "base.json"
    base.write_text(json.dumps(baseline))
    out = tmp_path / "cmp"
    run_cli("report", "--compare", str(base), str(simulated), "--report-dir", str(out), "--quiet",
            sim_dir=tmp_path, check_rc=1)
    page = out / "comparison.html"
    dom = browser.dom(page)
    slow = sorted(g["name"] for g in current["guests"] if g["verdict"] == "fail")
    fig = _figure(dom, "fp8.hipblaslt")
    marks = fig.all("circle", "mark")
    assert len(marks) == 4
    assert sorted(m.text().split(":")[0] for m in marks if "regressed" in m.classes) == slow
    (line,) = fig.all("line", "threshold")
    assert line.text() == "threshold -5 %"
    assert sorted(a.text() for a in fig.all("ol", "slowest")[0].all("a")) == slow
    shot = browser.screenshot(page, 1100, 640)
    band = first_strip(shot)
    assert shot.count(red, band) >= 60, "the regressed guests' marks were not painted"
