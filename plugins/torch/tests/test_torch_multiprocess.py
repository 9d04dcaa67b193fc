"""Two ranks in two processes: rank selection seen from the files, and the traces read back by HTA."""

from __future__ import annotations

import importlib.util

import pytest

from rlprof.manifest import read_records


def two_ranks(make_config, run_ranks, tmp_path, **config_kwargs):
    run_ranks(make_config(**config_kwargs), world_size=2, run_id="two-ranks")
    return tmp_path / "profile" / "two-ranks"


def test_only_the_selected_rank_writes_traces(make_config, run_ranks, tmp_path, read_trace):
    run_dir = two_ranks(make_config, run_ranks, tmp_path, actor={"all_ranks": False, "ranks": [1]})
    records = list(read_records([run_dir]))
    artifacts = [r for r in records if r["type"] == "artifact"]
    assert {r["rank"] for r in records} == {1}
    assert [(r["backend"], r["capture"]) for r in artifacts] == [("torch", "step1"), ("torch", "step2")]
    for record in artifacts:
        trace = read_trace(run_dir / record["path"])
        assert trace["distributedInfo"]["rank"] == 1 and trace.count("actor_update") == 1
    assert sorted(p.name for p in run_dir.rglob("*.json.gz")) == ["rank1.pt.trace.json.gz"] * 2


@pytest.mark.slow
def test_hta_reads_a_two_rank_capture_as_a_multi_rank_job(make_config, run_ranks, tmp_path):
    if importlib.util.find_spec("hta") is None:
        pytest.skip("HolisticTraceAnalysis is not installed (pip install HolisticTraceAnalysis)")
    from hta.trace_analysis import TraceAnalysis

    from rlprof_torch.hta import gather_traces

    run_dir = two_ranks(make_config, run_ranks, tmp_path)
    trace_dir = gather_traces(run_dir, "step2")
    assert len(list(trace_dir.iterdir())) == 2
    analysis = TraceAnalysis(trace_dir=str(trace_dir))
    assert sorted(analysis.t.get_ranks()) == [0, 1]
    for rank in (0, 1):
        frame = analysis.t.get_trace(rank)
        names = set(analysis.t.symbol_table.get_sym_table()[i] for i in frame["name"].unique())
        assert {"actor_update", "ref_compute_log_prob", "ProfilerStep#2"} <= names
        assert 2 in set(frame["iteration"])  # ProfilerStep#2 gave HTA the iteration number
