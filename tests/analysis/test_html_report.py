"""``rlprof report --html``: one self-contained page, rendered in a real headless Chromium without network.

Chromium is Debian's ``chromium`` (``sudo bash scripts/install-chromium.sh``); the browser tests skip
with that hint when it is absent. The page is checked as the browser renders it: the DOM after
rendering (``--dump-dom``) and the pixels of a screenshot (the bars and heat-map colours are there).
"""

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from rlprof.analysis.html_charts import PALETTE, heat_colour
from rlprof.cli.report import main
from rlprof.testing.generated_run import RegionSpec, generate_run

RUN = "20261122-050000-aaaaaa"
REGIONS = (
    RegionSpec("rollout", "rollout_generate", 40.0),
    RegionSpec("ref", "ref_compute_log_prob", 8.0),
    RegionSpec("actor", "actor_update", 30.0),
    RegionSpec("actor", "actor_optimizer_step", 6.0, parent="actor_update", offset_ms=20.0),
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (sudo bash scripts/install-chromium.sh)")


@pytest.fixture
def page(tmp_path) -> Path:
    generate_run(tmp_path / "save", run_id=RUN, ranks=4, steps=(1, 2, 3), regions=REGIONS, jitter=0.0,
                 slow={(2, "actor_update"): 1.6}, trace_bytes=12 * 1024)
    out = tmp_path / "report.html"
    assert main([str(tmp_path / "save"), "--html", "-o", str(out)]) == 0
    return out


def test_the_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "<link" not in text and "@import" not in text and "url(" not in text
    assert not re.search(r"""\bsrc\s*=""", text), "nothing may be loaded from anywhere"
    assert text.count('<svg class="step-anatomy"') == 1 and text.count('<svg class="heat-map"') == 1


def test_the_page_holds_the_anatomy_heat_map_stragglers_and_files(page):
    text = page.read_text(encoding="utf-8")
    assert len(re.findall(r'<rect class="segment" data-region="actor_update"', text)) == 3  # one per step
    assert "actor_optimizer_step" not in re.findall(r'<rect class="segment" data-region="([^"]+)"', text)  # nested: inside its parent
    assert len(re.findall(r'<rect class="cell[ "]', text)) == 4 * 4  # 4 ranks x 4 regions
    assert re.findall(r'<rect class="cell straggler" data-process="([^"]+)" data-region="([^"]+)"', text) == [("rank 2", "actor_update")]
    assert text.count('<tr class="straggler"><td>step') == 3
    assert text.count("rank2.pt.trace.json.gz</a>") == 3 and "rlprof timeline" in text
    assert '<span class="badge ok">ok</span>' in text


def test_each_bar_is_the_step_window_and_its_whisker_lies_inside(page, tmp_path, capsys):
    """Issue 34: step 2's whisker floated past its bar (bar 85.9 ms, whisker 93.1-95.1): the bar added up
    region medians, which fall short of the window when ranks run their regions at different times."""
    import json

    assert main([str(tmp_path / "save"), "--json"]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    svg = page.read_text(encoding="utf-8").split('<svg class="step-anatomy"')[1].split("</svg>")[0]
    ends, whiskers = {}, {}
    for x, y, w in re.findall(r'<rect class="segment[^"]*"(?: data-region="[^"]*")? x="([\d.]+)" y="(\d+)" width="([\d.]+)"', svg):
        ends[int(y)] = max(ends.get(int(y), 0.0), float(x) + float(w))
    for x1, x2 in re.findall(r'<line class="whisker" x1="([\d.]+)" x2="([\d.]+)"', svg):
        whiskers[len(whiskers)] = (float(x1), float(x2))
    bars = [ends[y] for y in sorted(ends)]
    assert len(bars) == len(run["steps"]) == len(whiskers) == 3
    label = 90.0
    scale = (bars[0] - label) / run["steps"][0]["span_ms"]
    for step, end, (low, high) in zip(run["steps"], bars, whiskers.values()):
        assert end == pytest.approx(label + step["span_ms"] * scale, abs=0.5)  # the bar is the window
        assert high <= end + 0.5 and high == pytest.approx(label + step["max_ms"] * scale, abs=0.5)
    assert "straggler in the step" in svg and "step times, fastest to slowest" in svg  # the legend explains both


def test_html_replaces_a_page_only_with_force(page, tmp_path, capsys):
    notes = tmp_path / "notes.html"
    notes.write_text("<html>my notes</html>")
    before = page.read_bytes()
    for existing in (page, notes):  # an earlier page is not replaced unasked either
        assert main([str(tmp_path / "save"), "--html", "-o", str(existing)]) == 2
        assert f"{existing} exists; nothing was written" in capsys.readouterr().err
    assert notes.read_text() == "<html>my notes</html>" and page.read_bytes() == before
    assert main([str(tmp_path / "save"), "--html", "-o", str(notes), "--force"]) == 0
    assert "rlprof report" in notes.read_text()


def test_html_without_an_output_file_names_one_beside_the_others(tmp_path, capsys, monkeypatch):
    generate_run(tmp_path / "save", run_id=RUN, ranks=1, steps=(1,))
    monkeypatch.chdir(tmp_path)
    assert main(["save", "--html"]) == 0 and main(["save", "--html"]) == 0
    assert "wrote report.1.html (report.html exists and is kept" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.glob("*.html")) == ["report.1.html", "report.html"]
    with pytest.raises(SystemExit) as exc:
        main(["save", "-o", "x.html"])
    assert exc.value.code == 2 and "add --html" in capsys.readouterr().err


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium that cannot reach any network: every host name fails to resolve and
    every request would go to a proxy that does not exist."""
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
               "--window-size=1280,1400", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@needs_chromium
def test_chromium_renders_the_plots(page, tmp_path):
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    assert '<svg class="step-anatomy"' in rendered and '<svg class="heat-map"' in rendered
    assert len(re.findall(r'<rect class="cell[ "]', rendered)) == 16


@pytest.mark.slow
@needs_chromium
def test_chromium_screenshot_is_not_blank_and_shows_the_plots(page, tmp_path):
    shot = tmp_path / "shot.png"
    result = chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), result.stderr[-2000:]
    width, height, pixels = read_png(shot)
    colours = {}
    for p in pixels:
        colours[p] = colours.get(p, 0) + 1
    white = colours.get((255, 255, 255), 0)
    assert white < 0.97 * width * height, "the page rendered (nearly) blank"
    for colour, what in ((PALETTE[0], "the first region's bars"), (heat_colour(1.6), "the straggler's heat-map cell")):
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        near = sum(n for c, n in colours.items() if max(abs(a - b) for a, b in zip(c, rgb)) <= 3)
        assert near > 200, f"{what} ({colour}) not on the screenshot"


def read_png(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """The RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    i, idat = 8, b""
    while i < len(data):
        (n,), kind = struct.unpack(">I", data[i:i + 4]), data[i + 4:i + 8]
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", data[i + 8:i + 21])
            assert depth == 8 and colour_type in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += data[i + 8:i + 8 + n]
        i += 12 + n
    channels = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, corner = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(line)
        previous = line
    pixels = [tuple(row[x:x + 3]) for row in rows for x in range(0, stride, channels)]
    return width, height, pixels


def test_several_runs_one_section_each_newest_first(tmp_path):
    generate_run(tmp_path, run_id="20261122-040000-111111", ranks=2, steps=(1,), regions=REGIONS)
    generate_run(tmp_path, run_id="20261122-050000-222222", ranks=2, steps=(1,), regions=REGIONS, unfinalized=(1,))
    out = tmp_path / "report.html"
    assert main([str(tmp_path), "--html", "-o", str(out)]) == 1  # the newer run lost a process
    text = out.read_text(encoding="utf-8")
    assert re.findall(r'<section class="run" id="run-([^"]+)"', text) == ["20261122-050000-222222", "20261122-040000-111111"]
    assert text.count('<span class="badge failed">FAILED</span>') == 1 and "not finalized: rank 1" in text
