"""``rlprof report`` on manifests written by hand: what it shows, what it flags, how it picks runs.

The manifests here are what Profilers on several ranks and nodes would have written (the real
writer, :class:`rlprof.manifest.ManifestWriter`); the Ray tests check the same report on real runs.
"""

import gzip
import json
from pathlib import Path

import pytest

from rlprof.manifest import ManifestWriter
from rlprof.report import build_reports, main, render
from rlprof.traces import read_chrome_trace, read_ranges, reader_for

RUN = "20261122-050000-aaaaaa"


class Node:
    """One node's save path, with helpers that write what its processes would."""

    def __init__(self, save_path: Path, host: str):
        self.save_path = save_path
        self.host = host

    def process(self, rank, pid, *, run=RUN, roles=("actor", "rollout", "ref"), steps=(1, 2), tools=("torch",),
                mode="e2e", expected=None, finalized=True) -> "Proc":
        writer = ManifestWriter(self.save_path / run / "manifest" / f"rank{rank}-{self.host}-{pid}.jsonl",
                                {"run": run, "rank": rank, "host": self.host, "pid": pid})
        writer.write("process", world_size=2, roles=list(roles), selected_roles=list(roles), steps=list(steps),
                     mode=mode, tools=list(tools), save_path=str(self.save_path), replica_rank=None,
                     expected_captures=len(steps) if expected is None else expected, schedules={})
        return Proc(self, writer, run, rank, pid, finalized)


class Proc:
    def __init__(self, node, writer, run, rank, pid, finalized):
        self.node, self.writer, self.run, self.rank, self.pid, self.finalized = node, writer, run, rank, pid, finalized

    def artifact(self, step, roles, *, backend="torch", events=None, name=None, region=None, iterations=None,
                 capture=None, content=None):
        capture = capture or (f"step{step}" if step is not None else None)
        rel = Path(capture or "_process") / f"rank{self.rank}-{self.node.host}-{self.pid}" / backend / (name or f"rank{self.rank}.pt.trace.json.gz")
        path = self.node.save_path / self.run / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is not None:
            path.write_bytes(content)
        else:
            with gzip.open(path, "wt") as handle:
                json.dump({"traceEvents": events or []}, handle)
        self.writer.write("artifact", backend=backend, step=step, steps=[step] if step is not None else [], roles=list(roles),
                          region=region, capture=capture, mode="e2e", iterations=iterations, world_size=2, path=str(rel),
                          size=path.stat().st_size, kind="file", outside_output_dir=False)
        return path

    def error(self, backend, hook, message):
        self.writer.write("error", backend=backend, hook=hook, error=message)

    def finalize(self):
        self.writer.write("finalized", reason="end", artifacts=0, errors=0)


def span(name, dur_us, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "ts": 0, "dur": dur_us, "pid": 1, "tid": 1}


STEP_EVENTS = [
    span("ProfilerStep#1", 9000),
    span("rollout_generate", 4000),
    span("ref_compute_log_prob", 1000),
    span("actor_compute_log_prob", 1200),
    span("actor_update", 1500),
    span("actor_update", 500),
    span("actor_update", 1500, cat="gpu_user_annotation"),  # the GPU copy of the same range: not counted
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 300},
]


def complete_run(node: Node, ranks=(0, 1), steps=(1, 2)) -> None:
    for rank in ranks:
        proc = node.process(rank, 100 + rank, steps=steps)
        for step in steps:
            proc.artifact(step, ["actor", "rollout", "ref"], events=STEP_EVENTS)
        proc.finalize()


def rows_by_key(report):
    return {(c.step, c.role, c.rank, c.backend): c for c in report.cells}


def test_rows_per_step_role_rank_with_range_durations(tmp_path):
    complete_run(Node(tmp_path, "node1"))
    [report] = build_reports([tmp_path])
    rows = rows_by_key(report)
    assert set(rows) == {(s, r, k, "torch") for s in (1, 2) for r in ("actor", "rollout", "ref") for k in (0, 1)}
    actor = rows[1, "actor", 0, "torch"]
    assert actor.ranges == {"actor_compute_log_prob": {"ms": 1.2, "count": 1}, "actor_update": {"ms": 2.0, "count": 2}}
    assert rows[1, "ref", 0, "torch"].ranges == {"ref_compute_log_prob": {"ms": 1.0, "count": 1}}
    assert report.problem_count == 0
    text = render(report)
    assert "actor_update 2.0 x2" in text and "rollout_generate 4.0" in text
    assert "problems: none" in text


def test_missing_step_role_and_unfinalized_process_are_flagged(tmp_path, capsys):
    node = Node(tmp_path, "node1")
    ok = node.process(0, 100)
    for step in (1, 2):
        ok.artifact(step, ["actor", "rollout", "ref"], events=STEP_EVENTS)
    ok.finalize()
    died = node.process(1, 101)  # wrote step 1, died during step 2: no 'finalized'
    died.artifact(1, ["actor", "rollout", "ref"], events=STEP_EVENTS)
    [report] = build_reports([tmp_path])
    assert {(m["rank"], m["step"], m["role"]) for m in report.missing} == {(1, 2, "actor"), (1, 2, "rollout"), (1, 2, "ref")}
    assert [p.rank for p in report.unfinalized] == [1]
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "missing: rank 1 (node1 pid 101): torch wrote nothing for steps 2 x roles actor,rollout,ref" in out
    assert "not finalized: rank 1 (node1 pid 101)" in out


def test_backend_errors_and_worker_failures_are_listed(tmp_path, capsys):
    node = Node(tmp_path, "node1")
    complete_run(node, ranks=(0,), steps=(1,))
    proc = node.process(1, 101, steps=(1,))
    proc.artifact(1, ["actor", "rollout", "ref"], events=STEP_EVENTS)
    proc.error("torch", "stop_role", "RuntimeError: disk full")
    proc.finalize()
    controller = ManifestWriter(tmp_path / RUN / "manifest" / "controller-node1-99.jsonl",
                                {"run": RUN, "rank": None, "host": "node1", "pid": 99})
    controller.write("worker_failure", worker="actor_rollout_ref/rank2", worker_rank=2, call="step_boundary", step=1,
                     kind="died", error="ActorDiedError: The actor is dead")
    assert main([str(tmp_path), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)["runs"][0]
    assert data["errors"] == [{"rank": 1, "host": "node1", "pid": 101, "backend": "torch", "hook": "stop_role",
                               "error": "RuntimeError: disk full"}]
    assert data["worker_failures"][0]["worker"] == "actor_rollout_ref/rank2" and data["ok"] is False
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "backend error: rank 1 (node1 pid 101): torch in stop_role: RuntimeError: disk full" in out
    assert "worker failure: actor_rollout_ref/rank2 (rank 2) died in step_boundary at step 1" in out


def test_several_nodes_save_paths_merge_into_one_run(tmp_path, capsys):
    a, b = Node(tmp_path / "nodeA", "nodeA"), Node(tmp_path / "nodeB", "nodeB")
    complete_run(a, ranks=(0,))
    complete_run(b, ranks=(1,))
    [report] = build_reports([a.save_path, b.save_path])
    assert {(p.rank, p.host) for p in report.processes} == {(0, "nodeA"), (1, "nodeB")}
    assert len(report.run_dirs) == 2 and report.problem_count == 0
    assert {c.rank for c in report.cells} == {0, 1}
    assert main([str(a.save_path), str(b.save_path)]) == 0
    assert "2 profiling processes on 2 hosts" in capsys.readouterr().out


def test_newest_run_by_default_then_by_id_or_all(tmp_path, capsys):
    node = Node(tmp_path, "node1")
    older, newer = "20261122-040000-111111", "20261122-050000-222222"
    for run in (older, newer):
        proc = node.process(0, 100, run=run, steps=(1,))
        proc.artifact(1, ["actor"], events=STEP_EVENTS)
        proc.finalize()
    assert [r.run_id for r in build_reports([tmp_path])] == [newer]
    assert [r.run_id for r in build_reports([tmp_path], run="20261122-04")] == [older]
    assert [r.run_id for r in build_reports([tmp_path], all_runs=True)] == [older, newer]
    assert main([str(tmp_path), "--run", "nope"]) == 2
    assert "matches no runs" in capsys.readouterr().err
    assert main([str(tmp_path), "--run", "20261122"]) == 2  # ambiguous prefix


def test_nothing_to_report_is_a_usage_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no rlprof manifests" in capsys.readouterr().err
    assert main([str(tmp_path / "absent")]) == 2


def test_discrete_iterations_and_short_captures(tmp_path):
    node = Node(tmp_path, "node1")
    proc = node.process(0, 100, roles=("actor",), steps=(1,), mode="discrete", expected=2)
    proc.artifact(1, ["actor"], region="actor_update", capture="step1.actor_update", iterations=[1, 2],
                  events=[span("actor_update", 800)])
    proc.finalize()
    [report] = build_reports([tmp_path])
    [cell] = report.cells
    assert cell.iterations == {"actor_update": [[1, 2]]}
    assert report.short_captures == [{"rank": 0, "host": "node1", "pid": 100, "backend": "torch", "captures": 1, "expected": 2}]
    assert "actor_update 0.8 (it 1-2)" in render(report)
    assert "torch wrote 1 of 2 expected captures" in render(report)


def test_process_level_artifact_covers_every_step_and_unreadable_files_do_not_crash(tmp_path):
    node = Node(tmp_path, "node1")
    proc = node.process(0, 100, roles=("actor",), steps=(1, 2), tools=("nsys",), expected=None)
    proc.artifact(None, ["actor"], backend="nsys", name="worker_process_100.nsys-rep", content=b"\0" * 2048)
    proc.finalize()
    broken = node.process(1, 101, roles=("actor",), steps=(1,))
    broken.artifact(1, ["actor"], content=b"not gzip")
    broken.finalize()
    [report] = build_reports([tmp_path])
    assert report.missing == []
    rows = rows_by_key(report)
    assert rows[None, "actor", 0, "nsys"].size == 2048 and rows[None, "actor", 0, "nsys"].ranges == {}
    assert "unreadable: rank1.pt.trace.json.gz" in render(report)


def test_readers_are_chosen_by_file_name(tmp_path):
    assert reader_for(Path("rank0.pt.trace.json.gz")) is read_chrome_trace
    assert reader_for(Path("trace_view.json")) is read_chrome_trace
    assert reader_for(Path("worker_process_1.nsys-rep")) is None
    assert reader_for(Path("snapshot.pickle")) is None
    bare = tmp_path / "npu" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"  # a directory artifact, list-shaped trace
    bare.parent.mkdir(parents=True)
    bare.write_text(json.dumps([span("actor_update", 2500), span("actor_update", 500)]))
    ranges = read_ranges(tmp_path / "npu")
    assert ranges["actor_update"].ms == pytest.approx(3.0) and ranges["actor_update"].count == 2


def test_backend_that_cannot_capture_here_is_unavailable_not_missing(tmp_path):
    import rlprof
    from rlprof.manifest import read_records
    from rlprof.report import build_report, render

    class NoDevice:
        @rlprof.hookimpl
        def check_environment(self):
            return ["no CUDA device: memory snapshots need CUDA"]

    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), backends={"nodevice": NoDevice()}, overrides=[
        "global_profiler.tool=nodevice", f"global_profiler.save_path={tmp_path}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    prof.start_step(1)
    with prof.role("actor", "update"):
        pass
    prof.step_boundary()
    prof.finalize()
    report = build_report(prof.run.run_id, list(read_records([tmp_path])))
    assert report.missing == [] and report.problem_count == 0
    assert report.unavailable == [{"rank": 0, "host": prof.run.host, "pid": prof.run.pid, "backend": "nodevice",
                                   "problems": ["no CUDA device: memory snapshots need CUDA"]}]
    assert "not captured here: rank 0" in render(report)
