"""The conformance suite catches broken backends, and says what is wrong in plain words.

``Minimal`` below keeps the contract; each broken backend breaks exactly one promise by overriding
one method, and its test checks that the suite fails with a message naming that promise.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

import pytest

import rlprof
from rlprof.plugins import implemented_hooks
from rlprof.runtime.registry import LIFECYCLE
from rlprof.testing.conformance import SCENARIOS, BackendConformance, ConformanceFailure, check_backend
from rlprof.tool_config import check_keys

E2E_AND_DISCRETE = ("end_to_end", "discrete")


class Minimal:
    """A correct backend: one JSON file per capture listing its regions."""

    name = "minimal"

    def __init__(self):
        self.open = {}

    @rlprof.hookimpl
    def validate_tool_config(self, tool_config, key_path):
        check_keys(tool_config, key_path, used=())
        return dict(tool_config)

    @rlprof.hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            self.open[ctx.capture.capture_id] = []

    @rlprof.hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture:
            self.open[ctx.capture.capture_id] = []

    @rlprof.hookimpl
    def stop_role(self, ctx):
        self.open.get(ctx.capture.capture_id, []).append(ctx.region)
        if ctx.closes_capture:
            return self.write(ctx)

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        if ctx.closes_capture:
            return self.write(ctx)

    @rlprof.hookimpl
    def finalize(self, ctx):
        return []

    def open_captures(self):
        return list(self.open)

    def write(self, ctx):
        regions = self.open.pop(ctx.capture.capture_id)
        path = ctx.output_dir() / "regions.json"
        path.write_text(json.dumps(regions))
        return [path]


@pytest.fixture(autouse=True)
def keep_failed_runs_under_tmp_path(tmp_path, monkeypatch):
    """check_backend keeps the files of a failed run in a temporary directory: make it pytest's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def failure_of(backend, scenarios=E2E_AND_DISCRETE, **kwargs) -> str:
    with pytest.raises(ConformanceFailure) as info:
        check_backend(backend, scenarios=scenarios, **kwargs)
    return str(info.value)


def test_a_correct_backend_passes():
    report = check_backend(Minimal)
    assert report.ok, report.explain()
    assert set(report.runs) == set(SCENARIOS) == {
        "end_to_end", "continuous_steps", "discrete", "sampled_end_to_end", "sampled_discrete", "error_in_region",
        "error_in_sampled_window", "error_then_exit", "nested_end_to_end", "nested_discrete", "resumed_continuous",
        "missing_step_boundary", "colocated_roles", "blocked_signals"} | {f"released_after_{hook}" for hook in LIFECYCLE}
    assert set(implemented_hooks(Minimal())) <= report.exercised and report.unreached == ()
    for hook in set(implemented_hooks(Minimal())) & set(LIFECYCLE):  # each scenario reached the hook it is for
        assert report.runs[f"released_after_{hook}"].injected.raised, hook
    released = report.runs["released_after_start_role"]
    assert [(c["closed"], c["finalized"]) for c in released.cleanups] == [(["step1.actor_update"], True)]


class TestMinimalThroughTheSubclassableSuite(BackendConformance):
    backend = Minimal


# --------------------------------------------------------------------------- writes outside its directory


class WritesIntoWorkingDirectory(Minimal):
    def write(self, ctx):
        super().write(ctx)
        path = Path("trace.json")  # relative: lands wherever the trainer was started
        path.write_text("{}")
        return [path]


def test_writing_into_the_working_directory_is_caught():
    message = failure_of(WritesIntoWorkingDirectory)
    assert "breaks the rlprof backend contract" in message
    assert "wrote outside the run directory: opened for writing" in message
    assert "cwd/trace.json" in message
    assert "left a file outside the run directory" in message and "(in the working directory)" in message
    assert "outside the run directory" in message and "outside_output_dir" in message


@pytest.fixture
def elsewhere(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("elsewhere") / "fixed-place.json"


def test_writing_to_a_fixed_absolute_path_is_caught(elsewhere):
    class WritesToFixedPath(Minimal):
        def write(self, ctx):
            elsewhere.write_text("{}")
            return super().write(ctx)

    message = failure_of(WritesToFixedPath)
    assert f"wrote outside the run directory: opened for writing {elsewhere}" in message
    assert "Write only under ctx.output_dir()" in message


def test_writing_beside_its_own_directory_in_the_run_is_caught():
    class WritesIntoRunRoot(Minimal):
        def write(self, ctx):
            (ctx.run.run_dir / "summary.txt").write_text("x")
            return super().write(ctx)

    message = failure_of(WritesIntoRunRoot)
    assert "wrote summary.txt into the run directory but outside its own output directories" in message


def test_leaving_a_temporary_file_behind_is_caught():
    class LeavesTempFile(Minimal):
        def write(self, ctx):
            handle, _ = tempfile.mkstemp(suffix=".scratch")
            os.close(handle)
            return super().write(ctx)

    message = failure_of(LeavesTempFile)
    assert "left a file outside the run directory" in message and "(in the temporary directory)" in message


# --------------------------------------------------------------------------- leaves a capture open / mishandles errors


class SkipsCloseAfterError(Minimal):
    @rlprof.hookimpl
    def stop_role(self, ctx):
        if ctx.error is not None:
            return None  # forgets to close the capture of a region that raised
        return super().stop_role(ctx)


def test_not_closing_the_capture_of_a_failing_region_is_caught():
    message = failure_of(SkipsCloseAfterError, scenarios=["error_in_region"])
    assert "capture step1.actor_update (closed by stop_role after its region raised ScriptedFailure) has no artifact listed" in message
    assert "open_captures() still reports step1.actor_update, which the core already closed (after actor_update raised in step 1; after step 1; after step 2; after finalize)" in message


def test_raising_in_stop_role_after_an_error_is_caught():
    class RaisesOnError(Minimal):
        @rlprof.hookimpl
        def stop_role(self, ctx):
            if ctx.error is not None:
                raise RuntimeError(f"cannot stop {ctx.region}: {ctx.error}")
            return super().stop_role(ctx)

    message = failure_of(RaisesOnError, scenarios=["error_in_region"])
    assert "its stop_role hook raised RuntimeError: cannot stop actor_update" in message
    assert "skipped the backend for the rest of the run" in message
    assert "Traceback" in message or "raise RuntimeError" in message


def test_a_file_left_open_is_caught():
    class KeepsFileOpen(Minimal):
        handles = []

        def write(self, ctx):
            path = ctx.output_dir() / "regions.json"
            handle = open(path, "w")
            handle.write(json.dumps(self.open.pop(ctx.capture.capture_id)))
            self.handles.append(handle)  # never closed, never flushed
            return [path]

    message = failure_of(KeepsFileOpen, scenarios=["discrete"])
    for handle in KeepsFileOpen.handles:
        handle.close()
    assert "regions.json open after finalize" in message
    assert "is empty (0 bytes) after finalize" in message


def test_a_thread_left_running_is_caught():
    stop = threading.Event()

    class StartsThread(Minimal):
        @rlprof.hookimpl
        def start_step(self, ctx):
            threading.Thread(target=stop.wait, name="flusher").start()
            return super().start_step(ctx)

    try:
        message = failure_of(StartsThread, scenarios=["end_to_end"])
    finally:
        stop.set()
    assert "thread 'flusher' started during the run is still running after finalize" in message


def test_a_truncated_trace_is_caught():
    class WritesHalfAFile(Minimal):
        def write(self, ctx):
            self.open.pop(ctx.capture.capture_id)
            path = ctx.output_dir() / "regions.json"
            path.write_text('{"traceEvents": [')
            return [path]

    message = failure_of(WritesHalfAFile, scenarios=["discrete"])
    assert "which is not a complete file: JSONDecodeError" in message


# --------------------------------------------------------------------------- does not list its files


def test_files_not_in_the_manifest_are_caught():
    class ForgetsToList(Minimal):
        def write(self, ctx):
            super().write(ctx)
            return None

    message = failure_of(ForgetsToList, scenarios=["discrete"])
    assert "wrote 4 files it did not list in the manifest: step1.actor_update/" in message
    assert "return each path from the hook that wrote it, or call ctx.add_artifact(path)" in message.lower()


def test_listing_a_file_twice_is_caught():
    class ListsTwice(Minimal):
        def write(self, ctx):
            paths = super().write(ctx)
            ctx.add_artifact(paths[0])
            return paths

    message = failure_of(ListsTwice, scenarios=["end_to_end"])
    assert "regions.json 2 times" in message


# --------------------------------------------------------------------------- finalize, registration, config


def test_a_finalize_that_is_not_idempotent_is_caught():
    class WritesAtEveryFinalize(Minimal):
        calls = 0

        @rlprof.hookimpl
        def finalize(self, ctx):
            type(self).calls += 1
            path = ctx.output_dir() / f"summary-{type(self).calls}.json"
            path.write_text("{}")
            return [path]

    message = failure_of(WritesAtEveryFinalize, scenarios=["end_to_end"])
    assert "a second finalize returned paths the first one had not" in message
    assert "a second finalize created, changed or removed files" in message


def test_a_misspelled_hook_is_caught():
    class Misspelled(Minimal):
        @rlprof.hookimpl
        def stop_region(self, ctx):
            pass

    message = failure_of(Misspelled, scenarios=[])
    assert "the core cannot register it" in message and "stop_region" in message and "misspelled" in message


def test_accepting_unknown_tool_config_keys_is_caught():
    class AcceptsAnything(Minimal):
        @rlprof.hookimpl
        def validate_tool_config(self, tool_config, key_path):
            return dict(tool_config)

    message = failure_of(AcceptsAnything, scenarios=[])
    assert "validate_tool_config accepted the unknown key 'rlprof_conformance_unknown_key'" in message


def test_a_raising_check_environment_is_caught():
    class RaisingCheck(Minimal):
        @rlprof.hookimpl
        def check_environment(self):
            raise ImportError("no such library")

    message = failure_of(RaisingCheck, scenarios=[])
    assert "check_environment raised ImportError: no such library" in message


def test_a_runtime_env_ray_cannot_ship_is_caught():
    class BadRuntimeEnv(Minimal):
        @rlprof.hookimpl
        def worker_runtime_env(self, ctx):
            return {"env_vars": {"WHERE": Path("/tmp")}} if ctx.captures else None

    message = failure_of(BadRuntimeEnv, scenarios=[])
    assert "worker_runtime_env returned a mapping Ray cannot ship to a worker (not JSON-serialisable" in message


def test_an_entry_point_that_is_not_installed_is_named():
    message = failure_of("no_such_backend_anywhere", scenarios=["end_to_end"])
    assert "the backend cannot be created" in message and "no installed backend has that name" in message


def test_the_failure_lists_every_problem_with_its_scenario():
    message = failure_of(SkipsCloseAfterError, scenarios=["error_in_region", "error_in_sampled_window", "end_to_end"])
    assert "in error_in_region (discrete; profiled steps 1, 2 of 3;" in message
    assert "in error_in_sampled_window (" in message
    assert "in end_to_end" not in message  # that scenario raised nothing: no problem there
    assert "files of the runs are kept in" in message


# --------------------------------------------------------------------------- the capture rules and releases


class RefusesNesting(Minimal):
    """Guards against nesting itself, as rlprof-torch did before the core's state machine."""

    depth = 0

    @rlprof.hookimpl
    def start_role(self, ctx):
        if self.depth:
            raise RuntimeError(f"region {ctx.region} started inside another region: one region at a time")
        self.depth += 1
        return super().start_role(ctx)

    @rlprof.hookimpl
    def stop_role(self, ctx):
        self.depth -= 1
        return super().stop_role(ctx)


class OpensOnStepOne(Minimal):
    """Decides for itself when a run of steps begins (step 1), instead of obeying ctx.opens_capture."""

    @rlprof.hookimpl
    def start_step(self, ctx):
        if ctx.step == 1:
            self.open[ctx.capture.capture_id] = []


class ClosesWhenTheNextOpens(Minimal):
    """Ignores closes_capture at the step's end; closes a capture only when the next one opens."""

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        return None

    @rlprof.hookimpl
    def finalize(self, ctx):
        return [path for capture_id in list(self.open) for path in self.write_id(ctx, capture_id)]

    @rlprof.hookimpl
    def start_step(self, ctx):
        written = [path for capture_id in list(self.open) for path in self.write_id(ctx, capture_id)]
        super().start_step(ctx)
        return written

    def write_id(self, ctx, capture_id):
        self.open.pop(capture_id)
        return []


class OneRolePerProcess(Minimal):
    """Assumes a process hosts one role (verl's colocated workers break that)."""

    role = None

    @rlprof.hookimpl
    def start_role(self, ctx):
        if self.role not in (None, ctx.role):
            raise RuntimeError(f"this backend already profiles {self.role}; it cannot also profile {ctx.role}")
        self.role = ctx.role
        return super().start_role(ctx)


class RefusesEarlyFinalize(Minimal):
    """Its finalize assumes the run ended normally, so the core cannot release it after a failure."""

    @rlprof.hookimpl
    def iteration_boundary(self, ctx):
        pass

    @rlprof.hookimpl
    def finalize(self, ctx):
        if ctx.reason not in ("end", "exit", "signal"):
            raise RuntimeError(f"finalize called with reason {ctx.reason!r}")
        return []


BROKEN_FOR = {
    "nested_end_to_end": (RefusesNesting, "its start_role hook raised RuntimeError: region ref_compute_log_prob started inside another region"),
    "nested_discrete": (RefusesNesting, "its start_role hook raised RuntimeError: region ref_compute_log_prob started inside another region"),
    "resumed_continuous": (OpensOnStepOne, "its step_boundary hook raised KeyError: 'step2-3'"),
    "missing_step_boundary": (ClosesWhenTheNextOpens, "open_captures() still reports step2, which the core already closed"),
    "colocated_roles": (OneRolePerProcess, "its start_role hook raised RuntimeError: this backend already profiles actor; it cannot also profile critic"),
    **{f"released_after_{hook}": (RefusesEarlyFinalize, f"after it raised in {hook}, the core closed")
       for hook in LIFECYCLE if hook != "finalize" and hook in implemented_hooks(RefusesEarlyFinalize())},
    "released_after_finalize": (None, "a second finalize"),
}


class WritesAtEveryFinalize(Minimal):
    calls = 0

    @rlprof.hookimpl
    def finalize(self, ctx):
        type(self).calls += 1
        path = ctx.output_dir() / f"summary-{type(self).calls}.json"
        path.write_text("{}")
        return [path]


@pytest.mark.parametrize("scenario", sorted(BROKEN_FOR))
def test_a_backend_broken_for_each_capture_scenario_fails_it_in_plain_words(scenario):
    backend, expected = BROKEN_FOR[scenario]
    message = failure_of(backend or WritesAtEveryFinalize, scenarios=[scenario])
    assert f"in {scenario} (" in message and expected in message, message


def test_a_released_backend_is_not_blamed_for_the_core_calling_its_finalize():
    """Its finalize ran once at the release; the suite's second call is really a second one."""
    report = check_backend(Minimal, scenarios=[f"released_after_{h}" for h in ("start_step", "stop_role")])
    assert report.ok, report.explain()


class MarksIterations(Minimal):
    @rlprof.hookimpl
    def iteration_boundary(self, ctx):
        pass


def test_a_hook_no_scripted_run_reaches_is_named_and_never_fails_the_backend(monkeypatch):
    """A hook the core never calls in the suite's runs (an optional hook called under conditions no scenario
    creates; here iteration_boundary, with every sampled scenario left out) fails nothing: its released_after
    scenario checks nothing, and the report names the hook as unreached."""
    from dataclasses import replace

    from rlprof.testing import conformance

    kept = {name: s for name, s in SCENARIOS.items() if not s.schedule}  # no sampled window: no iteration ends
    kept["released_after_iteration_boundary"] = replace(SCENARIOS["released_after_iteration_boundary"], schedule=None)
    monkeypatch.setattr(conformance, "SCENARIOS", kept)
    report = check_backend(MarksIterations)
    assert report.ok, report.explain()
    assert not report.runs["released_after_iteration_boundary"].injected.raised
    assert report.unreached == ("iteration_boundary",) and "no scenario reached its iteration_boundary" in report.explain()
