"""``rlprof compare``: per region (and rank) A, B, change and % change by impact; --fail-above for CI.

Runs come from :mod:`rlprof.testing.generated_run` with exact durations; tests/analysis/test_report_demo.py
compares two real demo runs.
"""

import json

import pytest

from rlprof.analysis.compare import STEP_ROW, main
from rlprof.testing.generated_run import RegionSpec, generate_run

A, B = "20261122-050000-aaaaaa", "20261122-060000-bbbbbb"
REGIONS = (
    RegionSpec("rollout", "rollout_generate", 40.0),
    RegionSpec("ref", "ref_compute_log_prob", 8.0),
    RegionSpec("actor", "actor_update", 30.0),
)


def two_runs(tmp_path, b_slow=None, b_regions=REGIONS):
    generate_run(tmp_path / "a", run_id=A, ranks=2, steps=(1, 2), regions=REGIONS, jitter=0.0)
    generate_run(tmp_path / "b", run_id=B, ranks=2, steps=(1, 2), regions=b_regions, jitter=0.0, slow=b_slow)
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
    assert line.split() == ["ref_compute_log_prob", "8.00", "12.00", "+4.00", "+50.0%"]


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
    assert "regression: actor_update 30.00 -> 36.00 ms (+20.0% > 10%)" in err
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
