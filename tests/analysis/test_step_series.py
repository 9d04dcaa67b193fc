"""Issue 42, "One picture of the whole run": the report shows step time per role over every step, from the run's
step metrics file, with its profiled, requested and triggered steps marked, each mark linking to that step's
breakdown; the same series in the text report and ``--json``; the page checked in a real headless Chromium.

The run is real: a plain Profiler with the torch backend, 8 steps, actor and rollout regions timed on every step
(``step_metrics.jsonl``), steps 2, 5 and 7 captured, step 6 slow. Stand-in: ``rlprof capture`` and the triggers
are not on this branch yet, so the reasons of the captures of steps 5 and 7 are written into their ``capture``
records afterwards, as those will write them (``reason``: ``requested: <id>``, ``triggered: <sentence>``).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from rlprof.analysis.html_charts import CLIP, MARK_COLOURS, ROLE_COLOURS, STEP_LINE
from rlprof.cli.report import main
from rlprof.analysis.step_series import NO_FILE
from rlprof.step_metrics import FILE, read_step_metrics
from test_html_report import chromium, needs_chromium, read_png  # tests/analysis/test_html_report.py

STEPS = 8
CAPTURED = {2: "planned", 5: "requested: r-1f2e", 7: "triggered: step 6 took 2.0x the median of steps 1-5"}
KIND = {2: "profiled", 5: "requested", 7: "triggered"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    pytest.importorskip("rlprof_torch")
    import rlprof

    save = tmp_path_factory.mktemp("series") / "save"
    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor", "rollout"), overrides=[
        f"global_profiler.save_path={save}", "global_profiler.tool=torch", "global_profiler.steps=[2,5,7]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        "actor_rollout_ref.rollout.profiler.enable=true", "actor_rollout_ref.rollout.profiler.all_ranks=true"])
    for step in range(1, STEPS + 1):
        prof.start_step(step)
        with prof.role("rollout", "generate"):
            time.sleep(0.5 if step == 6 else 0.01)  # far above a loaded machine's noise (30 ms was not: load 11)
        with prof.role("actor", "update"):
            time.sleep(0.005)
        prof.step_boundary()
    prof.finalize()
    run = prof.run.run_dir
    for manifest in (run / "manifest").glob("*.jsonl"):  # the stand-in: why each capture was made
        lines = []
        for line in manifest.read_text().splitlines():
            record = json.loads(line)
            if record.get("type") == "capture":
                record["reason"] = CAPTURED[record["step"]]
            lines.append(json.dumps(record))
        manifest.write_text("\n".join(lines) + "\n")
    return run


@pytest.fixture(scope="module")
def page(run_dir, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("page") / "report.html"
    assert main([str(run_dir), "--html", "-o", str(out), "--no-traces"]) == 0
    return out


def _chart(text: str) -> str:
    return text.split('<svg class="step-series"')[1].split("</svg>")[0]


def test_the_chart_has_one_point_per_step_per_role_from_the_metrics_file(run_dir, page):
    svg = _chart(page.read_text(encoding="utf-8"))
    points = re.findall(r'<circle class="point" data-role="([^"]+)" data-step="(\d+)" cx="([\d.]+)" cy="([\d.]+)"', svg)
    by_role: dict[str, list[int]] = {}
    for role, step, _, _ in points:
        by_role.setdefault(role, []).append(int(step))
    assert by_role == {line: list(range(1, STEPS + 1)) for line in ("step", "actor", "rollout")}
    # the slow step stands out: step 6's rollout point is the highest of the rollout line (smallest y)
    rollout = {int(step): float(cy) for role, step, _, cy in points if role == "rollout"}
    assert min(rollout, key=rollout.get) == 6
    # the values are the file's: each step's own time as the hover says it
    steps = {r.step: r for r in read_step_metrics(run_dir / FILE) if r.kind == "step"}
    for step, record in steps.items():
        assert f"step {step} the whole step: {1e3 * record.metrics['rlprof/step/time_s']:.1f} ms" in svg


def test_captured_steps_are_marked_by_why_and_each_mark_links_to_its_breakdown(page):
    text = page.read_text(encoding="utf-8")
    svg = _chart(text)
    marks = re.findall(r'<a class="mark" data-kind="(\w+)" data-step="(\d+)" href="#([^"]+)"', svg)
    assert {int(step): kind for kind, step, _ in marks} == KIND
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    for kind, step, anchor in marks:
        assert anchor in ids, f"the {kind} mark of step {step} links to #{anchor}, which is not on the page"
        target = text.split(f'id="{anchor}"')[1]
        assert re.match(rf"><summary>step {step}: ", target), "the link lands on that step's breakdown"
    for step, kind in KIND.items():
        why = "profiled (planned)" if step == 2 else CAPTURED[step]
        assert f"<title>step {step} captured: {why}</title>" in svg  # the hover says why it was captured
        assert f'<g class="legend" data-kind="{kind}">' in svg  # and the legend names each kind
    shapes = {kind: re.search(rf'data-kind="{kind}".*?stroke-dasharray="3,3"/><(\w+)', svg).group(1) for kind in KIND.values()}
    assert shapes == {"profiled": "polygon", "requested": "rect", "triggered": "polygon"}
    assert len({MARK_COLOURS[k] for k in KIND.values()}) == 3


def test_text_and_json_carry_the_same_series(run_dir, capsys):
    assert main([str(run_dir), "--json", "--no-traces"]) == 0
    [report] = json.loads(capsys.readouterr().out)["runs"]
    series = report["step_series"]
    assert series["steps"] == list(range(1, STEPS + 1)) and list(series["roles"]) == ["actor", "rollout"]
    assert {m["step"]: (m["kind"], m["reasons"], m["breakdown"]) for m in series["marks"]} == {
        s: (KIND[s], [CAPTURED[s]], True) for s in CAPTURED}
    assert series["note"] is None and series["files"] == [str(run_dir / FILE)]
    assert main([str(run_dir), "--no-traces"]) == 0
    text = capsys.readouterr().out
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^ +(\d+) +[\d.]+ +[\d.]+ +[\d.]+.*$", text, re.M)}
    assert sorted(rows) == list(range(1, STEPS + 1))
    for step, value in zip(series["steps"], series["roles"]["rollout"]):
        assert f"{1e3 * value:.1f}" in rows[step]
    assert rows[2].endswith("  profiled (planned)") and rows[5].endswith("  requested: r-1f2e")
    assert rows[7].endswith(f"  {CAPTURED[7]}") and re.fullmatch(r" +6( +[\d.]+){3}", rows[6])  # not captured: no mark


def test_a_captured_step_is_told_by_one_figure_and_every_other_says_what_it_measures(run_dir, page, capsys):
    """First day: a captured step showed as 177.9, 86.0 and 128.7 ms in one report, and the HTML chart's spike sat
    beside an anatomy bar labelled 86.0. The step is told by its driver's figure (the every-step table, the chart,
    the anatomy's heading and bar label); the anatomy's window and the cost say what they measure beside it."""
    driver = {r.step: 1e3 * r.metrics["rlprof/step/time_s"] for r in read_step_metrics(run_dir / FILE) if r.kind == "step"}
    text = page.read_text(encoding="utf-8")
    chart = {int(step): float(ms) for step, ms in re.findall(r"<title>step (\d+) the whole step: ([\d.]+) ms</title>", text)}
    bars = {int(step): float(ms) for step, ms in re.findall(r'<text class="step-ms" data-step="(\d+)"[^>]*>([\d.]+) ms', text)}
    assert sorted(bars) == sorted(CAPTURED) and all(bars[step] == chart[step] for step in bars)  # bar and spike agree
    assert main([str(run_dir), "--no-traces"]) == 0
    report = capsys.readouterr().out
    for step in CAPTURED:
        assert f"step {step}: {driver[step]:.1f} ms, the driver's step (step_ms above); its processes' own steps " in report
        assert re.search(rf"  step {step}: [\d.]+ ms \(from opening its captures to the last one written, rlprof step "
                         rf"records\) against", report)


def test_a_run_without_a_metrics_file_says_so_in_one_line(run_dir, tmp_path, capsys):
    old = tmp_path / run_dir.name
    shutil.copytree(run_dir, old)
    (old / FILE).unlink()  # a run by an rlprof before step metrics
    out = tmp_path / "old.html"
    assert main([str(old), "--html", "-o", str(out), "--no-traces"]) == 0
    text = out.read_text(encoding="utf-8")
    assert '<svg class="step-series"' not in text
    assert text.count(f'<p class="muted step-series-none">{NO_FILE}</p>') == 1
    assert main([str(old), "--no-traces"]) == 0
    assert capsys.readouterr().out.count(NO_FILE) == 1
    assert main([str(old), "--json", "--no-traces"]) == 0
    [report] = json.loads(capsys.readouterr().out)["runs"]
    assert report["step_series"]["steps"] == [] and report["step_series"]["note"] == NO_FILE


@pytest.mark.slow
@needs_chromium
def test_chromium_draws_the_chart(page, tmp_path):
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert len(re.findall(r'<circle class="point"', _chart(dom.stdout))) == 3 * STEPS
    shot = tmp_path / "shot.png"
    result = chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), result.stderr[-2000:]
    width, height, pixels = read_png(shot)
    found: dict[str, list[tuple[int, int]]] = {}
    wanted = {"the whole step": STEP_LINE, "actor": ROLE_COLOURS[0], "rollout": ROLE_COLOURS[1],
              **{f"{k} mark": MARK_COLOURS[k] for k in ("requested", "triggered")}}
    rgbs = {what: tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for what, c in wanted.items()}
    for index, p in enumerate(pixels):
        for what, rgb in rgbs.items():
            if max(abs(a - b) for a, b in zip(p, rgb)) <= 8:
                found.setdefault(what, []).append((index % width, index // width))
    for what in wanted:
        assert len(found.get(what, [])) > 40, f"{what} ({wanted[what]}) is not on the screenshot"
    # the lines lie in one chart area, above the fold, across most of its width
    xs = [x for what in ("actor", "rollout") for x, _ in found[what]]
    ys = [y for what in ("actor", "rollout") for _, y in found[what]]
    assert max(xs) - min(xs) > 500 and max(ys) < height
    area = [pixels[y * width + x] for y in range(min(ys), max(ys) + 1) for x in range(min(xs), max(xs) + 1)]
    assert sum(1 for p in area if p != (255, 255, 255)) > 0.01 * len(area), "the chart's area is blank"


def test_a_long_run_clips_a_capture_s_own_cost_and_lists_the_slowest_in_text(tmp_path, capsys):
    """60 steps written by the real writer (``step_figures`` -> ``StepMetricsRecord`` -> ``ManifestWriter``) beside
    a generated run's manifests (profiled steps 10 and 41): step 40 slow (3x), step 41's capture costing 2 s."""
    from rlprof.manifest import ManifestWriter, record_fields
    from rlprof.step_metrics import StepMetricsRecord, Timing, step_figures
    from rlprof.testing.generated_run import RegionSpec, generate_run

    run_id = "20261122-050000-bbbbbb"
    run = generate_run(tmp_path / "save", run_id=run_id, ranks=1, steps=(10, 41), roles=("actor", "rollout"),
                       regions=(RegionSpec("rollout", "rollout_generate", 20.0), RegionSpec("actor", "actor_update", 10.0)))
    writer = ManifestWriter(run / FILE, {"run": run_id})
    t = 1_800_000_000_000_000_000
    for step in range(1, 61):
        generate_ms = 60.0 if step == 40 else 20.0
        length_ms = 2000.0 if step == 41 else generate_ms + 12.0
        timings = [Timing(0, "rollout", "rollout_generate", t, t + int(generate_ms * 1e6)),
                   Timing(0, "actor", "actor_update", t + int((generate_ms + 1) * 1e6), t + int((generate_ms + 11) * 1e6))]
        figures = step_figures(step, t, t + int(length_ms * 1e6), timings, processes=1)
        raw = {f"{x.role}/{x.region}": {"rank": [0], "start_s": [(x.start_ns - t) / 1e9], "end_s": [(x.end_ns - t) / 1e9]}
               for x in timings}
        writer.write(StepMetricsRecord.TYPE, **record_fields(StepMetricsRecord(
            "step", step, figures.metrics(), t, figures.end_ns, 1, step in (10, 41), raw)))
        t = figures.end_ns + 1_000_000
    writer.close()
    out = tmp_path / "report.html"
    assert main([str(run), "--html", "-o", str(out), "--no-traces"]) in (0, 1)
    svg = _chart(out.read_text(encoding="utf-8"))
    for line in ("step", "actor", "rollout"):
        assert [int(s) for s in re.findall(rf'<circle class="point" data-role="{line}" data-step="(\d+)"', svg)] == list(range(1, 61))
    # the capture's 2 s does not flatten the rest: the axis ends below it, step 41 sits on the top, its value said
    top = max(float(v) for v in re.findall(r'>(\d+) ms</text>', svg))
    assert 72 * CLIP <= top < 2000 and "&#8593; 2000 ms" in svg
    y = {s: float(re.search(rf'data-role="step" data-step="{s}" cx="[\d.]+" cy="([\d.]+)"', svg).group(1)) for s in (39, 40, 41)}
    assert y[41] < y[40] < y[39]  # drawn higher: 41 at the top, the slow step 40 well above an ordinary one
    marks = re.findall(r'<a class="mark" data-kind="(\w+)" data-step="(\d+)" href="#([^"]+)"', svg)
    assert [(k, int(s)) for k, s, _ in marks] == [("profiled", 10), ("profiled", 41)]
    assert main([str(run), "--no-traces"]) in (0, 1)
    text = capsys.readouterr().out
    listed = [int(s) for s in re.findall(r"^ +(\d+) +[\d.]+ +[\d.]+ +[\d.]+", text, re.M)]
    assert 40 in listed and 41 in listed and 10 in listed and len(listed) == len(set(listed)) <= 24 + 2
    assert "the 12 slowest and the captured (--json has every step)" in text


@pytest.mark.slow
def test_a_ray_demo_run_draws_every_step_from_its_driver_s_file(demo_run, tmp_path):
    """``rlprof demo`` (a real Ray cluster; the controller writes the run's file from every worker's timings):
    every step the demo ran is drawn for each role, profiled steps 1 and 2 marked and linked."""
    run = demo_run("discrete", "--steps", "1,2", "--discrete")  # shared with test_report_demo.py
    steps = sorted(r.step for r in read_step_metrics(run / FILE) if r.kind == "step")
    assert len(steps) >= 3
    out = tmp_path / "demo.html"
    assert main([str(run), "--html", "-o", str(out), "--no-traces"]) == 0
    text = out.read_text(encoding="utf-8")
    svg = _chart(text)
    for line in ("step", "actor", "rollout", "ref"):
        assert [int(s) for s in re.findall(rf'<circle class="point" data-role="{line}" data-step="(\d+)"', svg)] == steps
    marks = re.findall(r'<a class="mark" data-kind="(\w+)" data-step="(\d+)" href="#([^"]+)"', svg)
    assert [(k, int(s)) for k, s, _ in marks] == [("profiled", 1), ("profiled", 2)]
    assert all(f'id="{anchor}"' in text for _, _, anchor in marks)


@pytest.mark.timing
@pytest.mark.slow
def test_a_real_request_and_trigger_are_marked_by_kind_and_linked(armed_demo, tmp_path):
    """The marks from real unplanned captures (issue 42's ``rlprof capture`` and ``trigger.slow_step``): the
    session's armed ``rlprof demo`` (tests/conftest.py: nothing planned, rank 1 late from step 9, a capture asked
    once step 3 began); the page marks the requested and the triggered step and nothing else, each linking to
    its breakdown."""
    run, asked = armed_demo["run_dir"], armed_demo["asked"]
    out = tmp_path / "armed.html"
    assert main([str(run), "--html", "-o", str(out), "--no-traces"]) == 0
    text = out.read_text(encoding="utf-8")
    svg = _chart(text)
    every_step = list(range(1, armed_demo["train_steps"] + 1))
    for line in ("step", "actor"):
        assert [int(s) for s in re.findall(rf'<circle class="point" data-role="{line}" data-step="(\d+)"', svg)] == every_step
    marks = re.findall(r'<a class="mark" data-kind="(\w+)" data-step="(\d+)" href="#([^"]+)"', svg)
    assert sorted(k for k, _, _ in marks) == ["requested", "triggered"]
    assert all(f'id="{anchor}"' in text for _, _, anchor in marks)
    requested = re.search(r"request (r[\w-]+)", asked)[1]
    assert f"captured: requested: {requested}</title>" in svg
    [(triggered, _)] = [(int(s), a) for k, s, a in marks if k == "triggered"]
    assert triggered > armed_demo["slow_from"] and f"<title>step {triggered} captured: triggered: step " in svg
