"""Unplanned captures (issue 42): an armed run captures a step nobody planned when ``rlprof capture`` asks or a
trigger fires, every selected process the same step, and each capture says why (its ``reason``)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import rlprof
from rlprof.cli.capture import main as capture_main
from rlprof.config.schema import load_config
from rlprof.errors import ConfigError
from rlprof.runtime.plan import armed
from rlprof.runtime.unplanned import Decider, REQUESTS
from rlprof.config.trigger import Trigger
from rlprof.step_metrics import RegionFigures, StepFigures
from rlprof.testing.recorder import RecordingBackend


def _config(save_path: Path, **global_profiler):
    return {"global_profiler": {"tool": "rec", "steps": None, "save_path": str(save_path), **global_profiler},
            "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}


def _captures(run_dir: Path) -> list[dict]:
    found = []
    for file in sorted((run_dir / "manifest").glob("*.jsonl")):
        found += [r for r in map(json.loads, file.read_text().splitlines()) if r["type"] == "capture"]
    return found


def test_a_run_is_armed_whatever_steps_says_and_on_demand_false_disarms_it(tmp_path):
    assert armed(load_config(_config(tmp_path)))
    assert armed(load_config(_config(tmp_path, steps=[3])))
    assert not armed(load_config(_config(tmp_path, on_demand=False)))
    assert not armed(load_config({"global_profiler": {"steps": None}}))  # no tool
    no_role = _config(tmp_path)
    no_role["actor_rollout_ref"]["actor"]["profiler"]["enable"] = False
    assert not armed(load_config(no_role))


@pytest.mark.parametrize("trigger, key, allowed", [
    ({"slow_step": 1}, "global_profiler.trigger.slow_step", "greater than 1"),
    ({"slow_step": "2x"}, "global_profiler.trigger.slow_step", "greater than 1"),
    ({"late_rank": 0}, "global_profiler.trigger.late_rank", "greater than 0"),
    ({"slow_step": 2, "window": 2}, "global_profiler.trigger.window", ">= 3"),
    ({"slow_step": 2, "max_captures": 0}, "global_profiler.trigger.max_captures", ">= 1"),
    ({"slow_step": 2, "cooldown_steps": -1}, "global_profiler.trigger.cooldown_steps", ">= 0"),
    ({"slow": 2}, "global_profiler.trigger.slow", "slow_step"),
    ([1.5], "global_profiler.trigger", "a mapping of slow_step"),
])
def test_a_bad_trigger_names_the_key_the_value_and_what_is_allowed(tmp_path, trigger, key, allowed):
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, trigger=trigger))
    assert str(caught.value).startswith(key + ":") and allowed in str(caught.value)


def test_every_mistake_inside_a_trigger_is_named_at_once(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, trigger={"slow_step": 0.5, "window": 1, "slow": 2}))
    said = str(caught.value)
    for key in ("global_profiler.trigger.slow_step: got 0.5", "global_profiler.trigger.window: got 1",
                "global_profiler.trigger.slow: unknown key"):
        assert key in said, said


@pytest.mark.timing
def test_slow_step_fires_on_a_step_past_the_factor_and_says_why_within_max_captures_and_cooldown():
    decider = Decider(Path("/nonexistent"), Trigger(slow_step=1.5, window=4, max_captures=2, cooldown_steps=3),
                      answers=False)
    fired = {}
    for step, seconds in enumerate([1.0, 1.1, 0.9, 1.0, 1.4, 2.0, 2.2, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0], start=1):
        if decider.decide(step):
            fired[step] = decider._decided[1]
        grant = decider.step_ended(step, seconds)
        if grant is not None:
            assert grant.steps == (step + 1,)
    # step 5 (1.4 s) stays under 1.5x; step 6 (2.0 s) fires; step 7 is in the cooldown (through step 10);
    # step 12 fires the second; step 13 on: max_captures reached
    assert sorted(fired) == [7, 13]
    assert fired[7] == "triggered: step 6 took 1.9\u00d7 the median (1.05 s) of steps 2\u20135"


@pytest.mark.timing
def test_the_steps_just_after_a_capture_neither_fire_slow_step_nor_count_in_its_median():
    """A capture's trace is written in the background beside the next steps: a demo run whose requested
    capture of step 5 slowed step 7 to 1.6x fired the trigger before the slowdown it was waiting for."""
    decider = Decider(Path("/nonexistent"), Trigger(slow_step=1.5, window=3), answers=False)
    times = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 3.0, 6: 2.0, 7: 1.8, 8: 1.0, 9: 2.0}
    grants = {step: decider.step_ended(step, seconds, captured=step == 5) for step, seconds in times.items()}
    assert [step for step, grant in grants.items() if grant is not None] == [9]  # 6 and 7 settle after 5
    assert "of steps 3–8" in grants[9].reason  # 5, 6 and 7 are not in the median's window


@pytest.mark.timing
def test_late_rank_fires_when_a_rank_enters_later_than_the_fraction_of_the_median():
    def figures(step, late_by):
        region = RegionFigures("actor", "actor_update", {0: 1.0, 1: 1.0}, {0: 0.0, 1: late_by}, 1.0, 0, 1.0, 0.0,
                               1 if late_by else -1, late_by)
        return StepFigures(step, 0, 1, {("actor", "actor_update"): region}, 0.0, 2)

    decider = Decider(Path("/nonexistent"), Trigger(late_rank=0.2), answers=False)
    assert decider.figures(figures(3, 0.1)) is None
    grant = decider.figures(figures(4, 0.5))
    assert grant.steps == (5,) and grant.reason.startswith("triggered: rank 1 entered actor_update of step 4 0.5 s")


def _train(prof: rlprof.Profiler, steps: int, seconds: float, started: dict | None = None,
           stop: threading.Event | None = None) -> None:
    """``steps`` steps of ``seconds`` each, or, with ``stop``, steps until it is set (``steps`` at most)."""
    for step in range(1, steps + 1):
        if stop is not None and stop.is_set():
            break
        if started is not None:
            started[prof.run.rank] = step
        prof.start_step(step)
        with prof.role("actor", "update"):
            time.sleep(seconds)
        prof.step_boundary()
    prof.finalize()


def _until(condition, what: str) -> None:
    """Waits for ``condition()`` (the bound, 120 s, only ends a test that is failing anyway)."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.01)


@pytest.mark.timing
def test_rlprof_capture_makes_every_rank_of_a_plain_run_capture_the_same_step_and_says_why(tmp_path, capsys):
    """Two ranks without a driver, nothing planned: `rlprof capture SAVE_PATH` while they train; rank 0 answers
    (two steps on), rank 1 reads the answer; exactly that step is captured on both, its reason the request.
    The ranks train until both are past the granted step (before: 30 steps, which a busy machine could end
    before the request was read)."""
    recorders = [RecordingBackend(), RecordingBackend()]
    profs = [rlprof.Profiler(_config(tmp_path), rank=r, world_size=2, run_id="asked", backends={"rec": recorders[r]})
             for r in range(2)]
    assert not any(p.active for p in profs) and all(p.plan.armed == ("actor",) for p in profs)
    started: dict[int, int] = {}
    stop = threading.Event()
    threads = [threading.Thread(target=_train, args=(p, 100_000, 0.01, started, stop)) for p in profs]
    for t in threads:
        t.start()
    try:
        _until(lambda: started.get(0, 0) >= 3, "rank 0's step 3")
        status = capture_main([str(tmp_path)])
        out = capsys.readouterr().out
        assert status == 0, out
        [answer] = (tmp_path / "asked" / REQUESTS).glob("r*.answer.json")
        granted = json.loads(answer.read_text())
        [step] = granted["steps"]
        _until(lambda: min(started.get(0, 0), started.get(1, 0)) > step + 1, f"both ranks past step {step}")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert f"will capture step {step} on every selected process (request {granted['id']}" in out
    captures = _captures(tmp_path / "asked")
    assert sorted((c["rank"], c["step"]) for c in captures) == [(0, step), (1, step)]
    assert {c["reason"] for c in captures} == {f"requested: {granted['id']}"}
    assert granted["asked_at_step"] + 2 == step  # rank 0 grants two steps on, for the others to hear of it


def test_on_demand_false_writes_nothing_and_rlprof_capture_finds_no_run(tmp_path, capsys):
    prof = rlprof.Profiler(_config(tmp_path, on_demand=False), run_id="off", backends={"rec": RecordingBackend()})
    _train(prof, 3, 0.0)
    assert not (tmp_path / "off" / REQUESTS).exists()
    assert capture_main([str(tmp_path), "--wait", "0"]) == 2
    assert "no running armed run" in capsys.readouterr().err


@pytest.mark.timing
def test_a_slow_step_of_a_one_process_run_captures_the_next_step(tmp_path, monkeypatch):
    """Step 5 takes 12x the others, on the suite's fake clock (tests/fake_clock.py): the Profiler's own step
    times, which the trigger reads, are exact, so no other step can pass 3x on a busy machine."""
    from fake_clock import FakeClock  # tests/fake_clock.py
    from rlprof.runtime import profiler as profiler_module
    from rlprof.runtime.session import ProcessSession

    clock = FakeClock()
    monkeypatch.setattr(profiler_module, "_now", clock)
    monkeypatch.setattr(ProcessSession, "clock_ns", clock)
    recorder = RecordingBackend()
    prof = rlprof.Profiler(_config(tmp_path, trigger={"slow_step": 3, "window": 3}), run_id="slow",
                           backends={"rec": recorder})
    for step in range(1, 9):
        prof.start_step(step)
        with prof.role("actor", "update"):
            clock.advance_ms(600 if step == 5 else 50)
        prof.step_boundary()
    prof.finalize()
    [capture] = _captures(tmp_path / "slow")
    assert capture["step"] == 6 and capture["reason"] == "triggered: step 5 took 12.0\u00d7 the median (0.05 s) of steps 2\u20134"


def test_rlprof_check_says_when_a_run_is_armed_explains_the_trigger_and_refuses_bad_values(capsys):
    from rlprof.cli import main as cli_main

    enable = ["global_profiler.tool=torch", "actor_rollout_ref.actor.profiler.enable=true",
              "actor_rollout_ref.actor.profiler.ranks=[1]"]
    assert cli_main(["check", *enable, "global_profiler.trigger.slow_step=1.5", "--world-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "nothing planned (global_profiler.steps is null)" in out
    assert "armed (global_profiler.on_demand: true" in out and "actor ranks 1" in out
    assert "a step longer than 1.5x the median of the last 20 steps (window)" in out
    assert "at most 3 steps (max_captures), none within 10 steps of the last (cooldown_steps)" in out
    assert cli_main(["check", *enable, "global_profiler.on_demand=false", "global_profiler.steps=[2]"]) == 0
    assert "not armed: global_profiler.on_demand is false" in capsys.readouterr().out
    assert cli_main(["check", *enable, "global_profiler.trigger.cooldown_steps=-2", "--json"]) == 2
    err = capsys.readouterr()
    assert "global_profiler.trigger.cooldown_steps" in err.out + err.err and "an integer >= 0" in err.out + err.err
    assert cli_main(["check", *enable, "--json", "--world-size", "2"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["armed"] is True and shown["armed_roles"]["actor"] == [[1, 1]] and shown["trigger"] is None


def test_late_rank_reads_the_drivers_step_metrics_and_captures_the_next_step():
    """The Ray controller hands its StepBook to its decider: figures completed by a step start are read there."""
    from rlprof.runtime.step_book import StepBook

    book = StepBook(None, "late", None)
    decider = Decider(Path("/nonexistent"), Trigger(late_rank=0.2), answers=False)
    decider.book = book
    second = 1_000_000_000
    reasons = {}
    for step in range(1, 8):
        start = step * 10 * second
        reasons[step] = decider.decide(step)
        book.began(step, start)
        late = second if step == 5 else 0  # rank 1 enters update a second late in step 5 (the median of 2 s and 1 s: 1.5 s)
        for rank in (0, 1):
            book.timing(rank, "actor", "actor_update", start + second + (late if rank else 0), start + 3 * second)
        book.ended(step, start + 4 * second)
        book.pump(closing=True)
    assert {s: r for s, r in reasons.items() if r} == {
        6: "triggered: rank 1 entered actor_update of step 5 1 s after the others (67% of its median 1.5 s)"}


def test_rollout_tail_reads_the_drivers_request_figures_and_captures_the_next_step():
    """Issue 48: a replica whose tail (its running requests below half their peak, to its last end) takes more than
    the share of its generate window has the next step captured; within max_captures, never a step already past."""
    from rlprof.request_records import RequestRecord
    from rlprof.runtime.step_book import StepBook

    book = StepBook(None, "tail", None)
    decider = Decider(Path("/nonexistent"), Trigger(rollout_tail=0.5, max_captures=1, cooldown_steps=0), answers=False)
    decider.book = book
    second = 1_000_000_000
    reasons = {}
    for step in range(1, 8):
        start = step * 10 * second
        reasons[step] = decider.decide(step)
        book.began(step, start)
        long = 8 * second if step in (4, 6) else second  # replica 1: one request 8x the others in steps 4 and 6
        book.requests([RequestRecord(f"{step}-{i}", 1, step, start, start, start, start, start + (long if i == 0 else second))
                       for i in range(4)])
        book.ended(step, start + 9 * second)
        book.pump(closing=True)
    assert {s: r for s, r in reasons.items() if r} == {5: (
        "triggered: replica 1's rollout tail took 88% of its generate window in step 4 (7 s after its running requests "
        "fell below half their peak of 4)")}  # step 6's tail: max_captures reached


def test_rollout_tail_is_a_share_between_0_and_1():
    assert load_config({"global_profiler": {"tool": "torch", "trigger": {"rollout_tail": 0.6}}}).global_.trigger.rollout_tail == 0.6
    for bad in (0, 1, 1.5, "half", True):
        with pytest.raises(ConfigError) as info:
            load_config({"global_profiler": {"tool": "torch", "trigger": {"rollout_tail": bad}}})
        assert str(info.value).startswith("global_profiler.trigger.rollout_tail: got") and "share between 0 and 1" in str(info.value)


class _StartsWithTheProcess:
    """A backend that must start with the worker process (as nsys does): it implements worker_runtime_env."""

    rlprof_contract = 1

    @rlprof.hookimpl
    def worker_runtime_env(self, ctx):
        return {"env_vars": {"UNDER_IT": "1"}}

    @rlprof.hookimpl
    def start_step(self, ctx):
        return None


def test_a_tool_that_must_start_with_the_process_refuses_mid_run_requests_with_the_reason(tmp_path, capsys):
    from rlprof.runtime.unplanned import refusal

    config = load_config(_config(tmp_path, tool="launcher"))
    backends = {"launcher": _StartsWithTheProcess()}
    why = refusal(config, launched=False, backends=backends)
    assert why.startswith("launcher cannot start mid-run: it must start with the worker processes")
    assert refusal(config, launched=True, backends=backends) is None  # a step was planned: workers started under it
    assert refusal(load_config(_config(tmp_path)), launched=False, backends={"rec": RecordingBackend()}) is None
    run_dir = tmp_path / "refusing"
    decider = Decider(run_dir, refuse=why)
    assert capture_main([str(run_dir), "--wait", "0"]) == 1
    assert f"refuses captures mid-run: {why}" in capsys.readouterr().err
    assert decider.decide(1) is None and not list((run_dir / REQUESTS).glob("r*.json"))


def test_a_request_asked_as_a_planned_step_starts_gets_the_next_step_the_plan_leaves_out(tmp_path):
    """A request asks for a capture more: the step starting when it arrives, if planned, is captured anyway, so the
    request gets the first step neither planned nor granted (verl's fully async trainer, asked as planned version 2
    began, was answered 'will capture step 2' in some runs and 3 in others, as the request raced the step start)."""
    from rlprof.runtime.capture_requests import answer, request

    run_dir = tmp_path / "run"
    decider = Decider(run_dir, planned=(2, 3, 5))
    assert decider.decide(1) is None
    one = request(run_dir)
    assert decider.decide(2) is None  # planned: the plan captures it, not the request
    assert answer(run_dir, one, 0) == {"id": one, "steps": [4], "reason": f"requested: {one}", "asked_at_step": 2}
    two = request(run_dir, steps=2)  # N steps in a row, none of them planned or granted already
    assert decider.decide(3) is None
    assert answer(run_dir, two, 0)["steps"] == [6, 7]
    assert [decider.decide(step) for step in (4, 5, 6, 7, 8)] == [
        f"requested: {one}", None, f"requested: {two}", f"requested: {two}", None]


from hypothesis import given, settings, strategies as st

_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-5, 50) | st.floats(allow_nan=True) | st.text(max_size=5),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                       max_leaves=8)
_KEYS = st.sampled_from(["slow_step", "late_rank", "rollout_tail", "window", "max_captures", "cooldown_steps", "slow",
                         "_target_"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(_VALUES, st.dictionaries(_KEYS, _VALUES, max_size=5)))
def test_any_trigger_value_is_read_or_refused_naming_its_key(value):
    try:
        config = load_config({"global_profiler": {"tool": "torch", "trigger": value}})
    except ConfigError as exc:
        for one in getattr(exc, "errors", None) or [exc]:  # several mistakes: each names its key
            assert str(one).startswith("global_profiler.trigger") and ("allowed: " in str(one) or "unknown key" in str(one))
    else:
        trigger = config.global_.trigger
        assert trigger is None or (trigger.enabled and trigger.window >= 3 and trigger.max_captures >= 1)
