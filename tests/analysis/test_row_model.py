"""One row model: every column of the breakdown is declared once (``rlprof.row_model.Row``), and
``rlprof breakdown``'s table, the report's text, JSON and HTML, the rows cache and docs/analysis.md all
read that declaration, so a column added there reaches each of them without another edit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rlprof import row_model
from rlprof.row_model import BREAKDOWN, LABELS, REPORT, Row, column, columns, row_reference
from rlprof.cli.breakdown import _table
from rlprof.analysis.html import render_page
from rlprof.analysis.inside import Split, inside_of
from rlprof.analysis.report import render

from test_inside import report_with_slow_rank, row  # noqa: E402 (a sibling test module: its helpers)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "analysis.md"


def test_the_docs_list_every_column_as_declared():
    text = DOCS.read_text(encoding="utf-8")
    generated = text.split("<!-- rows: begin -->\n", 1)[1].split("<!-- rows: end -->", 1)[0]
    assert generated == row_reference(), "regenerate the table with rlprof.row_model.row_reference()"


def test_every_reader_lists_the_columns_the_model_lists_there(tmp_path):
    report = report_with_slow_rank(tmp_path)
    files = {f.rank: f for f in report.files}
    rows = [row(files[rank].path, rank, "actor_update", 10.0, 6.0, 3.0, 1.0) for rank in (0, 1)]
    without_memory = inside_of(report, rows, {f.path: f for f in report.files})
    for r in rows:  # a capture that recorded memory and counted FLOPs: its peak and its MFU are known
        r.peak_allocated_bytes = 3 * 2**20
        r.mfu_compute = 0.25
    table = _table(rows).splitlines()[1]
    assert [LABELS[c] for c in columns(BREAKDOWN)] == [c for c in (LABELS[c] for c in columns(BREAKDOWN)) if c in table]
    report.inside = inside_of(report, rows, {f.path: f for f in report.files})
    head = next(line for line in render(report).splitlines() if line.lstrip().startswith("step  region"))
    assert head.split("procs", 1)[1].split() == " ".join(LABELS[c] for c in columns(REPORT)).split()
    assert "".join(f"<th>{LABELS[c]}</th>" for c in columns(REPORT)) in render_page([report])
    [first, _] = report.inside.as_dict()["splits"]
    report.inside = without_memory  # no capture recorded memory: the report has no column of unknown peaks
    head = next(line for line in render(report).splitlines() if line.lstrip().startswith("step  region"))
    assert LABELS["peak_allocated_bytes"] not in head and LABELS["peak_allocated_bytes"] not in render_page([report])
    assert LABELS["mfu_compute"] not in head  # nor of MFU where no capture counted FLOPs
    assert {f.name for f in dataclasses.fields(Row)} <= set(first)  # the JSON holds every column, listed or not


def test_a_region_that_ran_twice_adds_up_by_each_columns_rule(tmp_path):
    report = report_with_slow_rank(tmp_path)
    f = report.files[0]
    once = row(f.path, 0, "actor_update", 10.0, 6.0, 3.0, 1.0)
    twice = row(f.path, 0, "actor_update", 4.0, 1.0, 2.0, 1.0, wait=0.5, late=1)
    split = Split(**{**vars(once), "step": 1, "rank": 7, "replica_rank": None})
    split.add(twice)
    assert (split.wall_ms, split.compute_ms, split.communication_ms, split.idle_ms) == (14.0, 7.0, 5.0, 2.0)
    assert (split.communication_wait_ms, split.waited_for_rank, split.waited_in) == (0.5, 1, "c10d::allreduce_")
    assert (split.rank, split.path, split.start_ms, split.end_ms) == (7, f.path, 0.0, 4.0)


def test_the_rows_cache_version_follows_the_columns(monkeypatch):
    @dataclasses.dataclass(kw_only=True)
    class Wider(Row):
        new_ms: float = column("new", listed=(BREAKDOWN,), default=0.0, doc="a column added later")

    before = row_model.rows_version()
    monkeypatch.setattr(row_model, "_COLUMNS", dataclasses.fields(Wider))
    assert row_model.rows_version() != before and row_model.rows_version().startswith(f"{row_model.DEFINITIONS}.")
