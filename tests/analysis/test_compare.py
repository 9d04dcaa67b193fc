"""``rlprof compare``: per region (and rank) A, B, change and % change by impact; --fail-above for CI,
held only to changes that stand clear of both runs' noise.

Runs come from :mod:`rlprof.testing.generated_run` with exact durations; tests/analysis/test_report_demo.py
compares two real demo runs.
"""

import json

import pytest

from rlprof.analysis.compare import STEP_ROW
from rlprof.cli.compare import main
from rlprof.testing.generated_run import RegionSpec, generate_run

A, B = "20261122-050000-aaaaaa", "20261122-060000-bbbbbb"
REGIONS = (
    RegionSpec("rollout", "rollout_generate", 40.0),
    RegionSpec("ref", "ref_compute_log_prob", 8.0),
    RegionSpec("actor", "actor_update", 30.0),
)


STEPS = (1, 2, 3, 4, 5, 6, 7)
"""Step 1 is left out as warm-up: 6 compared steps x 2 ranks = 12 samples a side (6 step times), enough to tell."""


def two_runs(tmp_path, b_slow=None, b_regions=REGIONS, jitter=0.0, steps=STEPS):
    generate_run(tmp_path / "a", run_id=A, ranks=2, steps=steps, regions=REGIONS, jitter=jitter, seed=1)
    generate_run(tmp_path / "b", run_id=B, ranks=2, steps=steps, regions=b_regions, jitter=jitter, slow=b_slow, seed=2)
    return tmp_path / "a", tmp_path / "b"


def compare_json(capsys, *args) -> tuple[int, dict]:
    code = main([*map(str, args), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_every_region_with_a_b_change_and_percent_sorted_by_impact(tmp_path, capsys):
    a, b = two_runs(tmp_path, b_slow={(0, "ref_compute_log_prob"): 1.5, (1, "ref_compute_log_prob"): 1.5,
                                      (0, "rollout_generate"): 0.9, (1, "rollout_generate"): 0.9})
    code, data = compare_json(capsys, a, b)
    assert code == 0 and (data["a"], data["b"]) == (A, B)
    rows = {c["region"]: c for c in data["changes"]}
    assert set(rows) == {"rollout_generate", "ref_compute_log_prob", "actor_update", STEP_ROW}
    assert (rows["ref_compute_log_prob"]["a_ms"], rows["ref_compute_log_prob"]["b_ms"]) == (8.0, 12.0)
    assert rows["ref_compute_log_prob"]["change_ms"] == 4.0 and rows["ref_compute_log_prob"]["change_pct"] == 50.0
    assert rows["rollout_generate"]["change_ms"] == -4.0 and rows["rollout_generate"]["change_pct"] == -10.0
    assert rows["actor_update"]["change_ms"] == 0.0
    assert [c["region"] for c in data["changes"]][-1] == "actor_update"  # no change: least impact
    assert abs(data["changes"][0]["change_ms"]) >= abs(data["changes"][1]["change_ms"])
    assert main([str(a), str(b)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("ref_compute_log_prob"))
    assert line.split() == ["ref_compute_log_prob", "8.00", "8.00-8.00", "12.00", "12.00-12.00", "+4.00", "+50.0%", "clearly", "slower"]
    assert "step 1 left out as warm-up, 6 compared" in text


def test_per_rank_rows(tmp_path, capsys):
    a, b = two_runs(tmp_path, b_slow={(1, "actor_update"): 2.0})
    code, data = compare_json(capsys, a, b, "--ranks")
    rows = {(c["region"], c["rank"]): c for c in data["changes"]}
    assert set(rows) == {(r, k) for r in ("rollout_generate", "ref_compute_log_prob", "actor_update", STEP_ROW) for k in (0, 1)}
    assert rows["actor_update", 1]["change_pct"] == 100.0 and rows["actor_update", 0]["change_pct"] == 0.0
    assert data["changes"][0]["region"] in ("actor_update", STEP_ROW) and data["changes"][0]["rank"] == 1


def test_fail_above_exits_nonzero_on_a_regression_only(tmp_path, capsys):
    a, b = two_runs(tmp_path, b_slow={(0, "actor_update"): 1.2, (1, "actor_update"): 1.2})
    assert main([str(a), str(b), "--fail-above", "25"]) == 0
    capsys.readouterr()
    assert main([str(a), str(b), "--fail-above", "10"]) == 1
    err = capsys.readouterr().err
    assert "regression: actor_update 30.00 -> 36.00 ms (+20.0% > 10%, clear of the noise)" in err
    assert main([str(b), str(a), "--fail-above", "10"]) == 0  # faster is never a regression
    capsys.readouterr()
    # a tiny region's noise is not held to the limit
    assert main([str(a), str(b), "--fail-above", "10", "--min-ms", "100"]) == 0


def test_regions_in_only_one_run_are_listed(tmp_path, capsys):
    extra = REGIONS + (RegionSpec("critic", "critic_update", 12.0),)
    a, b = two_runs(tmp_path, b_regions=extra)
    code, data = compare_json(capsys, a, b, "--fail-above", "5")
    critic = next(c for c in data["changes"] if c["region"] == "critic_update")
    assert (critic["a_ms"], critic["b_ms"], critic["note"], critic["change_pct"]) == (None, 12.0, "only in B", None)
    assert data["changes"][0]["region"] in ("critic_update", STEP_ROW)
    assert code == 1 and [c["region"] for c in data["regressions"]] == [STEP_ROW]  # the step grew by the new region


def test_both_runs_under_one_save_path_and_usage_errors(tmp_path, capsys):
    generate_run(tmp_path, run_id=A, ranks=1, steps=(1,), regions=REGIONS, jitter=0.0)
    generate_run(tmp_path, run_id=B, ranks=1, steps=(1,), regions=REGIONS, jitter=0.0, slow={(0, "actor_update"): 1.5})
    assert main([str(tmp_path), str(tmp_path), "--run-a", A, "--run-b", B, "--fail-above", "10"]) == 0  # one sample a side
    err = capsys.readouterr().err
    assert "not held to --fail-above, too few samples to tell: actor_update 30.00 -> 45.00 ms (+50.0%; 1 and 1 samples" in err
    code, data = compare_json(capsys, tmp_path, tmp_path, "--run-a", A, "--run-b", "20261122-06")
    assert (data["a"], data["b"]) == (A, B)
    assert next(c for c in data["changes"] if c["region"] == "actor_update")["change_pct"] == pytest.approx(50.0)
    assert main([str(tmp_path / "nowhere"), str(tmp_path)]) == 2
    assert "A: not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path), str(tmp_path / "empty")]) == 2
    assert "B: no rlprof manifests" in capsys.readouterr().err


def test_the_rlprof_command_dispatches_timeline_and_compare(tmp_path, capsys):
    from rlprof.cli import main as rlprof

    a, b = two_runs(tmp_path)
    assert rlprof(["compare", str(a), str(b)]) == 0
    assert "actor_update" in capsys.readouterr().out
    assert rlprof(["timeline", str(a), "-o", str(tmp_path / "t.json")]) == 0
    assert (tmp_path / "t.json").exists()


def test_two_runs_of_the_same_code_are_inside_the_noise(tmp_path, capsys):
    """Identical code, different noise (20% jitter, another seed): the old compare failed such runs on
    regions whose medians moved by more than the limit; none of them stands clear of the noise."""
    a, b = two_runs(tmp_path, jitter=0.2)
    code, data = compare_json(capsys, a, b, "--fail-above", "5")  # rollout_generate's median grew 8.1%
    assert code == 0 and data["regressions"] == []
    assert {c["change"] for c in data["changes"]} == {"inside the noise"}
    assert any(c["change_pct"] > 5 for c in data["changes"])  # a limit on medians alone would have failed it
    assert data["left_out"] == {"a": 1, "b": 1}
    row = data["changes"][0]
    assert row["a_samples"] == row["b_samples"] == (6 if row["region"] == STEP_ROW else 12)
    assert row["a_spread_ms"][0] <= row["a_ms"] <= row["a_spread_ms"][1]


def test_one_region_slowed_twice_is_flagged_through_the_noise(tmp_path, capsys):
    a, b = two_runs(tmp_path, jitter=0.1, b_slow={(0, "ref_compute_log_prob"): 2.0, (1, "ref_compute_log_prob"): 2.0})
    code, data = compare_json(capsys, a, b, "--fail-above", "10")
    assert code == 1 and [c["region"] for c in data["regressions"]] == ["ref_compute_log_prob"]
    rows = {c["region"]: c["change"] for c in data["changes"]}
    assert rows["ref_compute_log_prob"] == "slower" and rows["actor_update"] == "inside the noise"


def test_the_warm_up_step_is_left_out(tmp_path, capsys):
    """B's first step took twice as long in every region (a cold start): no change, since step 1 is left out."""
    a, b = two_runs(tmp_path, steps=(1, 2))
    for manifest in (b / B / "manifest").iterdir():
        records = [json.loads(line) for line in manifest.read_text().splitlines()]
        for r in records:
            if r["type"] == "region" and r["step"] == 1:
                r["duration_ms"] *= 2
        manifest.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, data = compare_json(capsys, a, b, "--fail-above", "10")
    assert code == 0 and data["left_out"] == {"a": 1, "b": 1}
    assert {c["change_pct"] for c in data["changes"] if c["region"] != STEP_ROW} == {0.0}
    assert main([str(a), str(b)]) == 0
    assert "step 1 left out as warm-up, 1 compared" in capsys.readouterr().out


@pytest.mark.parametrize(("n", "m", "told"), [(1, 1, "too few samples to tell"), (4, 4, "too few samples to tell"),
                                             (2, 8, "too few samples to tell"), (5, 5, "slower"), (3, 12, "slower")])
def test_how_many_samples_it_takes_to_tell(n, m, told):
    """Every sample of B above every sample of A happens by chance with probability 1/C(n+m, n): told
    only where twice that is at most 1%."""
    from rlprof.analysis.compare import told as judged

    assert judged([10.0] * n, [20.0] * m) == told
    if told == "slower":
        assert judged([10.0, 30.0] + [20.0] * (n - 2), [25.0] * m) == "inside the noise"
        assert judged([20.0] * n, [10.0] * m) == "faster"
        assert judged([1.0] * n, [1.5] * m) == "inside the noise"  # clear to the test, under the 1 ms floor


def test_mann_whitney_p_values_match_the_tables():
    """Exact two-sided p-values against the tables (n = m = 5: U = 2 -> 0.032, U = 3 -> 0.056), and the
    normal approximation beyond 400 pairs."""
    from rlprof.analysis.compare import _u_counts, mann_whitney

    assert sum(_u_counts(5, 7)) == 792 and _u_counts(3, 2) == [1, 1, 2, 2, 2, 1, 1]
    a = [1, 2, 3, 4, 5]
    assert mann_whitney(a, [4.5, 4.7, 6, 7, 8])[1] == pytest.approx(0.032, abs=0.001)  # 2 pairs with A above
    assert mann_whitney(a, [4.5, 4.7, 4.8, 7, 8])[1] == pytest.approx(0.056, abs=0.001)  # 3 pairs
    above, p = mann_whitney(list(range(60)), [x + 30 for x in range(60)])  # 435 pairs with A above, 30 ties (half each)
    assert above == 60 * 60 - 435 - 15 and p < 1e-6


@pytest.mark.parametrize("per_rank", [False, True])
def test_every_text_line_shows_the_verdict_json_gives_it(tmp_path, capsys, monkeypatch, per_rank):
    """Issue 40: where both runs' traces said which part moved, the text put "moved most: ..." in place of
    the row's verdict (two identical demo runs read ``+52.6%  moved most: compute +0.36 ms`` while
    ``--json`` said "inside the noise"). Both are rendered here from the same runs, with traces that
    say a part moved in every region; each text line holds its row's verdict and note, as JSON gives them."""
    import rlprof.cli.compare as compare

    monkeypatch.setattr(compare, "add_inside", lambda reports, warn=None: None)
    monkeypatch.setattr(compare, "moved", lambda a, b, region, name=None: "compute +0.36 ms")
    a, b = two_runs(tmp_path, jitter=0.2, b_slow={(0, "ref_compute_log_prob"): 2.0, (1, "ref_compute_log_prob"): 2.0})
    ranks = ["--ranks"] if per_rank else []
    code, data = compare_json(capsys, a, b, *ranks)
    assert main([str(a), str(b), *ranks]) == code == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index("") + 1:]
    told = {c["change"] for c in data["changes"]}
    assert {"slower", "inside the noise"} <= told  # both kinds of row are shown
    assert len(table) == len(data["changes"]) + 1  # the header, then one line per row, in the same order
    for line, c in zip(table[1:], data["changes"]):
        assert line.split()[0] == c["region"] and (not per_rank or c["name"] in line)
        said = "clearly " + c["change"] if c["change"] in ("slower", "faster") else c["change"]
        assert said in line, (line, c)
        assert c["note"] == ("" if c["region"] == STEP_ROW else "moved most: compute +0.36 ms")
        assert line.endswith(c["note"]), (line, c)
