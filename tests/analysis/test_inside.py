"""``rlprof report``'s split inside regions (rlprof.analysis.inside): trace rows joined to the manifest's
(step, region, process), cross-process skew, and the waits that make a rank look slow when another was late.

The rows are written here (what a reader would give for each rank's trace), so each test says exactly
what the traces hold; tests/cli/test_demo.py checks the same on real demo runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlprof.analysis.breakdown import TraceEvents
from rlprof.row_model import Row
from rlprof.analysis.rows_cache import CACHE_VERSION, FileRows, rows_document
from rlprof.analysis.inside import add_inside
from rlprof.layout import shipped_rows_path
from rlprof.analysis.html import render_page
from rlprof.analysis.inside import LABELS, SHOWN, inside_of, moved
from rlprof.analysis.report import build_reports, render
from rlprof.cli.report import main
from rlprof.testing.generated_run import generate_run


def report_with_slow_rank(tmp_path, factor=2.0):
    generate_run(tmp_path, ranks=2, steps=(1,), slow={(1, "actor_update"): factor}, jitter=0.0, trace_bytes=2 * 100)
    [report] = build_reports([tmp_path])
    return report


def row(path, rank, region, wall, compute, comm, idle, wait=None, late=None, step=1):
    return Row(path=path, rank=rank, step=step, region=region, device="cpu", start_ms=0.0, end_ms=wall, wall_ms=wall,
               window_ms=wall, compute_ms=compute, communication_ms=comm, memory_ms=0.0, exposed_memory_ms=0.0, overlap_ms=0.0,
               exposed_communication_ms=comm, idle_ms=idle, communication_wait_ms=wait,
               communication_transfer_ms=None if wait is None else comm - wait, waited_for_rank=late,
               waited_in=None if late is None else "c10d::allreduce_")


def rows_for(report, waited):
    """actor_update on both ranks: rank 1 spends the fraction ``waited`` of its extra time waiting for rank 0."""
    files = {f.rank: f.path for f in report.files}
    region = next(r for r in report.anatomy.steps[0].regions if r.region == "actor_update")
    ms = {t.rank: t.ms for t in region.spread.per_rank}
    rank1_wait = waited * (ms[1] - ms[0])
    return [row(files[0], 0, "actor_update", ms[0], 0.7 * ms[0], 0.1 * ms[0], 0.2 * ms[0], wait=0.0),
            row(files[1], 1, "actor_update", ms[1], 0.7 * ms[0], 0.1 * ms[0] + rank1_wait, ms[1] - 0.8 * ms[0] - rank1_wait,
                wait=rank1_wait, late=0),
            row(files[0], 0, "ProfilerStep#1", 99.0, 1.0, 0.0, 98.0)], {f.path: f for f in report.files}, ms


def test_a_rank_whose_extra_time_was_waiting_is_no_straggler_and_the_late_rank_is_named(tmp_path):
    report = report_with_slow_rank(tmp_path)
    assert [(s.region, s.time.rank) for s in report.anatomy.stragglers] == [("actor_update", 1)]
    rows, files, ms = rows_for(report, waited=1.0)  # all of rank 1's excess was the wait
    report.inside = inside_of(report, rows, files)
    assert report.anatomy.stragglers == []
    assert all(not r.stragglers for s in report.anatomy.steps for r in s.regions)
    [waited] = report.inside.waits
    assert (waited.waiter, waited.late, waited.collective, waited.was_flagged) == ("rank 1", "rank 0", "c10d::allreduce_", True)
    assert waited.line().startswith(f"step 1 actor_update: rank 1 waited {ms[1] - ms[0]:.1f} ms in allreduce for rank 0")
    text = render(report)
    assert "straggler: rank 1" not in text and "rank 1 waited" in text and "timings: 1 profiled step, 5 regions, 0 straggler flags" in text
    page = render_page([report])
    assert page.count('<tr class="split"') == 2 and "rank 1 waited" in page and 'class="straggler"' not in page
    assert "(waited for rank 0)</text>" in page  # the heat map cell of rank 1 in actor_update


def test_a_rank_slow_in_its_own_work_stays_a_straggler(tmp_path):
    report = report_with_slow_rank(tmp_path)
    rows, files, ms = rows_for(report, waited=0.0)
    report.inside = inside_of(report, rows, files)
    assert [(s.region, s.time.rank) for s in report.anatomy.stragglers] == [("actor_update", 1)]
    assert report.inside.waits == []


def test_splits_are_joined_to_the_manifest_regions_with_skew_naming_the_rank(tmp_path):
    report = report_with_slow_rank(tmp_path)
    rows, files, ms = rows_for(report, waited=0.0)
    inside = inside_of(report, rows, files)
    assert [(s.region, s.name) for s in inside.splits] == [("actor_update", "rank 0"), ("actor_update", "rank 1")]  # no ProfilerStep row
    idle = next(k for k in inside.skews if k.component == "idle_ms")
    values = [0.2 * ms[0], ms[1] - 0.8 * ms[0]]
    assert idle.skew == pytest.approx((max(values) - min(values)) / (sum(values) / 2))
    assert idle.most == "rank 1" and idle.flagged
    compute = next(k for k in inside.skews if k.component == "compute_ms")
    assert compute.skew == pytest.approx(0.0) and not compute.flagged


def test_compare_names_the_component_that_moved(tmp_path):
    a, b = report_with_slow_rank(tmp_path / "a"), report_with_slow_rank(tmp_path / "b")
    rows, files, _ = rows_for(a, waited=0.0)
    a.inside = inside_of(a, rows, files)
    rows, files, _ = rows_for(b, waited=0.0)
    rows[0].idle_ms += 5.0
    b.inside = inside_of(b, rows, files)
    assert moved(a, b, "actor_update", "rank 0") == "idle +5.00 ms"
    assert moved(a, a, "actor_update") is None  # nothing moved
    b.inside = None
    assert moved(a, b, "actor_update") is None  # B's traces are not here


def test_copies_show_as_every_copy_and_as_the_part_no_kernel_covers_in_text_json_html_and_compare(tmp_path):
    """A device region of 10 ms: compute 6, exposed comm 2, copies 3 ms of which 1 under no kernel, idle 1.
    The parts (compute, exposed comm, exposed memory, idle) add up to the window; memory is every copy's time."""
    report = report_with_slow_rank(tmp_path)
    files = {f.rank: f for f in report.files}
    rows = []
    for rank in (0, 1):
        r = row(files[rank].path, rank, "actor_update", 10.0, 6.0, 3.0, 1.0)
        r.device, r.overlap_ms, r.exposed_communication_ms, r.memory_ms, r.exposed_memory_ms = "cuda", 1.0, 2.0, 3.0, 1.0
        rows.append(r)
    report.inside = inside_of(report, rows, {f.path: f for f in report.files})
    [split] = {(s.memory_ms, s.exposed_memory_ms) for s in report.inside.splits}
    assert split == (3.0, 1.0)
    [first, _] = report.inside.as_dict()["splits"]
    assert (first["memory_ms"], first["exposed_memory_ms"]) == (3.0, 1.0)
    assert sum(first[c] for c in ("compute_ms", "exposed_communication_ms", "exposed_memory_ms", "idle_ms")) == 10.0
    text = render(report).splitlines()
    head = next(i for i, line in enumerate(text) if line.startswith("inside regions"))
    # the columns the row model lists in the report, in its order (no peak: these captures recorded no memory;
    # no MFU: nor counted FLOPs)
    labels = [LABELS[c] for c in SHOWN if c not in ("peak_allocated_bytes", "mfu_compute")]
    assert text[head + 1].split() == ["step", "region", "procs", *" ".join(labels).split()]
    assert labels[:5] == ["compute", "exposed comm", "exposed memory", "idle", "memory"]
    assert text[head + 2].split()[:8] == ["1", "actor_update", "2", "60%", "20%", "10%", "10%", "30%"]
    page = render_page([report])
    assert "<th>exposed memory</th><th>idle</th><th>memory</th>" in page
    assert "<td>60%</td><td>20%</td><td>10%</td><td>10%</td><td>30%</td>" in page

    other = report_with_slow_rank(tmp_path / "b")
    files = {f.rank: f for f in other.files}
    for r, rank in zip(rows, (0, 1)):
        r.path, r.exposed_memory_ms, r.idle_ms, r.memory_ms = files[rank].path, 2.0, 0.0, 4.0  # idle became copying
    other.inside = inside_of(other, rows, {f.path: f for f in other.files})
    assert moved(report, other, "actor_update") == "exposed memory +1.00 ms"


def test_report_reads_no_trace_with_no_traces_and_says_one_line_per_unreadable_one(tmp_path, capsys):
    """The generated run's trace files are filler, not Kineto: each costs one line; --no-traces reads none."""
    generate_run(tmp_path, ranks=2, steps=(1,), trace_bytes=2 * 100)
    assert main([str(tmp_path), "--json", "--no-details"]) == 0
    captured = capsys.readouterr()
    [run] = json.loads(captured.out)["runs"]
    assert len(run["inside"]["errors"]) == 2 and run["inside"]["splits"] == []
    lines = captured.err.splitlines()
    assert len(lines) == 2 and all(line.startswith("rlprof report: ") and "BadGzipFile" in line for line in lines)
    assert main([str(tmp_path), "--json", "--no-details", "--no-traces"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["runs"][0]["inside"] is None and captured.err == ""


def test_a_trace_that_is_one_endless_line_costs_one_line_and_the_rest_of_the_report_stands(tmp_path, capsys):
    """Rank 1's trace is a single 64 MB token (gzip'd): the reader stops 16 MB in, not at the end, and
    says so in one line; rank 0's trace is still split."""
    import gzip

    generate_run(tmp_path, ranks=2, steps=(1,), trace_bytes=2 * 100)
    [report] = build_reports([tmp_path])
    first, second = sorted(report.files, key=lambda f: f.rank)
    events = [{"ph": "X", "cat": "user_annotation", "name": "actor_update", "ts": 0, "dur": 20, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 10, "pid": 1, "tid": 1}]
    with gzip.open(first.path, "wt") as out:
        json.dump({"traceEvents": events}, out)
    with gzip.open(second.path, "wb", compresslevel=1) as out:
        out.write(b'{"traceEvents": "')
        for _ in range(64):
            out.write(b"a" * (1 << 20))
    assert main([str(tmp_path), "--json", "--no-details"]) == 0
    captured = capsys.readouterr()
    [run] = json.loads(captured.out)["runs"]
    [line] = captured.err.splitlines()
    assert line.startswith(f"rlprof report: {second.path}: TokenTooLong: no JSON structure in the 16 MB before byte")
    assert [(s["region"], s["rank"]) for s in run["inside"]["splits"]] == [("actor_update", 0)]
    assert {r["rank"] for r in run["rows"]} == {0, 1}  # both ranks' timings are all there


def ship_rows(report, rows, size_of=lambda f: f.size):
    """What a Ray controller holds for traces left on their nodes: each trace's rows file under its run
    directory (rlprof.integrations.node_rows); the traces themselves are removed here."""
    run_dir = Path(report.run_dirs[0])
    for f in report.files:
        mine = [r for r in rows if r.path == f.path]
        document = rows_document(FileRows(TraceEvents(path=f.path, rank=f.rank, device="cpu"), mine),
                                 {"size": size_of(f), "mtime_ns": 1, "version": CACHE_VERSION})
        target = shipped_rows_path(run_dir, f.node, f.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(document))
        Path(f.path).unlink()


def test_the_split_comes_from_rows_shipped_by_the_nodes_when_the_traces_are_not_here(tmp_path):
    report = report_with_slow_rank(tmp_path)
    rows, _, ms = rows_for(report, waited=0.0)
    ship_rows(report, rows)
    [report] = build_reports([tmp_path])
    assert not any(f.exists for f in report.files)
    add_inside([report], workers=1)
    assert [(s.region, s.name, round(s.compute_ms, 6)) for s in report.inside.splits] == \
        [("actor_update", "rank 0", round(0.7 * ms[0], 6)), ("actor_update", "rank 1", round(0.7 * ms[0], 6))]
    assert report.inside.errors == []


def test_shipped_rows_of_a_trace_of_another_size_are_never_used(tmp_path):
    """The manifest says how big each trace was; rows made from a file of another size are stale."""
    report = report_with_slow_rank(tmp_path)
    rows, _, _ = rows_for(report, waited=0.0)
    ship_rows(report, rows, size_of=lambda f: f.size + 1)
    [report] = build_reports([tmp_path])
    add_inside([report], workers=1)
    assert report.inside is None


def test_a_late_rank_that_entered_first_is_said_to_be_slower_inside_not_late_by_a_negative_time():
    """Seen in the demo: 'rank 0 waited 4.7 ms in allreduce for rank 1, late by -3.8 ms entering actor_update'."""
    from rlprof.analysis.inside import Waited

    first_in = Waited(2, "actor_update", "rank 0", 4.7, "c10d::allreduce_", "rank 1", -3.8)
    assert first_in.line() == ("step 2 actor_update: rank 0 waited 4.7 ms in allreduce for rank 1, "
                               "which entered actor_update 3.8 ms earlier and was slower inside it")
    late = Waited(2, "actor_update", "rank 0", 4.7, "c10d::allreduce_", "rank 1", 5.8)
    assert "late by 5.8 ms entering actor_update" in late.line()
    assert "late by" not in first_in.line()
