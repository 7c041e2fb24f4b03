"""The incident page in a real browser: headless Chromium loads it, draws it, and its DOM has the charts.

Skips, saying why, when no Chromium is installed (``apt-get install -y chromium``;
CI installs it in ``.ci/run``).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

from tests.support.report_page import page

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless Chromium installed (apt-get install -y chromium): the page is not checked in a browser")


def run(argv: list[str], home: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=home)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def flags(home: str) -> list[str]:
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={home}/profile",
        "--window-size=1200,1800",
    ]


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows of an 8-bit RGB/RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert ihdr is not None, "no IHDR chunk"
    w, h, depth, colour = ihdr[0], ihdr[1], ihdr[2], ihdr[3]
    assert depth == 8 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return w, h, rows


@pytest.fixture(scope="module")
def rendered():
    exe = browser()
    with tempfile.TemporaryDirectory() as home:
        html = Path(home) / "report.html"
        html.write_text(page())
        shot = Path(home) / "shot.png"
        r1 = run([exe, *flags(home), f"--screenshot={shot}", html.as_uri()], home)
        r2 = run([exe, *flags(home), "--dump-dom", html.as_uri()], home)
        yield (shot.read_bytes() if shot.exists() else b""), r2.stdout, (r1, r2)


def test_chromium_draws_the_page(rendered):
    png, _dom, (r1, _r2) = rendered
    assert png, f"no screenshot: {r1.stderr[-500:]}"
    w, h, rows = png_pixels(png)
    colours = {row[i : i + 3] for row in rows[::8] for i in range(0, len(row), 3 * 8)}
    dark = sum(1 for row in rows[::4] for i in range(0, len(row), 12) if sum(row[i : i + 3]) < 200)
    assert (w, h) == (1200, 1800)
    assert len(colours) > 20 and dark > 200  # text, chart lines and the verdict box, not a blank page


def test_the_loaded_dom_has_the_charts_and_the_verdict(rendered):
    _png, dom, (_r1, r2) = rendered
    assert "<svg" in dom, r2.stderr[-500:]
    assert dom.count('class="chart"') >= 6
    assert 'id="chart-thread_cpu"' in dom and 'id="diagnosis"' in dom and 'id="flame"' in dom
    assert "<polyline" in dom
