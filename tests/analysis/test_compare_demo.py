"""``rlprof compare`` and the straggler flags on real runs (issues 34 and 40): ``rlprof demo --steps
1,2,3,4,5,6`` (step 1 left out as warm-up: 5 compared steps x 2 ranks = 10 samples a side), and a second
whose rank 1 spends 1500 ms more in ``rollout_generate`` on purpose (``--slow-rank 1 --slow-in rollout_generate
--slow-ms 1500``: a sleep inside the region, about 500x its usual 2-4 ms), both made once per session
(conftest.py's ``demo_run``).

The slowdown is planted far above any noise a busy machine adds: at 30 ms (10x the region) a CI run under load
flagged the slowed rank in 1 of 6 steps; at 300 ms a fresh-clone run said the step's +147.5% was inside the
noise (the slowed run's own step times ranged 390-691 ms, wider than the change); so the run-level rows are not
held to a verdict here, the slowed rank's rows are. That two runs of the same code differ by no row is the noise
rule's claim on recorded timings of such a pair, which a test can hold whatever the machine's load:
tests/analysis/test_noise.py::test_two_runs_of_the_same_demo_on_a_busy_machine_differ_by_no_row (two real runs
one after the other differ as the machine's load changes between them; before issue 46 a second demo run
checked it here, and its format checks moved onto the pair below)."""

import json
import re

import pytest

from demo_runs import SIX_STEPS, cli  # tests/analysis/demo_runs.py

pytestmark = pytest.mark.slow

SLOW = (*SIX_STEPS, "--slow-rank", "1", "--slow-in", "rollout_generate", "--slow-ms", "1500")


def told_in_text(stdout: str) -> dict[str, str]:
    """``region -> the text line's last column`` (the verdict, then any note) of ``rlprof compare``'s table."""
    lines = stdout.splitlines()
    table = lines[lines.index("") + 1:]
    cells = {}
    for line in table[1:]:
        if not line.strip():
            break
        # the row's name up to the first wide gap ('(requests) tail' holds a space); a change in %, or '-' where
        # A is 0 (the demo's request tail: one batch, no tail)
        match = re.match(r"(\S(?:.*?\S)?)\s{2,}.*?(?:[+-]\d+\.\d+%|[+-]\d+\.\d+\s+-)\s+(.*)$", line)
        assert match, line
        cells[match[1]] = match[2]
    return cells


def test_text_and_json_say_the_same_of_every_row_and_leave_out_the_warm_up(demo_run):
    """Every line of the text table says what ``--json`` says of its row (the verdict, then its note: the part
    that moved most, from the traces), and both exit alike; step 1 is left out as warm-up. What the verdicts are is
    not asked here: the run-level ``(step)`` row of two real runs is judged against their own step-to-step range,
    which one loaded step can widen past any planted change (a fresh-clone CI run: A's steps 69-1557 ms). The planted
    regression is asserted per rank, below, where the slowed rank's own range stays clear."""
    a, slow = demo_run("six", *SIX_STEPS), demo_run("six-slow", *SLOW)
    text = cli("compare", a, slow, "--fail-above", "10")
    data = cli("compare", a, slow, "--fail-above", "10", "--json")
    assert text.returncode == data.returncode in (0, 1), text.stdout + text.stderr
    assert bool(json.loads(data.stdout)["regressions"]) == (data.returncode == 1)
    assert "step 1 left out as warm-up, 5 compared" in text.stdout
    rows = json.loads(data.stdout)["changes"]
    shown = told_in_text(text.stdout)
    assert set(shown) == {c["region"] for c in rows}
    for c in rows:
        said = f"clearly {c['change']}" if c["change"] in ("slower", "faster") else c["change"]
        assert shown[c["region"]] == "; ".join(part for part in (said, c["note"]) if part), (shown, c)


@pytest.mark.timing
def test_a_rank_slowed_for_real_is_a_straggler_and_a_regression(demo_run):
    a, slow = demo_run("six", *SIX_STEPS), demo_run("six-slow", *SLOW)
    [run] = json.loads(cli("report", slow, "--json").stdout)["runs"]
    flagged = {(s["step"], s["region"], s["name"]) for s in run["stragglers"]}
    assert {region for _, region, name in flagged} == {"rollout_generate"} and {name for _, _, name in flagged} == {"rank 1"}
    assert len(flagged) >= 5, run["stragglers"]  # in (nearly) every one of the 6 profiled steps
    skews = [k for k in run["inside"]["skew"] if k["flagged"] and k["region"] == "rollout_generate"]
    assert skews and {k["most"] for k in skews} == {"rank 1"}  # the sleep is idle time in rank 1's trace
    proc = cli("compare", a, slow, "--ranks", "--fail-above", "10", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    regressions = {(c["region"], c["name"]) for c in json.loads(proc.stdout)["regressions"]}
    assert ("rollout_generate", "rank 1") in regressions and ("rollout_generate", "rank 0") not in regressions
    [plain] = json.loads(cli("report", a, "--json").stdout)["runs"]
    assert plain["stragglers"] == []
