"""The controller's end of many nodes without Ray: manifest batches (what a worker's file gained since
its last reply) become one file per worker in the controller's run directory, headed by a ``node``
record; a manifest the controller already reads in place (shared disk, same machine) is not copied;
a gathered file is read only inside its run directory."""

import json

import pytest

from rlprof.analysis.runs import build_report
from rlprof.integrations.gather import files_of, read_chunk, run_file
from rlprof.integrations.nodes import ManifestBatch, ManifestCursor, RunCollector
from rlprof.manifest import read_records


def line(**record) -> bytes:
    return (json.dumps({"run": "r1", "rank": 1, "host": "hostb", "pid": 7, **record}) + "\n").encode()


def batch(path, offset, lines, node="b" * 56, run_dir="/scratch/r1") -> ManifestBatch:
    return ManifestBatch(name=path.name, path=str(path), node=node, host="hostb", run="r1", rank=1, pid=7,
                         run_dir=run_dir, offset=offset, lines=lines)


def test_a_cursor_takes_complete_lines_once(tmp_path):
    path = tmp_path / "rank1-hostb-7.jsonl"
    cursor = ManifestCursor(path)
    assert cursor.take() == (0, b"")  # nothing written yet
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    assert cursor.take() == (0, b'{"a": 1}\n{"b": 2}\n')
    with open(path, "ab") as handle:
        handle.write(b'3}\n')
    assert cursor.take() == (18, b'{"c": 3}\n') and cursor.take() == (27, b"")


def test_batches_from_another_node_become_one_headed_file_and_a_report_places_its_files(tmp_path):
    worker = tmp_path / "nodeb" / "r1" / "manifest" / "rank1-hostb-7.jsonl"
    controller = RunCollector(tmp_path / "controller" / "r1", node="a" * 56)
    first = line(type="process", world_size=2, roles=["actor"], selected_roles=["actor"], steps=[1], mode="e2e",
                 tools=["torch"])
    second = line(type="artifact", backend="torch", path="step1/rank1-hostb-7/t.json.gz", steps=[1], roles=["actor"],
                  size=10) + line(type="finalized", reason="end")
    controller.receive(batch(worker, 0, first, run_dir=str(tmp_path / "nodeb" / "r1")))
    controller.receive(batch(worker, len(first), second, run_dir=str(tmp_path / "nodeb" / "r1")))
    copied = tmp_path / "controller" / "r1" / "manifest" / "rank1-hostb-7.jsonl"
    records = [json.loads(text) for text in copied.read_text().splitlines()]
    assert [r["type"] for r in records] == ["node", "process", "artifact", "finalized"]
    assert records[0]["node"] == "b" * 56 and records[0]["node_run_dir"] == str(tmp_path / "nodeb" / "r1")
    assert controller.bytes_received == len(first) + len(second) and controller.batches == 2

    report = build_report("r1", list(read_records([tmp_path / "controller"])))
    [process] = report.processes
    [file] = report.files
    assert process.node == file.node == "b" * 56
    assert file.path == str(tmp_path / "nodeb" / "r1" / "step1/rank1-hostb-7/t.json.gz") and not file.exists


def test_a_manifest_the_controller_reads_in_place_is_not_copied(tmp_path):
    run_dir = tmp_path / "profile" / "r1"
    shared = run_dir / "manifest" / "rank1-hostb-7.jsonl"
    shared.parent.mkdir(parents=True)
    lines = line(type="finalized", reason="end")
    shared.write_bytes(lines)
    controller = RunCollector(run_dir, node="a" * 56)
    controller.receive(batch(shared, 0, lines))
    controller.receive(batch(shared, len(lines), lines))  # later batches of that file are not copied either
    assert shared.read_bytes() == lines and str(shared) in controller.visible


def test_a_gathered_file_is_read_only_inside_its_run_directory(tmp_path):
    (tmp_path / "step1").mkdir()
    (tmp_path / "step1" / "t.json.gz").write_bytes(b"x" * 100)
    assert files_of(tmp_path, "step1") == [("step1/t.json.gz", 100)]
    assert read_chunk(tmp_path, "step1/t.json.gz", 90, 50) == b"x" * 10
    for escape in ("../secret", "/etc/passwd", "step1/../../x"):
        with pytest.raises(PermissionError):
            run_file(tmp_path, escape)


def test_a_report_over_the_controller_and_the_node_counts_each_process_once(tmp_path):
    node_run = tmp_path / "nodeb" / "r1"
    worker = node_run / "manifest" / "rank1-hostb-7.jsonl"
    worker.parent.mkdir(parents=True)
    lines = line(type="process", world_size=1, roles=["actor"], selected_roles=["actor"], steps=[1], mode="e2e",
                 tools=["torch"]) + line(type="finalized", reason="end")
    worker.write_bytes(lines)
    RunCollector(tmp_path / "controller" / "r1", node="a" * 56).receive(batch(worker, 0, lines, run_dir=str(node_run)))
    from rlprof.analysis.runs import build_reports

    [both] = build_reports([tmp_path / "controller", tmp_path / "nodeb"])
    [alone] = build_reports([tmp_path / "controller"])
    assert len(both.processes) == len(alone.processes) == 1
    assert both.processes[0].manifest == str(worker) and alone.processes[0].node == "b" * 56


def test_two_nodes_with_one_host_name_and_pid_keep_apart(tmp_path):
    controller = RunCollector(tmp_path / "controller" / "r1", node="a" * 56)
    for node in ("b", "c"):
        worker = tmp_path / f"node{node}" / "r1" / "manifest" / "rank1-hostb-7.jsonl"
        controller.receive(batch(worker, 0, line(type="finalized", reason=node), node=node * 56,
                                 run_dir=str(worker.parent.parent)))
    copies = sorted((tmp_path / "controller" / "r1" / "manifest").iterdir())
    assert [p.name for p in copies] == ["rank1-hostb-7-cccccccc.jsonl", "rank1-hostb-7.jsonl"]
    heads = {json.loads(p.read_text().splitlines()[0])["node"][0] for p in copies}
    reasons = {json.loads(p.read_text().splitlines()[1])["reason"] for p in copies}
    assert heads == reasons == {"b", "c"}
