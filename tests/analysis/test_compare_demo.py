"""``rlprof compare`` and the straggler flags on real runs (issues 34 and 40): two runs of
``rlprof demo --steps 1,2,3,4,5,6``, the same code one after the other (step 1 left out as warm-up: 5
compared steps x 2 ranks = 10 samples a side), and a third whose rank 1 spends 30 ms more in
``rollout_generate`` on purpose (``--slow-rank 1 --slow-in rollout_generate``: a sleep inside the region,
about 10x its usual 2-4 ms), all made once per session (conftest.py's ``demo_run``).

On the shared 2-core VM other jobs' load changes between runs, and it is real to the samples: two
runs of the same demo differed by up to 3.5x in a region's median. Before issue 40, 7 of 15 such pairs
had a row the Mann-Whitney test alone called clearly slower or faster; with the runs' own step-to-step
ranges as the noise, none of their 150 rows (tests/analysis/test_noise.py holds one such pair's numbers)."""

import json
import re

import pytest

from demo_runs import SIX_STEPS, cli  # tests/analysis/demo_runs.py

pytestmark = pytest.mark.slow

SLOW = (*SIX_STEPS, "--slow-rank", "1", "--slow-in", "rollout_generate")


def told_in_text(stdout: str) -> dict[str, str]:
    """``region -> the text line's last column`` (the verdict, then any note) of ``rlprof compare``'s table."""
    lines = stdout.splitlines()
    table = lines[lines.index("") + 1:]
    cells = {}
    for line in table[1:]:
        if not line.strip():
            break
        match = re.match(r"(\S+)\s+.*?[+-]\d+\.\d+%\s+(.*)$", line)
        assert match, line
        cells[match[1]] = match[2]
    return cells


def test_two_identical_demo_runs_differ_by_no_row_in_text_or_json(demo_run):
    a, b = demo_run("six", *SIX_STEPS), demo_run("six-again", *SIX_STEPS)
    text = cli("compare", a, b, "--fail-above", "10")
    data = cli("compare", a, b, "--fail-above", "10", "--json")
    assert text.returncode == data.returncode == 0, text.stdout + text.stderr
    assert "step 1 left out as warm-up, 5 compared" in text.stdout
    rows = json.loads(data.stdout)["changes"]
    assert {c["change"] for c in rows} == {"inside the noise"}, rows
    shown = told_in_text(text.stdout)
    assert set(shown) == {c["region"] for c in rows}
    for c in rows:  # every line says what --json says, then its note (the part that moved most, from the traces)
        assert shown[c["region"]] == "; ".join(part for part in ("inside the noise", c["note"]) if part), (shown, c)
    assert not [cell for cell in shown.values() if "clearly" in cell]


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
