"""A manifest record declared once (rlprof.manifest.ProcessRecord, CaptureRecord): the writer writes its
fields, the reader reads them back typed and defaulted, and the report shows every one of them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rlprof.cli.report import main as report_main
from rlprof.analysis.runs import REQUIRED, Process, build_reports
from rlprof.manifest import CaptureRecord, ProcessRecord, read_record, record_fields, required


def test_a_record_reads_back_what_was_written_and_defaults_what_is_missing_or_mistyped():
    written = ProcessRecord(world_size=2, roles=["actor"], steps=[1, 3], mode="e2e", expected_captures=2,
                            environment={"torch": ["no CUDA"]}, global_profiler={"x": 1})
    assert read_record(ProcessRecord, json.loads(json.dumps(record_fields(written)))) == written
    older = read_record(ProcessRecord, {"roles": None, "mode": 3, "expected_captures": True, "steps": [2]})
    assert (older.roles, older.mode, older.expected_captures, older.steps) == ([], "?", None, [2])
    with pytest.raises(ValueError, match="CaptureRecord.bytes"):
        read_record(CaptureRecord, {"capture": "step1", "bytes": "12"})


def test_the_reader_requires_what_the_record_declares_required():
    assert required(ProcessRecord) == {} and required(CaptureRecord) == {"capture": str, "bytes": int}
    assert REQUIRED[CaptureRecord.TYPE] == {"rank": int, "capture": str, "bytes": int}
    assert REQUIRED[ProcessRecord.TYPE] == {"rank": int, "host": str, "pid": int}


def test_every_field_of_the_process_record_reaches_the_report(rlprof_run, rlprof_recorder, capsys):
    """Written by a real Profiler, read back by the report: a field added to ProcessRecord needs no other edit."""
    run = rlprof_run(rlprof_recorder, name="recorder", steps=(1,), roles=("actor",))
    [record] = [r for r in run.records if r["type"] == ProcessRecord.TYPE]
    names = [f.name for f in dataclasses.fields(ProcessRecord)]
    assert set(names) <= set(record)
    [report] = build_reports([run.run_dir])
    [process] = report.processes
    assert isinstance(process, Process) and all(getattr(process, n) == record[n] for n in names)
    assert report_main([str(run.run_dir), "--json", "--no-details", "--no-traces"]) == 0
    [shown] = json.loads(capsys.readouterr().out)["runs"][0]["processes"]
    assert all(shown[n] == record[n] for n in names) and shown["mode"] == "e2e" and shown["tools"][0] == "recorder"
    [capture] = [r for r in run.records if r["type"] == CaptureRecord.TYPE]
    [listed] = report.captures
    assert all(listed[f.name] == capture[f.name] for f in dataclasses.fields(CaptureRecord) if f.name != "bytes")


def test_a_capture_says_why_it_was_made_and_an_older_record_reads_as_planned():
    """``reason`` (planned, requested: <id>, triggered: <sentence>) is what the picture and the report read."""
    assert read_record(CaptureRecord, {"capture": "step1", "bytes": 3}).reason == "planned"
    asked = read_record(CaptureRecord, {"capture": "step4", "bytes": 3, "reason": "requested: r-1"})
    assert asked.reason == "requested: r-1" and record_fields(asked)["reason"] == "requested: r-1"
