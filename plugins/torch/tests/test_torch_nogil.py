"""The end of a capture without the GIL (rlprof_torch.nogil): other threads run meanwhile, the trace is
torch's own, and where the fast path cannot load the capture is written all the same and that is said once.

These tests need the extension built (``pip install -e plugins/torch`` builds it, as scripts/setup.sh does;
in a checkout: ``python setup.py build_ext --inplace`` in plugins/torch): without it they fail, saying so."""

from __future__ import annotations

import gzip
import json
import logging
import math
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from rlprof.manifest import read_records
from rlprof_torch import nogil

ChromePhases = set("BEXIiCbnesftPNODMRr")
"""The Trace Event Format's phases (what Perfetto's and chrome://tracing's JSON importers read)."""


@pytest.fixture
def fast_path():
    reason = nogil.unavailable()
    assert reason is None, f"the fast path is not usable here: {reason}"


@pytest.fixture
def fresh_nogil(monkeypatch):
    """The fast path worked out again in this test (it is decided once per process)."""
    monkeypatch.setattr(nogil, "_state", {})
    monkeypatch.delenv(nogil.ENV, raising=False)


def started_profile(ops: int) -> torch.profiler.profile:
    """A running CPU profiler on this thread that saw about ``3 * ops`` events."""
    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    profile.start()
    x = torch.ones(4)
    for _ in range(ops):
        x = x + 1
    return profile


class Ticker:
    """A Python thread that wakes every millisecond and notes when: a wake-up needs the GIL."""

    def __init__(self):
        self.ticks: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._done.is_set():
            self.ticks.append(time.perf_counter())
            time.sleep(0.001)

    def inside(self, start: float, end: float) -> int:
        return sum(start < t < end for t in self.ticks)

    def __enter__(self):
        self._thread.start()
        while not self.ticks:
            time.sleep(0.001)
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


@pytest.mark.timing
def test_other_threads_run_while_a_capture_stops_saves_and_frees(fast_path, tmp_path):
    """The GIL is given up for the stop, the save and the free: with thread switches on demand only (a
    switch interval of 100 s), a thread that sleeps 1 ms at a time wakes up during each of them. With the
    GIL held (torch's own calls, RLPROF_TORCH_NOGIL=0), it wakes in none of them."""
    profile = started_profile(30_000)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        with Ticker() as ticker:
            times = [time.perf_counter()]
            path = nogil.stop(profile)
            times.append(time.perf_counter())
            profile.export_chrome_trace(str(tmp_path / "trace.json"))
            times.append(time.perf_counter())
            nogil.free(profile)
            times.append(time.perf_counter())
    finally:
        sys.setswitchinterval(interval)
    assert path == nogil.NOGIL
    woken = {phase: ticker.inside(times[i], times[i + 1]) for i, phase in enumerate(("stop", "save", "free"))}
    lengths = {phase: round((times[i + 1] - times[i]) * 1e3, 1) for i, phase in enumerate(("stop", "save", "free"))}
    assert all(woken.values()), f"wake-ups during each phase: {woken} (phases, ms: {lengths})"
    assert nogil.result_of(profile).freed
    assert len(json.loads((tmp_path / "trace.json").read_text())["traceEvents"]) > 90_000


def test_a_torch_error_is_a_python_error_not_a_crash(fast_path, tmp_path):
    """torch's ``save`` throws a C++ exception (c10::Error) on a second save: it comes back as a
    RuntimeError with torch's message, and the process goes on; a freed result refuses to save."""
    profile = started_profile(10)
    assert nogil.stop(profile) == nogil.NOGIL
    profile.export_chrome_trace(str(tmp_path / "first.json"))
    with pytest.raises(RuntimeError, match="Trace is already saved"):
        profile.export_chrome_trace(str(tmp_path / "second.json"))
    nogil.free(profile)
    with pytest.raises(RuntimeError, match="freed"):
        profile.export_chrome_trace(str(tmp_path / "third.json"))


def test_stopping_where_no_profiler_runs_is_refused_before_torch_is_called():
    """torch returns an empty result from a stop on a thread without a session, and exporting it
    crashes the process (torch's path and the fast one alike): nothing is stopped, an error says why."""
    with pytest.raises(nogil.NoSession, match="no torch profiler runs on thread"):
        nogil.stop(torch.profiler.profile())


def check_chrome_json(path: Path) -> list[dict]:
    """The trace is strict JSON (no NaN or Infinity, which Perfetto's JSON importer refuses) in the Trace
    Event Format: a ``traceEvents`` list of events with a known phase, a name, a pid and a tid, a
    finite ``ts``, and a finite ``dur`` >= 0 on complete events. Its events."""
    def refuse(constant):
        raise AssertionError(f"{path.name}: {constant} is not JSON")

    with gzip.open(path, "rt", encoding="utf-8") as handle:
        trace = json.loads(handle.read(), parse_constant=refuse)
    events = trace["traceEvents"]
    for event in events:
        assert event["ph"] in ChromePhases and "name" in event and "pid" in event and "tid" in event, event
        if event["ph"] != "M":
            assert math.isfinite(float(event["ts"])), event
        if event["ph"] == "X":
            assert math.isfinite(float(event["dur"])) and float(event["dur"]) >= 0, event
    return events


def shape(events: list[dict]) -> Counter:
    return Counter((e.get("name"), e.get("ph"), e.get("cat")) for e in events)


def test_the_fast_paths_trace_is_what_torch_exports(fresh_nogil, run_training, monkeypatch, tmp_path, capsys):
    """The same training traced twice, through the fast path and through torch's own calls: per step the
    same number of events, of the same names, phases and categories; the fast path's traces are strict
    Chrome JSON (what Perfetto loads), load in Holistic Trace Analysis and are read by ``rlprof breakdown``.
    Each trace's record and metadata say which path it took."""
    fast = run_training(run_id="fast", micro_batches=4)
    monkeypatch.setenv(nogil.ENV, "0")
    monkeypatch.setattr(nogil, "_state", {})
    slow = run_training(run_id="slow", micro_batches=4)
    for run, path in ((fast, nogil.NOGIL), (slow, nogil.TORCH)):
        assert [(a["capture"], a["stop_path"]) for a in run.artifacts] == [("step1", path), ("step2", path)]
        assert [trace["rlprof"]["stop_path"] for _, trace in run.traces()] == [path, path]
    for (_, ours), (_, torchs), record in zip(fast.traces(), slow.traces(), fast.artifacts):
        assert len(ours.events) == len(torchs.events)
        assert shape(ours.events) == shape(torchs.events)
        events = check_chrome_json(fast.run_dir / record["path"])
        assert len(events) == len(ours.events)

    hta = pytest.importorskip("hta.trace_analysis", reason="Holistic Trace Analysis is not installed (setup.sh installs it)")
    TraceAnalysis = hta.TraceAnalysis

    from rlprof.cli import main as rlprof
    from rlprof_torch.hta import gather_traces

    analysis = TraceAnalysis(trace_dir=str(gather_traces(fast.run_dir, "step2")))
    frame = analysis.t.get_trace(0)
    names = set(analysis.t.symbol_table.get_sym_table()[i] for i in frame["name"].unique())
    assert {"actor_update", "ref_compute_log_prob", "ProfilerStep#2"} <= names
    capsys.readouterr()
    assert rlprof(["breakdown", str(fast.run_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["region"] for r in rows} >= {"actor_update", "ref_compute_log_prob"}


def test_without_the_extension_the_capture_is_written_and_that_is_said_once(fresh_nogil, run_training, monkeypatch,
                                                                             caplog, read_trace):
    """The extension cannot be imported (not built: no compiler at install): every capture is still
    written, through torch's own calls, each record says ``stop_path: "torch"``, and one warning (a log line
    and a ``warning`` record) says why, however many captures close."""
    monkeypatch.setitem(sys.modules, "rlprof_torch._nogil", None)  # import fails as if never built
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        run = run_training(steps=(1, 2, 3))
    assert [a["stop_path"] for a in run.artifacts] == ["torch", "torch"]
    for record, trace in run.traces():
        assert trace.count("actor_update") == 1
    warnings = [r for r in read_records([run.run_dir]) if r["type"] == "warning"]
    assert len(warnings) == 1 and "GIL held" in warnings[0]["message"] and "not built" in warnings[0]["message"]
    assert sum("GIL held" in r.getMessage() for r in caplog.records) == 1


def test_where_torch_exports_other_symbols_the_capture_is_written_through_torch(fresh_nogil, run_training, monkeypatch):
    """A torch without the three functions (another release, another C++ ABI), simulated by looking them up
    in the C library: the fast path names the missing symbol, and the captures are written through torch."""
    monkeypatch.setattr(nogil, "_torch_library", lambda: "libc.so.6")
    assert "torch exports no _ZN5torch8autograd8profiler15disableProfilerEv" in nogil.unavailable()
    run = run_training()
    assert [a["stop_path"] for a in run.artifacts] == ["torch", "torch"]
    assert all(trace.count("actor_update") == 1 for _, trace in run.traces())


def test_a_torch_outside_the_checked_releases_waits_to_be_asked(fresh_nogil, monkeypatch):
    """A release whose ``disableProfiler`` nobody read is not called into: the reason names the release and
    the switch; ``RLPROF_TORCH_NOGIL=1`` uses the fast path anyway."""
    monkeypatch.setattr(torch, "__version__", "2.99.0+cpu")
    assert "torch 2.99.0+cpu is outside the releases" in nogil.unavailable() and "RLPROF_TORCH_NOGIL=1" in nogil.unavailable()
    monkeypatch.setattr(nogil, "_state", {})
    monkeypatch.setenv(nogil.ENV, "1")
    assert nogil.unavailable() is None


def test_a_user_profiler_in_the_same_process_is_left_to_torch(fast_path, tmp_path):
    """Once rlprof has routed torch's stop, a profiler the user runs on another thread still gets torch's own
    result (``events()``, ``key_averages()`` work), while rlprof's stop answers only its own thread."""
    rlprofs = started_profile(10)
    assert nogil.stop(rlprofs) == nogil.NOGIL

    def users():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            torch.ones(3).add(1)
        users.table = profile.key_averages().table()

    thread = threading.Thread(target=users)
    thread.start()
    thread.join()
    assert "aten::add" in users.table


def test_torchs_own_result_is_freed_after_its_save_not_when_the_cycle_collector_runs(fresh_nogil, monkeypatch, tmp_path):
    """On torch's own path too, the result goes right after its save, on the writer's thread: left to Python, it
    lives as long as its profiler, which is in a reference cycle, until the cycle collector runs on some
    thread (the training's, perhaps) and frees it there under the GIL (0.74 s for 866k events)."""
    import gc
    import weakref

    monkeypatch.setenv(nogil.ENV, "0")
    profile = started_profile(10)
    assert nogil.stop(profile) == nogil.TORCH
    profile.export_chrome_trace(str(tmp_path / "trace.json"))
    nogil.free(profile)
    assert nogil.result_of(profile) is None
    gc.disable()
    try:
        alive = weakref.ref(profile)
        del profile
        assert alive() is not None  # the cycle: only the collector would have freed the result
    finally:
        gc.enable()
