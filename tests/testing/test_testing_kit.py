"""The backend authors' kit: the ``rlprof_run``/``rlprof_recorder`` fixtures (loaded through the
pytest11 entry point, nothing imported here), and one ``test_hook_<name>`` per hook of the spec
(tests/test_docs.py requires one for every hook)."""

from __future__ import annotations

import json
import logging
from importlib import metadata

import pytest

import rlprof
from rlprof.testing.conformance import check_backend
from rlprof.testing.scenario import ScriptedFailure
from rlprof.tool_config import check_keys


def test_the_plugin_is_registered_through_pytest11(pytestconfig):
    eps = {ep.name: ep.value for ep in metadata.entry_points(group="pytest11")}
    assert eps.get("rlprof") == "rlprof.testing.plugin"
    assert pytestconfig.pluginmanager.has_plugin("rlprof")


def test_rlprof_run_returns_profiler_artifacts_and_manifest(rlprof_run, rlprof_recorder):
    run = rlprof_run(rlprof_recorder, name="recorder", mode="discrete", steps=(2,), roles=("ref", "actor"))
    assert run.profiler.plan.discrete and run.backend is rlprof_recorder
    assert [a["capture"] for a in run.artifacts] == ["step2.ref_compute_log_prob", "step2.actor_update"]
    assert {r["type"] for r in run.records} == {"process", "artifact", "step", "region", "finalized", "skip", "capture", "unprofiled_steps"}  # the kit's recorder says it writes nothing
    assert all(path.is_file() for path in run.artifact_paths())
    assert run.errors == [] and run.raised is None


def test_each_rlprof_run_gets_a_fresh_sandbox(rlprof_run, rlprof_recorder, tmp_path):
    first = rlprof_run(rlprof_recorder, name="recorder")
    second = rlprof_run(type(rlprof_recorder), name="recorder")
    assert first.workdir != second.workdir and first.workdir.parent == tmp_path
    assert first.footprint.appeared == [] and first.footprint.writes_outside == []


# --------------------------------------------------------------------------- one test per hook


class Configured:
    """Normalises its tool_config and reports a missing dependency."""

    def __init__(self):
        self.seen = []

    @rlprof.hookimpl
    def validate_tool_config(self, tool_config, key_path):
        if tool_config.get("level") not in (None, "basic", "full"):
            raise rlprof.ConfigError(f"{key_path}.level: got {tool_config['level']!r}; allowed: basic, full")
        return {"level": tool_config.get("level", "basic")}

    @rlprof.hookimpl
    def check_environment(self):
        return ["libwalltime.so cannot be loaded (stand-in problem for the test)"]

    @rlprof.hookimpl
    def start_step(self, ctx):
        self.seen.append(dict(ctx.tool_config))


def test_hook_validate_tool_config(rlprof_run):
    run = rlprof_run(Configured, name="configured", tool_config={"level": "full"}, steps=(1,))
    assert run.backend.seen == [{"level": "full"}]  # what the backend returned, core keys (discrete) removed
    with pytest.raises(rlprof.ConfigError, match=r"actor_rollout_ref\.actor\.profiler\.tool_config\.configured\.level"):
        rlprof_run(Configured, name="configured", tool_config={"level": "everything"})


def test_hook_check_environment(rlprof_run):
    run = rlprof_run(Configured, name="configured", steps=(1,))
    warnings = [r.getMessage() for r in run.log if r.levelno == logging.WARNING]
    assert any("backend 'configured'" in w and "libwalltime.so cannot be loaded" in w for w in warnings)


def test_hook_start_step(rlprof_run, rlprof_recorder):
    run = rlprof_run(rlprof_recorder, name="recorder", steps=(1, 2), continuous=True, roles=("actor",))
    starts = [f for hook, f in rlprof_recorder.calls if hook == "start_step"]
    assert [(f["step"], f["opens"]) for f in starts] == [(1, True), (2, False)]  # one window for the merged run
    assert [a["capture"] for a in run.artifacts] == ["step1-2"]


def test_hook_start_role(rlprof_run, rlprof_recorder):
    rlprof_run(rlprof_recorder, name="recorder", mode="discrete", steps=(1,), roles=("actor",), iterations=4,
               schedule={"wait": 1, "active": 1, "repeat": 2})
    starts = [(f["region"], f["opens"], f["iterations"]) for hook, f in rlprof_recorder.calls if hook == "start_role"]
    assert starts == [("actor_update", True, (1, 1)), ("actor_update", True, (3, 3))]


def test_hook_stop_role(rlprof_run, rlprof_recorder):
    run = rlprof_run(rlprof_recorder, name="recorder", mode="discrete", steps=(1,), roles=("actor",), raise_in="actor")
    assert isinstance(run.raised, ScriptedFailure) and run.caught is run.raised
    stops = [f for hook, f in rlprof_recorder.calls if hook == "stop_role"]
    assert [(f["region"], f["closes"], f["error"]) for f in stops] == [("actor_update", True, "ScriptedFailure")]
    assert rlprof_recorder.captures["step1.actor_update"]["closed_by"] == "stop_role"


def test_hook_step_boundary(rlprof_run, rlprof_recorder):
    rlprof_run(rlprof_recorder, name="recorder", steps=(1, 2, 3), continuous=True, total_steps=2, roles=("actor",))
    boundaries = [(f["step"], f["closes"], f["late"]) for hook, f in rlprof_recorder.calls if hook == "step_boundary"]
    # step 1 ends (the merged run goes on), step 2 ends, then training stops before step 3: the run's
    # window is closed at finalize by a late close naming the last step seen
    assert boundaries == [(1, False, False), (2, False, False), (2, True, True)]


def test_hook_iteration_boundary(rlprof_run, rlprof_recorder):
    rlprof_run(rlprof_recorder, name="recorder", steps=(1,), roles=("actor",), iterations=3, schedule={"active": 3})
    calls = [(hook, f.get("iteration"), f.get("closes")) for hook, f in rlprof_recorder.calls
             if hook in ("iteration_boundary", "stop_role", "step_boundary")]
    # two boundaries inside the window of iterations 0-2, the window's end, then the step's end
    assert calls == [("iteration_boundary", 0, None), ("iteration_boundary", 1, None), ("stop_role", None, False),
                     ("step_boundary", None, True)]


def test_hook_finalize(rlprof_run, rlprof_recorder):
    run = rlprof_run(rlprof_recorder, name="recorder", steps=(1, 2), raise_in="actor", after_raise="exit")
    hooks = [hook for hook, _ in rlprof_recorder.calls]
    first = hooks.index("finalize")
    assert hooks[first - 1:first + 1] == ["step_boundary", "finalize"]  # the open step window is closed first
    assert rlprof_recorder.calls[first][1] == {"reason": "exit", "steps": [1]}  # step 1 was captured, up to the exit
    assert hooks[first + 1:] == ["finalize"]  # the kit calls it once more: it must be idempotent
    assert run.second_finalize.error is None and run.second_finalize.new_paths == []


def test_hook_worker_runtime_env():
    class Nsight:
        name = "nsightish"

        @rlprof.hookimpl
        def validate_tool_config(self, tool_config, key_path):
            check_keys(tool_config, key_path, used=())
            return {}

        @rlprof.hookimpl
        def start_step(self, ctx):
            pass

        @rlprof.hookimpl
        def worker_runtime_env(self, ctx):
            if not ctx.captures:
                return None
            repeat = f"repeat-shutdown:{ctx.expected_captures}" if ctx.expected_captures else "repeat"
            return {"nsight": {"capture-range": "cudaProfilerApi", "capture-range-end": repeat}}

    report = check_backend(Nsight, scenarios=[])
    assert "worker_runtime_env" in report.exercised


def test_rlprof_trace_hooks_prints_each_call(rlprof_run, rlprof_recorder, monkeypatch, capsys):
    monkeypatch.setenv("RLPROF_TRACE_HOOKS", "1")
    rlprof_run(rlprof_recorder, name="recorder", steps=(1,), roles=("actor",))
    err = capsys.readouterr().err
    assert "recorder.start_step(" in err and "recorder.stop_role(" in err and "recorder.finalize(" in err


def test_strict_mode_makes_a_failing_hook_raise(rlprof_run):
    class Fails:
        @rlprof.hookimpl
        def start_role(self, ctx):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        rlprof_run(Fails, name="fails", strict=True, steps=(1,))
    quiet = rlprof_run(Fails, name="fails", strict=False, steps=(1,))
    assert [(e["hook"], e["error"]) for e in quiet.errors] == [("start_role", "RuntimeError: boom")]


def test_recorder_reports_no_open_captures_when_done(rlprof_run, rlprof_recorder):
    run = rlprof_run(rlprof_recorder, name="recorder", mode="discrete")
    assert rlprof_recorder.open_captures() == []
    assert run.open_after["after finalize"] == ([], [])
    assert json.loads(run.artifact_paths()[0].read_text())["capture"] == "step1.actor_update"


class _Says:
    """A backend that warns on every capture it opens (the same words each time)."""

    rlprof_contract = 1

    @rlprof.hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            ctx.warn("sampling rate lowered to 50 Hz on this machine (kit test)")


def test_ctx_warn_is_logged_once_per_process_and_recorded_on_every_call(rlprof_run, caplog):
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        run = rlprof_run(_Says(), name="says", steps=(1, 2, 3))
    logged = [r.getMessage() for r in caplog.records if "sampling rate lowered to 50 Hz" in r.getMessage()]
    assert logged == ["rlprof: backend 'says' on rank 0: sampling rate lowered to 50 Hz on this machine (kit test)"]
    assert [(w["kind"], w["hook"], w["capture"], w["message"]) for w in run.warnings] == [
        ("backend", "start_step", f"step{s}", "sampling rate lowered to 50 Hz on this machine (kit test)") for s in (1, 2, 3)]
    from rlprof.analysis.report import verdict

    assert "warning: rank 0: says: sampling rate lowered to 50 Hz on this machine (kit test)" in verdict([run.run_dir]).lines


def test_a_run_made_by_the_kit_does_not_report_the_kits_recorder_as_missing(rlprof_run, rlprof_recorder):
    from rlprof.analysis.report import build_reports

    run = rlprof_run(rlprof_recorder, name="writes", mode="discrete", steps=(1,))  # it writes one file per capture
    [report] = build_reports([run.run_dir])
    assert report.missing == [] and report.short_captures == [] and report.ok, report.missing
    assert {s["backend"] for s in report.skipped} == {"rlprof_recorder"}
