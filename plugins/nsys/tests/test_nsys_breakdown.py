"""``rlprof breakdown`` on Nsight Systems reports: the SQLite export read into the breakdown's rows.

The CUDA tables exist only where CUDA ran, so the split is checked on a stand-in export written
with the documented schema (nsys_export_standin.py, the worked example of docs/analysis.md "Inside a
region"); a real CPU-only report recorded here by nsys checks the NVTX regions, the export of a
``.nsys-rep`` beside it, and the one line a capture with no device events costs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from nsys_export_standin import Export, record_cpu_report, write_export
from rlprof.analysis import breakdown_files
from rlprof.cli.breakdown import main as breakdown_command
from rlprof_nsys import sqlite_reader

NSYS = shutil.which("nsys")

WORKED_EXAMPLE = Export(
    ranges=[("step3", 0, 20, "rlprof"), ("actor_update", 0, 10, "rlprof"), ("rlprof_capture", 0, 30, "rlprof"),
            ("aten::mm", 1, 2, "")],
    kernels=[("gemm_a", 1, 5, 0.5), ("gemm_b", 4, 7, 0.6), ("ncclKernel_AllReduce_RING_LL_Sum_float", 6, 9, 0.7),
             ("next_region_kernel", 12, 13, 11)],
    copies=[("memcpy", 2, 3, 0.8), ("memset", 9, 10, 0.9)],
    other_process_kernels=[("busy_elsewhere", 0, 10, 0.1)] * 3,
)


def rows_by_region(rows):
    return {row.region: row for row in rows}


def test_the_worked_example_splits_from_the_documented_tables(tmp_path):
    path = write_export(tmp_path / "report.sqlite", WORKED_EXAMPLE)
    rows, errors = breakdown_files.breakdown([path])
    assert errors == []
    row = rows_by_region(rows)["actor_update"]
    assert (row.step, row.device) == (3, "cuda")
    assert (row.window_ms, row.compute_ms, row.communication_ms, row.overlap_ms, row.exposed_communication_ms,
            row.memory_ms, row.exposed_memory_ms, row.idle_ms) == pytest.approx((10, 6, 3, 1, 2, 2, 1, 1))
    # the capture window and other domains' ranges are no regions; the other process's kernels are not this trace's
    assert set(rows_by_region(rows)) == {"step3", "actor_update", "(trace)"}
    assert rows_by_region(rows)["(trace)"].window_ms == pytest.approx(12)  # first to last device event: 1 -> 13


def test_ranks_of_one_capture_are_matched_and_the_late_rank_is_named(tmp_path):
    capture = tmp_path / "run" / "step3"
    early = write_export(capture / "rank0-node1-11" / "nsys" / "report.sqlite", WORKED_EXAMPLE)
    late = Export(pid=12, ranges=[("actor_update", 0, 10, "rlprof")],
                  kernels=[("gemm", 1, 7, 0.5), ("ncclKernel_AllReduce_RING_LL_Sum_float", 8, 9, 0.7)])
    later = write_export(capture / "rank1-node1-12" / "nsys" / "report.sqlite", late)
    rows, errors = breakdown_files.breakdown([early, later], workers=1)
    assert errors == []
    first = next(r for r in rows if r.rank == 0 and r.region == "actor_update")
    assert (first.communication_wait_ms, first.communication_transfer_ms) == pytest.approx((2, 1))
    assert first.waited_for_rank == 1


def test_a_folder_of_exports_is_read_not_passed_over_in_silence(tmp_path, capsys):
    """Seen before: `rlprof breakdown DIR` on a folder of .sqlite exports printed {"rows": [], "errors": []}
    (the walk looked for Chrome trace names); the nsys reader's own patterns find them."""
    folder = tmp_path / "exports"
    good = write_export(folder / "rank0.sqlite", WORKED_EXAMPLE)
    other = write_export(folder / "deeper" / "other.sqlite", Export(schema_major="4", kernels=WORKED_EXAMPLE.kernels))
    code = breakdown_command([str(folder), "--json", "--workers", "1"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {(row["path"], row["region"]) for row in out["rows"]} == {(str(good), r) for r in ("step3", "actor_update", "(trace)")}
    assert [e["path"] for e in out["errors"]] == [str(other)] and out["skipped"] == []


def test_an_export_of_another_schema_version_costs_one_line(tmp_path, capsys):
    good = write_export(tmp_path / "good.sqlite", WORKED_EXAMPLE)
    other = write_export(tmp_path / "other.sqlite", Export(schema_major="4", kernels=WORKED_EXAMPLE.kernels))
    code = breakdown_command([str(good), str(other), "--json", "--workers", "1"])
    out, err = capsys.readouterr()
    assert code == 0
    assert err.strip().splitlines() == [
        f"rlprof breakdown: {other}: NotReadable: nsys export schema version 4.0.0; this reader knows 3.x "
        "(Nsight Systems 2022.4 and later)"]
    assert {row["path"] for row in json.loads(out)["rows"]} == {str(good)}


@pytest.mark.parametrize("content, reason", [
    (b"not a database at all, just text" * 100, "not a readable SQLite database"),
    (None, "not a readable SQLite database"),  # a real export cut in half
])
def test_a_file_that_is_no_readable_export_costs_one_line(tmp_path, content, reason):
    path = tmp_path / "bad.sqlite"
    if content is None:
        whole = write_export(tmp_path / "whole.sqlite", WORKED_EXAMPLE).read_bytes()
        content = whole[: len(whole) // 2]
    path.write_bytes(content)
    rows, errors = breakdown_files.breakdown([path])
    assert rows == []
    assert len(errors) == 1 and errors[0][0] == str(path) and reason in errors[0][1]
    assert "\n" not in errors[0][1]


def test_an_sqlite_file_that_is_not_an_nsys_export_costs_one_line(tmp_path):
    import sqlite3

    path = tmp_path / "notes.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE notes (text TEXT)").connection.close()
    _, errors = breakdown_files.breakdown([path])
    assert errors == [(str(path), "NotReadable: not an nsys SQLite export (no EXPORT_META_DATA table)")]


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    """A real nsys report of a process that opens rlprof's step and role ranges (no CUDA here)."""
    if NSYS is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH: run scripts/install-nsys.sh as root")
    return record_cpu_report(tmp_path_factory.mktemp("nsys-cpu"), NSYS)


def test_a_real_report_is_exported_into_the_cache_folder_and_its_nvtx_ranges_are_the_regions(cpu_report):
    """A report in no run: its export is kept in the cache folder (RLPROF_CACHE_DIR), not beside it."""
    import sqlite3

    from rlprof.layout import rows_path

    export = sqlite_reader.exported(cpu_report)
    assert export == rows_path(str(cpu_report), sqlite_reader.EXPORT_SUFFIX) and export.is_file()
    assert export.parent == Path(os.environ["RLPROF_CACHE_DIR"])
    connection = sqlite3.connect(export)
    try:
        regions = sqlite_reader.regions(connection)
    finally:
        connection.close()
    assert [(r.name, r.step) for r in regions] == [("step1", 1), ("actor_update", 1), ("step2", 2), ("actor_update", 2)]
    assert all(r.end - r.start >= 20 for r in regions)  # ms: each range held a 20 ms sleep
    assert sqlite_reader.exported(cpu_report) == export  # exported once, then reused


def test_a_real_cpu_only_report_costs_one_line_saying_it_has_no_device_events(cpu_report, capsys):
    code = breakdown_command([str(cpu_report)])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.strip().splitlines() == [
        f"rlprof breakdown: {cpu_report}: NotReadable: no device events: no CUDA kernel, memcpy or memset table "
        "(a CPU-only capture; nsys records no host ops to split)"]
    written = {p.name for p in cpu_report.parent.iterdir()}
    assert written == {"ranges.py", cpu_report.name}  # nothing beside the report


def test_a_report_whose_export_has_nowhere_to_go_is_not_exported_and_says_how(tmp_path, monkeypatch):
    """RLPROF_CACHE_DIR set empty keeps nothing for a report outside a run; a cache folder that cannot be made
    (a file in its place) says where. Nothing is ever written beside the report."""
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"\0")
    monkeypatch.setenv("RLPROF_CACHE_DIR", "")
    [(_, reason)] = breakdown_files.breakdown([report])[1]
    assert reason == ("NotReadable: RLPROF_CACHE_DIR is set empty, so its export has nowhere to go: "
                      "run 'nsys export --type sqlite' on it and give the .sqlite")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("RLPROF_CACHE_DIR", str(blocked))
    [(_, reason)] = breakdown_files.breakdown([report])[1]
    assert reason.startswith(f"NotReadable: its export cannot be kept in {blocked} (") and "nsys export --type sqlite" in reason
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-folder", "r.nsys-rep"]
