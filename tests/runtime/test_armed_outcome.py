"""An armed run that captures nothing says why (issue 46's first day).

``rlprof demo --train-steps 14 --slow-rank 1 --slow-ms 300 --slow-from-step 8 global_profiler.steps=null
global_profiler.trigger.slow_step=1.5``: steps went from ~35 ms to ~330 ms, nothing was captured (``slow_step``
waits for a full ``window``, 20 steps by default, of history), and the run ended "ok" with ``mode ?; tools ?;
0 profiling processes on 0 hosts``. Now the driver's decider says at the run's end what it captured, or why
nothing, in its log and an ``armed`` record; the report's header names the tool and mode from it, and its verdict
says why; ``rlprof check --train-steps`` and the demo warn before such a run.

The decider is driven here with the timings the demo showed (a plain step sequence, no clock, no Ray)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from rlprof.analysis.report import build_reports, render
from rlprof.config.trigger import Trigger, too_short
from rlprof.runtime.unplanned import Decider

DEMO_STEPS = [0.035] * 7 + [0.330] * 7
"""The issue's run: 14 steps, rank 1 slowed by 300 ms from step 8."""


def drive(run_dir: Path, trigger: Trigger | None, seconds: list[float]) -> Decider:
    """The driver's part of a run: each step asked at its start, timed at its end; then the run ends."""
    decider = Decider(run_dir, trigger, tools=["torch"], mode="e2e")
    for step, took in enumerate(seconds, start=1):
        reason = decider.decide(step)
        decider.step_ended(step, took, captured=reason is not None)
    decider.stop()
    return decider


def armed_records(run_dir: Path) -> list[dict]:
    return [r for f in (run_dir / "manifest").glob("*.jsonl") for r in map(json.loads, f.read_text().splitlines())
            if r["type"] == "armed"]


def test_a_run_too_short_for_slow_steps_window_says_so_and_the_report_names_tool_and_mode(tmp_path, caplog):
    run_dir = tmp_path / "save" / "20261128-101710-cbeac1"
    drive(run_dir, Trigger(slow_step=1.5), DEMO_STEPS)
    why = "nothing captured: no rlprof capture request came; slow_step needs 20 steps of history; this run had 14"
    assert f"rlprof: the armed run ended: {why}" in caplog.text  # the run's end says it, in the driver's log
    [record] = armed_records(run_dir)
    assert record["outcome"] == why and record["steps"] == 14 and record["captured"] == []
    [report] = build_reports([tmp_path / "save"])
    text = render(report)
    header = text.splitlines()[0]
    assert "mode e2e; tools torch" in header and "?" not in header
    verdict = text[text.index("verdict:"):]
    assert why in verdict and "every profiled step x role x rank produced output" not in verdict
    assert report.ok  # nothing failed: nothing was planned, and nothing asked for was refused
    assert report.as_dict()["tools"] == ["torch"] and report.as_dict()["modes"] == ["e2e"]


def test_a_run_long_enough_captures_and_its_end_says_what_and_why(tmp_path):
    run_dir = tmp_path / "run"
    decider = drive(run_dir, Trigger(slow_step=1.5, window=5), DEMO_STEPS)
    assert [step for step, _ in decider.captured] == [9]  # step 8 judged against steps 3-7, the next captured
    [record] = armed_records(run_dir)
    assert record["outcome"].startswith("captured step 9 (triggered: step 8 took 9.4\u00d7 the median")
    assert record["captured"] == [{"steps": [9], "reason": decider.captured[0][1]}]


def test_a_trigger_that_never_fires_says_how_close_it_came(tmp_path):
    run_dir = tmp_path / "run"
    drive(run_dir, Trigger(slow_step=1.5, window=3), [1.0, 1.0, 1.0, 1.2, 1.0, 1.1])
    [record] = armed_records(run_dir)
    assert record["outcome"] == ("nothing captured: no rlprof capture request came; no step took more than 1.5x the "
                                 "median of the 3 before it (the most: 1.20x, step 4)")


def test_without_a_trigger_or_a_request_the_end_says_nothing_asked(tmp_path):
    run_dir = tmp_path / "run"
    drive(run_dir, None, [1.0, 1.0])
    [record] = armed_records(run_dir)
    assert record["outcome"] == ("nothing captured: no rlprof capture request came; no trigger is set "
                                 "(global_profiler.trigger)")


def test_slow_step_needs_window_plus_two_steps():
    assert too_short(Trigger(slow_step=1.5), 21) is not None and too_short(Trigger(slow_step=1.5), 22) is None
    assert too_short(Trigger(late_rank=0.2), 3) is None  # late_rank judges each step on its own
    said = too_short(Trigger(slow_step=1.5), 14)
    assert "needs 20 steps of history" in said and "this run has 14" in said and "window=12 or lower" in said


ARMED = ["global_profiler.tool=torch", "actor_rollout_ref.actor.profiler.enable=true",
         "actor_rollout_ref.actor.profiler.all_ranks=true", "global_profiler.trigger.slow_step=1.5"]


def test_check_warns_before_a_run_too_short_for_the_trigger(rlprof_cli):
    said = rlprof_cli("check", *ARMED, "--train-steps", "14")
    assert said.returncode == 0, said.stderr
    assert "warning: global_profiler.trigger.slow_step needs 20 steps of history" in said.stderr
    assert "this run has 14" in said.stderr
    assert "a run of fewer than 22 steps captures nothing by it" in said.stdout  # said even without --train-steps
    assert "needs 20 steps of history" not in rlprof_cli("check", *ARMED, "--train-steps", "22").stderr


class _Started(Exception):
    """Raised where the demo would start Ray (the demo reports it as its failure): what it printed before is all
    this test needs."""


def test_the_demo_warns_before_a_run_too_short_for_the_trigger(tmp_path, monkeypatch, capsys):
    """The issue's exact flags, up to where the demo starts Ray (its trainer stands in: it stops the run there)."""
    def train(*args, **kwargs):
        raise _Started

    monkeypatch.setitem(sys.modules, "rlprof.demo.trainer", types.SimpleNamespace(train=train))
    from rlprof.cli import main

    main(["demo", "--train-steps", "14", "--slow-rank", "1", "--slow-ms", "300", "--slow-from-step", "8",
          "--save-path", str(tmp_path / "p"), "global_profiler.steps=null", "global_profiler.trigger.slow_step=1.5"])
    err = capsys.readouterr().err
    assert "_Started" in err  # it stopped where the demo starts Ray
    assert "rlprof demo: warning: global_profiler.trigger.slow_step needs 20 steps of history" in err
    assert "this run has 14, so slow_step captures nothing" in err
