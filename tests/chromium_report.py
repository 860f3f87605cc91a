"""report.html as a browser shows it: Debian's headless ``chromium`` renders the page to a PNG (kept beside the
report, an artefact to look at) and dumps the DOM it built; the PNG is read back with the standard library (zlib),
so the colours of the nodes x layers rows are asserted from the pixels themselves.

Used by tests/unit/test_html_report_chromium.py (a fleet built by the report code) and by
tests/lab/test_lab_installed_wheel.py (a lab run with one faulted node)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

# report.html's cell backgrounds (html_report.CSS: .fail, .pass, .skip), as chromium paints them
COLOURS = {"fail": (0xF8, 0xD0, 0xD0), "pass": (0xD9, 0xF2, 0xDC), "skip": (0xF4, 0xEE, 0xC9)}
WINDOW = (1200, 900)


def chromium() -> str:
    """The chromium binary, or skip the test saying how to get it (CI installs it: .ci/run)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip(
            "headless chromium not found: apt-get install chromium (Debian's package; .ci/run installs it)"
        )
    return found


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # a profile of its own per call: two chromium runs never share (or lock) one
    return subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def screenshot(page: Path, png: Path, window: tuple[int, int] = WINDOW) -> Path:
    """``chromium --headless --screenshot`` of the page, as a file:// URL (no server, no network)."""
    profile = png.parent / f".chromium-profile-{png.stem}"
    _run([f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={window[0]},{window[1]}",
          page.resolve().as_uri()])  # fmt: skip
    shutil.rmtree(profile, ignore_errors=True)
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"chromium wrote no PNG at {png}"
    return png


def dump_dom(page: Path, scratch: Path) -> str:
    """The DOM chromium built from the page (``--dump-dom``): what a reader's browser has, not the file's text."""
    profile = scratch / ".chromium-profile-dom"
    done = _run([f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()])
    shutil.rmtree(profile, ignore_errors=True)
    return done.stdout


def matrix_rows(dom: str) -> list[tuple[str, str]]:
    """(row class status, node name) of the nodes x layers table, top to bottom, from the DOM."""
    table = dom[dom.index('<table class="matrix">') :]
    table = table[: table.index("</table>")]
    return re.findall(r'<tr class="node-(\w+)"><td class="name"><a href="#[^"]+">([^<]+)</a>', table)


@dataclass
class Image:
    width: int
    height: int
    rows: list[bytes]  # RGB, 3 bytes a pixel

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        r, g, b = self.rows[y][3 * x : 3 * x + 3]
        return r, g, b


def read_png(path: Path) -> Image:
    """An 8-bit, non-interlaced RGB or RGBA PNG (what chromium writes), decoded with zlib and the PNG filters."""
    data = path.read_bytes()
    pos, idat = 8, b""
    width = height = colour_type = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour_type in (2, 6) and interlace == 0, f"unexpected PNG format in {path}"
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    channels = 3 if colour_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        previous = line
        rgb = bytes(line) if channels == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3)
        rows.append(rgb)
    return Image(width, height, rows)


def colour_bands(image: Image) -> list[tuple[int, int, set[str]]]:
    """Runs of pixel rows holding a status colour (a cell background), top to bottom: (first y, last y, the
    statuses whose colour the run holds). A table row's cells make one run; the borders between rows split them."""
    wanted = {bytes(rgb): status for status, rgb in COLOURS.items()}
    bands: list[tuple[int, int, set[str]]] = []
    for y, row in enumerate(image.rows):
        found = {wanted[row[i : i + 3]] for i in range(0, len(row), 3) if row[i : i + 3] in wanted}
        if found and bands and bands[-1][1] == y - 1:
            bands[-1][2].update(found)
            bands[-1] = (bands[-1][0], y, bands[-1][2])
        elif found:
            bands.append((y, y, found))
    return [b for b in bands if b[1] - b[0] >= 4]  # a cell is taller than a few pixels of anti-aliased text
