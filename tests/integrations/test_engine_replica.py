"""The rollout-engine participant and the vLLM adapter without an engine: settings mapping, warnings,
which replicas and steps capture, where the engine's files go, and what a failing engine leaves.

The engine here is :class:`RecordingEngine`, a stand-in that writes files named as vLLM 0.32 names them
(``<prefix>_rank0.<ns>.pt.trace.json`` with the adapter's settings, ``.json.gz`` with vLLM's own gzip,
``<prefix>_rank0.profiler_out.txt``) at ``stop_profile``; the real engine runs in
tests/integrations/test_engine_vllm.py."""

import gzip
import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from rlprof.manifest import settled_artifacts
from rlprof.runtime import trace_writer

from rlprof.integrations.engines.contract import EngineCapture, EngineRequest, load_engine
from rlprof.integrations.engines.files import replica_file_name
from rlprof.integrations.engines.replica import EngineReplica, token_window_of
from rlprof.config.schedule import Schedule


def config(save, *, ranks=(1,), steps=(1, 2), window=None, contents=("cpu", "shapes"), tool="torch", extra=None):
    section = {"contents": list(contents), "discrete": True, **(extra or {})}
    if window:
        section.update(profile_token_start=window[0], profile_token_end=window[1])
    return {"global_profiler": {"tool": tool, "steps": list(steps), "save_path": str(save)},
            "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {
                "enable": True, "ranks": list(ranks), "tool_config": {tool: section}}}}}


def request(tool="torch", contents=(), tool_config=None, window=None):
    return EngineRequest(tool=tool, contents=tuple(contents), tool_config=tool_config or {"contents": list(contents)},
                         directory="/abs/engine", window=window)


# ------------------------------------------------------------------ the vLLM adapter's settings


def test_vllm_is_found_through_its_entry_point():
    adapter = load_engine("vllm")
    assert adapter.name == "vllm" and adapter.rlprof_contract == 1


def test_torch_contents_become_vllm_profiler_config():
    vllm = load_engine("vllm")
    cfg = vllm.settings(request(contents=("cpu", "shapes", "memory"), window=(2, 4))).engine_kwargs["profiler_config"]
    assert cfg["profiler"] == "torch" and cfg["torch_profiler_dir"] == "/abs/engine"
    assert cfg["torch_profiler_record_shapes"] is True and cfg["torch_profiler_with_memory"] is True
    assert cfg["torch_profiler_with_stack"] is False  # vLLM's default is True: rlprof says what contents says
    assert (cfg["delay_iterations"], cfg["max_iterations"]) == (2, 4)
    assert cfg["ignore_frontend"] is True and cfg["torch_profiler_activities"] == ["CPU"]
    # plain JSON, compressed by rlprof off the engine; no key_averages table where vLLM lets it be switched off
    assert cfg["torch_profiler_use_gzip"] is False and cfg["torch_profiler_dump_cuda_time_total"] is False
    plain = vllm.settings(request(contents=("stack",))).engine_kwargs["profiler_config"]
    assert plain["torch_profiler_with_stack"] is True and "delay_iterations" not in plain
    assert "torch_profiler_activities" not in plain  # no activity named: vLLM's platform default


def test_the_settings_validate_against_vllms_own_profiler_config():
    pytest.importorskip("vllm")
    from vllm.config import ProfilerConfig

    cfg = load_engine("vllm").settings(request(contents=("cpu", "stack", "shapes"), window=(2, 4)))
    checked = ProfilerConfig(**cfg.engine_kwargs["profiler_config"])
    assert checked.delay_iterations == 2 and checked.max_iterations == 4 and checked.torch_profiler_record_shapes


def test_what_vllm_cannot_honour_is_a_warning_naming_the_key():
    vllm = load_engine("vllm")
    npu = request(tool="npu", contents=("npu", "cpu"),
                  tool_config={"contents": ["npu", "cpu"], "level": "level1", "analysis": True})
    keys = [key for key, _ in vllm.settings(npu).warnings]
    assert keys == ["actor_rollout_ref.rollout.profiler.level", "actor_rollout_ref.rollout.profiler.analysis",
                    "actor_rollout_ref.rollout.profiler.contents"]
    assert "ignores level" in vllm.settings(npu).warnings[0][1]
    assert vllm.settings(request(contents=("cpu",))).warnings == ()


def test_written_matches_the_capture_prefix_and_a_rank_suffix(tmp_path):
    vllm = load_engine("vllm")
    for name in ("step1_replica0_c1_rank0.17.pt.trace.json.gz", "step1_replica0_c1_dp0_pp0_tp1_dcp0_ep0_rank1.18.pt.trace.json.gz",
                 "step1_replica0_c1_rank0.profiler_out.txt", "step1_replica0_c10_rank0.19.pt.trace.json.gz",
                 "rank0.20.pt.trace.json.gz"):
        (tmp_path / name).write_text("x")
    capture = EngineCapture(prefix="step1_replica0_c1", directory=str(tmp_path), request=request())
    assert sorted(p.name for p in vllm.written(capture)) == [
        "step1_replica0_c1_dp0_pp0_tp1_dcp0_ep0_rank1.18.pt.trace.json.gz", "step1_replica0_c1_rank0.17.pt.trace.json.gz",
        "step1_replica0_c1_rank0.profiler_out.txt"]


def test_lost_knows_vllms_dead_engine_by_class_name():
    EngineDeadError = type("EngineDeadError", (Exception,), {})
    vllm = load_engine("vllm")
    assert vllm.lost(type("Sub", (EngineDeadError,), {})())
    assert not vllm.lost(RuntimeError("Profiler is not enabled"))


def test_profile_token_window_becomes_delay_and_max_iterations():
    assert token_window_of(Schedule(wait=2, active=4)) == (2, 4)
    assert token_window_of(None) is None
    assert token_window_of(Schedule(skip_first=1, active=3)) is None  # no engine equivalent: whole calls


# ------------------------------------------------------------------ the participant


class RecordingEngine:
    """Stands in for vLLM's ``LLM`` profiler API: writes vLLM-named files into its directory at stop, its
    trace as plain JSON (``torch_profiler_use_gzip=False``, what the adapter asks) or, ``gzip=True``, as
    vLLM's default ``.json.gz``."""

    def __init__(self, directory, fail_start=None, fail_stop=None, gzip=False):
        self.directory = Path(directory)
        self.calls = []
        self.fail_start, self.fail_stop = fail_start, fail_stop
        self.prefix = None
        self.gzip = gzip

    def start_profile(self, profile_prefix=None, *, delay_iterations=None, max_iterations=None):
        self.calls.append(("start", profile_prefix, delay_iterations, max_iterations))
        if self.fail_start:
            raise self.fail_start
        self.prefix = profile_prefix

    def stop_profile(self):
        self.calls.append(("stop",))
        if self.fail_stop:
            raise self.fail_stop
        self.directory.mkdir(parents=True, exist_ok=True)
        trace = {"baseTimeNanoseconds": time.time_ns(), "traceEvents": [{"name": "execute_context_1(5)_generation_0(0)",
                                                                          "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}
        name = self.directory / f"{self.prefix}_rank0.{time.time_ns()}.pt.trace.json"
        with (gzip.open(f"{name}.gz", "wt") if self.gzip else open(name, "w")) as f:
            json.dump(trace, f)
        (self.directory / f"{self.prefix}_rank0.profiler_out.txt").write_text("table")


def records(save, settled=True):
    """The run directory and its records; ``settled``: a trace compressed in the background (listed
    ``writing``, then ``written``) as one record, as every reader takes it."""
    [run] = [p for p in Path(save).iterdir() if p.is_dir()]
    out = []
    for path in (run / "manifest").glob("*.jsonl"):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return run, settled_artifacts(out) if settled else out


def test_an_unselected_replica_gets_no_settings_and_writes_nothing_but_its_step_metrics(save_path):
    replica = EngineReplica(config(save_path, ranks=[1]), replica_rank=0, num_replicas=2)
    assert replica.settings is None
    assert replica.engine_kwargs() == {"disable_log_stats": False}  # no profiler; its request stats (timed: issue 48)
    engine = RecordingEngine(save_path / "nowhere")
    assert replica.start(engine, 1) is None
    replica.stop(engine)
    replica.finalize()
    assert engine.calls == []
    written = [p for p in save_path.rglob("*") if p.is_file()]
    assert written and all(p.parent.name == "step_metrics" for p in written), written  # no capture, no manifest
    (line,) = [json.loads(x) for x in written[0].read_text().splitlines() if '"kind": "step"' in x]
    assert line["step"] == 1 and "rlprof/rollout/generate/slowest_s" in line["metrics"]  # timed on every replica


def test_selected_steps_are_captured_moved_into_the_layout_and_listed_with_the_replica_rank(save_path):
    replica = EngineReplica(config(save_path, ranks=[1], window=(2, 6)), replica_rank=1, num_replicas=2, run_id="r1")
    engine = RecordingEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])
    for step in (1, 2, 3):
        replica.start(engine, step)
        replica.stop(engine)
    replica.finalize()
    assert [c[0] for c in engine.calls] == ["start", "stop", "start", "stop"]  # step 3 is not profiled
    assert engine.calls[0] == ("start", "step1_replica1_c1", 2, 4)
    run, recs = records(save_path)
    artifacts = [r for r in recs if r["type"] == "artifact"]
    assert {(a["step"], a["replica_rank"], a["roles"][0], a["engine"]) for a in artifacts} == {
        (1, 1, "rollout", "vllm"), (2, 1, "rollout", "vllm")}
    traces = sorted(a["path"] for a in artifacts if a["path"].endswith(".pt.trace.json.gz"))
    # named by the replica: vLLM calls its worker rank0 on every replica
    assert len(traces) == 2 and traces[0].startswith("step1.rollout_generate/rank1-") and "/torch/replica1.rank0." in traces[0]
    assert sorted(Path(a["path"]).name.split(".")[0] for a in artifacts) == ["replica1"] * 4
    assert all((run / a["path"]).is_file() for a in artifacts)
    assert [r["region"] for r in recs if r["type"] == "region"] == ["rollout_generate"] * 2
    assert not (run / "_engine").exists()  # the engine's directory is emptied and removed
    assert not [r for r in recs if r["type"] in ("error", "skip")]


@pytest.fixture
def held_compression(monkeypatch):
    """The process writer's compression held until ``release.set()`` (``started`` is set when it begins)."""
    release, started = threading.Event(), threading.Event()
    real = trace_writer.compress

    def held(export):
        started.set()
        release.wait(30)
        real(export)

    monkeypatch.setattr(trace_writer, "compress", held)
    yield release, started
    release.set()


def test_a_plain_engine_trace_is_compressed_off_the_engine_and_listed_once_written(save_path, held_compression):
    """vLLM with the adapter's settings writes plain JSON: the replica's stop returns while the trace is still
    being compressed (listed ``writing`` under its ``.json.gz`` name); the end of the run waits for it, and the
    file is then a whole gzip of the engine's JSON, listed ``written`` with its size and sha256, the plain
    file gone. (Before: the plain ``.json`` was moved as it was, and vLLM gzipped inside its busy loop.)"""
    release, started = held_compression
    replica = EngineReplica(config(save_path, ranks=[0], steps=[1]), replica_rank=0, num_replicas=1)
    engine = RecordingEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])
    replica.start(engine, 1)
    replica.stop(engine)
    assert started.wait(10)  # the writer has it; the stop did not wait for it
    run, raw = records(save_path, settled=False)
    [writing] = [r for r in raw if r["type"] == "artifact" and r["path"].endswith(".pt.trace.json.gz")]
    assert writing["state"] == "writing" and writing["replica_rank"] == 0 and writing["kind"] == "trace"
    assert not (run / writing["path"]).exists() and list(engine.directory.glob("*.pt.trace.json"))
    release.set()
    replica.finalize()
    run, recs = records(save_path)
    [trace] = [r for r in recs if r["type"] == "artifact" and ".pt.trace.json" in r["path"]]
    data = (run / trace["path"]).read_bytes()
    assert trace["path"] == writing["path"] and trace["state"] == "written" and trace["step"] == 1
    assert trace["size"] == len(data) and trace["sha256"] == hashlib.sha256(data).hexdigest()
    assert json.loads(gzip.decompress(data))["traceEvents"][0]["name"].startswith("execute_context")
    assert not list(run.rglob("*.partial")) and not (run / "_engine").exists()
    assert not [r for r in recs if r["type"] in ("error", "skip", "warning")]


def test_a_compression_that_fails_is_listed_failed_with_an_error_and_leaves_no_part_file(save_path, monkeypatch):
    """The disk fills while the writer compresses an engine trace: the run goes on; the trace is listed
    ``failed`` with the error, an ``error`` record names the replica and the file, and nothing is left under
    the trace's name or as ``.partial``."""
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trace_writer, "gzip_stream", full)
    replica = EngineReplica(config(save_path, ranks=[0], steps=[1, 2]), replica_rank=0, num_replicas=1)
    engine = RecordingEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])
    for step in (1, 2):
        replica.start(engine, step)
        replica.stop(engine)
    replica.finalize()
    run, recs = records(save_path)
    traces = [r for r in recs if r["type"] == "artifact" and ".pt.trace.json" in r["path"]]
    assert [(t["step"], t["state"]) for t in traces] == [(1, "failed"), (2, "failed")]
    assert all("No space left on device" in t["error"] and not (run / t["path"]).exists() for t in traces)
    errors = [r for r in recs if r["type"] == "error"]
    assert [(e["step"], e["replica_rank"], e["kind"]) for e in errors] == [(1, 0, "engine"), (2, 0, "engine")]
    assert all(Path(t["path"]).name in e["error"] and e["hook"] == "written" for t, e in zip(traces, errors))
    assert not list(run.rglob("*.partial")) and not list(run.rglob("*.pt.trace.json"))


def test_an_engine_that_gzips_its_own_trace_has_it_moved_as_it_is(save_path):
    replica = EngineReplica(config(save_path, ranks=[0], steps=[1]), replica_rank=0, num_replicas=1)
    engine = RecordingEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"], gzip=True)
    replica.start(engine, 1)
    replica.stop(engine)
    replica.finalize()
    run, raw = records(save_path, settled=False)
    [trace] = [r for r in raw if r["type"] == "artifact" and ".pt.trace.json" in r["path"]]
    assert "state" not in trace and trace["path"].endswith(".pt.trace.json.gz") and (run / trace["path"]).is_file()


def test_a_replica_set_up_twice_in_one_process_keeps_every_file_of_both(save_path):
    """Two EngineReplicas of one run and replica in one process, one after the other (issue 40): the second's
    files go to the same capture directories under the same names (vLLM's ``profiler_out.txt`` has no time in
    it); each is kept there under its own name, none left behind in the engine's directory, each listed once."""
    for _ in range(2):
        replica = EngineReplica(config(save_path, ranks=[1]), replica_rank=1, num_replicas=2, run_id="twice")
        engine = RecordingEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])
        generate_twice(replica, engine)
    run, recs = records(save_path)
    paths = [r["path"] for r in recs if r["type"] == "artifact"]
    assert len(paths) == 8 and len(set(paths)) == 8 and all((run / p).is_file() for p in paths)
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and p.parent.name == "torch") == sorted(paths)
    assert not [r for r in recs if r["type"] in ("error", "skip", "warning")]


@pytest.mark.parametrize("engine_name, ours", [
    ("step3_replica1_c2_rank0.17.pt.trace.json.gz", "replica1.rank0.17.pt.trace.json.gz"),  # vLLM
    ("step3_replica1_c2_dp0_pp0_tp1_dcp0_ep0_rank1.18.pt.trace.json.gz",
     "replica1.dp0_pp0_tp1_dcp0_ep0_rank1.18.pt.trace.json.gz"),  # vLLM, a worker of a tp=2 replica
    ("step3_replica1_c2-1732000000.5-TP-0.trace.json.gz", "replica1.1732000000.5-TP-0.trace.json.gz"),  # SGLang
    ("kernel_details.csv", "replica1.kernel_details.csv"),  # torch_npu's, no prefix
])
def test_an_engines_file_is_named_by_its_replica(engine_name, ours):
    assert replica_file_name(engine_name, "step3_replica1_c2", 1) == ours


def generate_twice(replica, engine):
    """Steps 1 and 2, one generate call each through a sync engine, then the end of the run."""
    for step in (1, 2):
        replica.start(engine, step)
        replica.stop(engine)
    replica.finalize()


def test_an_engine_that_cannot_start_its_profiler_is_an_error_record_and_generate_goes_on(save_path):
    replica = EngineReplica(config(save_path, ranks=[0]), replica_rank=0, num_replicas=1)
    engine = RecordingEngine(save_path / "x", fail_start=RuntimeError("Profiler is not enabled"))
    generate_twice(replica, engine)
    _, recs = records(save_path)
    errors = [r for r in recs if r["type"] == "error"]
    assert [(e["backend"], e["hook"], e["kind"], e["step"], e["lost"]) for e in errors] == [
        ("vllm", "start_profile", "engine", 1, False), ("vllm", "start_profile", "engine", 2, False)]
    assert "Profiler is not enabled" in errors[0]["error"]
    assert [c[0] for c in engine.calls] == ["start", "start"]  # never stopped what did not start; tried again
    assert len([r for r in recs if r["type"] == "skip"]) == 2 and len([r for r in recs if r["type"] == "region"]) == 2


def test_a_dead_engine_is_recorded_once_and_never_asked_again(save_path):
    EngineDeadError = type("EngineDeadError", (RuntimeError,), {})
    replica = EngineReplica(config(save_path, ranks=[0]), replica_rank=0, num_replicas=1)
    engine = RecordingEngine(save_path / "x", fail_stop=EngineDeadError("EngineCore encountered an issue"))
    generate_twice(replica, engine)
    _, recs = records(save_path)
    errors = [r for r in recs if r["type"] == "error"]
    assert [(e["hook"], e["lost"]) for e in errors] == [("stop_profile", True)]
    assert [c[0] for c in engine.calls] == ["start", "stop"]
    skips = [r["reason"] for r in recs if r["type"] == "skip"]
    assert len(skips) == 2 and "not profiling" in skips[1]


def test_an_unwritable_engine_directory_is_found_before_the_engine_is_built(save_path):
    run_dir = save_path / "r2"
    run_dir.mkdir(parents=True)
    (run_dir / "_engine").write_text("a file where the engine's directory would go")
    replica = EngineReplica(config(save_path, ranks=[0]), replica_rank=0, num_replicas=1, run_id="r2")
    assert replica.settings is None and "profiler_config" not in replica.engine_kwargs()
    replica.finalize()
    _, recs = records(save_path)
    [error] = [r for r in recs if r["type"] == "error"]
    assert error["backend"] == "vllm" and "not writable" in error["error"] and "_engine" in error["error"]


def test_an_async_engine_is_awaited(save_path):
    import asyncio

    class AsyncEngine(RecordingEngine):
        async def start_profile(self, *args, **kwargs):
            super().start_profile(*args, **kwargs)

        async def stop_profile(self):
            super().stop_profile()

    replica = EngineReplica(config(save_path, ranks=[0]), replica_rank=0, num_replicas=1)
    engine = AsyncEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])

    async def loop():
        for step in (1, 2):
            await replica.start_async(engine, step)
            await replica.stop_async(engine)
        await replica.finalize_async()

    asyncio.run(loop())
    _, recs = records(save_path)
    assert len([r for r in recs if r["type"] == "artifact"]) == 4 and not [r for r in recs if r["type"] == "error"]


class SlowExportEngine(RecordingEngine):
    """An async engine whose ``stop_profile`` takes ``export_s`` to write its trace (vLLM 0.32 exports
    inside ``stop_profile``)."""

    export_s = 0.5

    async def start_profile(self, *args, **kwargs):
        super().start_profile(*args, **kwargs)

    async def stop_profile(self):
        import asyncio

        await asyncio.sleep(self.export_s)
        super().stop_profile()


class HeldExportEngine(RecordingEngine):
    """An async engine whose ``stop_profile`` writes its trace only once the test releases it."""

    released: "asyncio.Event"

    async def start_profile(self, *args, **kwargs):
        super().start_profile(*args, **kwargs)

    async def stop_profile(self):
        await self.released.wait()
        super().stop_profile()


@pytest.mark.timing
def test_stop_returns_before_the_export_and_the_next_generate_waits_for_it_on_the_record(save_path):
    """The export of step 1 is held until the test releases it, while step 2's generate call has started:
    stop returned with the export still held, the generate call waited, and its ``profiling_wait`` record
    spans the release. An order of events (before: a 0.5 s export against bounds of 0.25 s and 200-1000 ms)."""
    import asyncio

    replica = EngineReplica(config(save_path, ranks=[0]), replica_rank=0, num_replicas=1)
    engine = HeldExportEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])
    released_ns = []

    async def loop():
        engine.released = asyncio.Event()
        await replica.start_async(engine, 1)
        await replica.stop_async(engine)  # returns with the export held: the trainer does not wait
        assert not list(engine.directory.glob("step1_*"))
        generate = asyncio.get_running_loop().create_task(replica.start_async(engine, 2))
        for _ in range(20):
            await asyncio.sleep(0.01)  # the generate call gets every chance to run; it must wait for the export
        assert not generate.done(), "step 2's generate call did not wait for step 1's export"
        released_ns.append(time.time_ns())
        engine.released.set()
        await generate
        await replica.stop_async(engine)
        await replica.finalize_async()

    asyncio.run(loop())
    run, recs = records(save_path)
    [wait] = [r for r in recs if r["type"] == "profiling_wait" and r["step"] is not None]
    assert wait["step"] == 2 and wait["replica_rank"] == 0 and wait["start_ns"] <= released_ns[0] <= wait["end_ns"], wait
    assert "next generate call" in wait["reason"]
    traces = [r for r in recs if r["type"] == "artifact" and r["path"].endswith(".pt.trace.json.gz")]
    assert sorted(r["step"] for r in traces) == [1, 2]
    for r in traces:  # listed once complete: every listed trace loads
        with gzip.open(run / r["path"], "rt") as f:
            assert json.load(f)["traceEvents"]
    assert not [r for r in recs if r["type"] in ("error", "skip")]


@pytest.mark.timing
def test_an_export_still_running_at_the_end_is_named_unfinished_and_not_listed(save_path):
    import asyncio

    replica = EngineReplica(config(save_path, ranks=[0], steps=[1]), replica_rank=0, num_replicas=1)
    engine = SlowExportEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])
    engine.export_s = 5.0

    async def loop():
        await replica.start_async(engine, 1)
        await replica.stop_async(engine)
        await replica.finalize_async(timeout=0.1)

    asyncio.run(loop())
    _, recs = records(save_path)
    [error] = [r for r in recs if r["type"] == "error"]
    assert error["unfinished"] is True and error["step"] == 1 and "still running" in error["error"]
    assert not [r for r in recs if r["type"] == "artifact"]
    [skip] = [r for r in recs if r["type"] == "skip"]
    assert "unfinished" in skip["reason"]


@pytest.mark.timing
def test_a_sync_replica_answering_before_its_stop_records_the_next_calls_wait(save_path):
    replica = EngineReplica(config(save_path, ranks=[0]), replica_rank=0, num_replicas=1)
    engine = RecordingEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])
    replica.start(engine, 1)
    sent = time.time_ns()  # the next call is sent while this stop (the export) still runs
    replica.stop(engine)
    replica.start(engine, 2, sent_ns=sent)
    replica.stop(engine)
    replica.start(engine, 3, sent_ns=time.time_ns())  # sent after the export: no wait
    replica.stop(engine)
    replica.finalize()
    _, recs = records(save_path)
    [wait] = [r for r in recs if r["type"] == "profiling_wait"]
    assert wait["step"] == 2 and wait["start_ns"] == sent and wait["ms"] >= 0


def test_the_rollout_backend_never_runs_in_the_replica(save_path):
    replica = EngineReplica(config(save_path, ranks=[0]), replica_rank=0, num_replicas=1)
    from rlprof.integrations.engines.stand_in import EngineStandIn

    assert isinstance(replica.profiler.backends.plugins["torch"], EngineStandIn)
    replica.finalize()


def test_a_bad_contents_value_is_refused_as_the_torch_backend_refuses_it(save_path):
    from rlprof.errors import ConfigError

    with pytest.raises(ConfigError, match="contents"):
        EngineReplica(config(save_path, ranks=[0], contents=("gpu",)), replica_rank=0, num_replicas=1)


@pytest.mark.parametrize("tool", ["torch_memory", "nsys"])
def test_a_tool_the_engine_cannot_stand_in_for_leaves_the_replica_timed_and_says_why(save_path, tool):
    """No engine profiler stands in for the tool: the replica's generate calls are timed (steps and
    rollout_generate), each capture it would open is a skip naming why, the same sentence as ``rlprof
    check`` (issue 40; it used to record nothing but a warning)."""
    from rlprof.analysis.verdict import verdict
    from rlprof.config.sections import replica_not_captured

    cfg = config(save_path, ranks=[0], tool=tool, contents=())
    cfg["actor_rollout_ref"]["rollout"]["profiler"]["tool_config"] = {}
    replica = EngineReplica(cfg, replica_rank=0, num_replicas=1)
    engine = RecordingEngine(save_path / "x")
    assert replica.settings is None and "profiler_config" not in replica.engine_kwargs()
    for step in (1, 2):
        assert replica.start(engine, step) is None
        replica.stop(engine)
    replica.finalize()
    _, recs = records(save_path)
    assert engine.calls == [] and not [r for r in recs if r["type"] in ("artifact", "warning", "error")]
    assert sorted((r["step"], r["region"]) for r in recs if r["type"] == "region") == [(1, "rollout_generate"),
                                                                                          (2, "rollout_generate")]
    skips = [r for r in recs if r["type"] == "skip"]
    assert skips and {s["reason"] for s in skips} == {replica_not_captured([tool])}
    lines = verdict([save_path]).lines
    assert any(line.startswith("skipped: replica 0: ") and replica_not_captured([tool]) in line for line in lines), lines


def test_finalize_from_another_thread_waits_for_the_export_on_the_replicas_loop(save_path):
    import asyncio

    replica = EngineReplica(config(save_path, ranks=[0], steps=[1]), replica_rank=0, num_replicas=1)
    engine = SlowExportEngine(replica.settings.engine_kwargs["profiler_config"]["torch_profiler_dir"])

    async def loop():  # verl's run-end watcher finalizes from its own thread while the server's loop runs
        await replica.start_async(engine, 1)
        await replica.stop_async(engine)
        await asyncio.to_thread(replica.finalize)

    asyncio.run(loop())
    _, recs = records(save_path)
    assert len([r for r in recs if r["type"] == "artifact"]) == 2 and not [r for r in recs if r["type"] == "error"]
