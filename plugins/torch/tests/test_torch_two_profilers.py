"""Two Profilers of one run and rank in one process, one after the other or overlapping in time (a
``ProfiledWorker`` set up twice, a Profiler dropped without finalize, a finalize while the other's traces
are still being written): every trace each of them captured is kept, none changed by the other, each
listed once in the manifest under the name it has on disk (issue 40)."""

from __future__ import annotations

import gc
import gzip
import hashlib
import json
import threading
from pathlib import Path

import pytest

import rlprof
from rlprof.integrations.ray_worker import ProfiledWorker
from rlprof.manifest import read_records
from rlprof.runtime import trace_writer
from rlprof_torch import writer

RUN_ID = "same-run"


class Worker(ProfiledWorker):
    """The Ray mixin as a plain object: what a worker actor set up twice does, without Ray."""


def train(prof, region: str, steps=(1,)) -> None:
    """``region`` of role actor in every step: it tells whose trace a file is."""
    for step in steps:
        prof.start_step(step)
        with prof.role("actor", region):
            sum(range(10_000))
        prof.step_boundary()


def trace_files(run_dir: Path) -> dict[str, str]:
    """Every trace under the run (relative path -> sha256 of its bytes)."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*.pt.trace.json.gz"))}


def regions_in(path: Path) -> set[str]:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    return {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}


def listed(run_dir: Path) -> list[dict]:
    return [r for r in read_records([run_dir]) if r["type"] == "artifact" and r["backend"] == "torch"]


def check_every_trace_kept(run_dir: Path, first: dict[str, str], regions: dict[str, int]) -> None:
    """``first``'s traces are unchanged; every trace on disk is listed once, written, with its size and
    sha256; ``regions``: how many traces hold each Profiler's region; no error."""
    now = trace_files(run_dir)
    assert {path: now.get(path) for path in first} == first  # the first Profiler's traces, byte for byte
    records = listed(run_dir)
    paths = [r["path"] for r in records]
    assert sorted(paths) == sorted(now) and len(set(paths)) == len(paths)  # each file listed once, nothing else
    for record in records:
        data = (run_dir / record["path"]).read_bytes()
        assert record["state"] == "written" and record["size"] == len(data)
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
    found = [regions_in(run_dir / p) - {"ProfilerStep#1", "ProfilerStep#2"} for p in now]
    assert {name: sum(name in f for f in found) for name in regions} == regions
    assert not [r for r in read_records([run_dir]) if r["type"] == "error"]
    assert not list(run_dir.rglob("*.partial"))


def test_a_profiled_worker_set_up_twice_keeps_both_profilers_traces(make_config):
    worker = Worker()
    config = make_config(steps=(1, 2))
    worker.rlprof_setup(config, run_id=RUN_ID, rank=0, world_size=1, roles=("actor", "ref"))
    train(worker.profiler, "first", steps=(1, 2))
    worker.rlprof_finalize()
    run_dir = worker.profiler.run.run_dir
    first = trace_files(run_dir)
    assert len(first) == 2
    worker.rlprof_setup(config, run_id=RUN_ID, rank=0, world_size=1, roles=("actor", "ref"))  # the same run and rank
    train(worker.profiler, "second", steps=(1, 2))
    worker.rlprof_finalize()
    check_every_trace_kept(run_dir, first, {"actor_first": 2, "actor_second": 2})


def test_a_profiler_dropped_without_finalize_and_the_next_one_keep_their_traces(make_config):
    config = make_config(steps=(1,))
    dropped = rlprof.Profiler(config, roles=("actor", "ref"), run_id=RUN_ID)
    run_dir = dropped.run.run_dir
    dropped.start_step(1)
    with dropped.role("actor", "first"):
        sum(range(10_000))
    del dropped  # its step is still open: the next Profiler of the run and rank closes it, then captures its own
    gc.collect()
    second = rlprof.Profiler(config, roles=("actor", "ref"), run_id=RUN_ID)
    assert trace_writer.process_writer().wait_idle(60)
    first = trace_files(run_dir)
    assert len(first) == 1
    train(second, "second")
    second.finalize()
    check_every_trace_kept(run_dir, first, {"actor_first": 1, "actor_second": 1})


@pytest.fixture
def held_writer(monkeypatch):
    release = threading.Event()
    real = trace_writer.compress

    def held(export):
        release.wait(30)
        real(export)

    monkeypatch.setattr(trace_writer, "compress", held)
    yield release
    release.set()


def test_a_finalize_while_the_other_profilers_trace_is_still_being_written(make_config, held_writer, monkeypatch):
    config = make_config(steps=(1,))
    monkeypatch.setenv(writer.WAIT_ENV, "0")  # the first finalize leaves its trace to the writer
    first = rlprof.Profiler(config, roles=("actor", "ref"), run_id=RUN_ID)
    train(first, "first")
    first.finalize()
    second = rlprof.Profiler(config, roles=("actor", "ref"), run_id=RUN_ID)
    train(second, "second")  # its capture closes while the first one's trace is not on disk yet
    held_writer.set()
    monkeypatch.setenv(writer.WAIT_ENV, "60")
    second.finalize()
    run_dir = second.run.run_dir
    assert trace_writer.process_writer().wait_idle(60)
    files = trace_files(run_dir)
    assert len(files) == 2
    paths = [r["path"] for r in listed(run_dir)]  # the first one's stays 'writing': its finalize did not wait
    assert sorted(paths) == sorted(files)  # each trace listed once, under the name it has on disk
    owners = {path: regions_in(run_dir / path) for path in files}
    assert sorted("actor_first" in regions for regions in owners.values()) == [False, True]
    assert sorted("actor_second" in regions for regions in owners.values()) == [False, True]
