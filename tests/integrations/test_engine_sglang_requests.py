"""Issue 48: SGLang's request records come from each response's ``meta_info``, source-checked against the real
wheels (0.5.23, the adapter's target, and 0.5.12, verl 0.9.1's pin; no CPU build, so never run here): every key
the adapter reads is one the tokenizer manager or its time stats write, ``enable_metrics`` (what the adapter asks
for) is a server argument of both, and a response shaped as 0.5.23 builds it becomes the record it describes."""

from __future__ import annotations

import ast
import inspect
import textwrap
import zipfile

import pytest

from rlprof.integrations.engines import sglang as adapter_module
from rlprof.integrations.engines.contract import RequestContext, load_engine, request_source
from rlprof.request_records import EngineClock
from rlprof.testing.downloads import cached_wheel

SOURCES = ("sglang/srt/managers/tokenizer_manager.py", "sglang/srt/observability/req_time_stats.py",
           "sglang/srt/server_args.py")
ONLY_0523 = {"first_token_latency"}
"""Keys 0.5.12 does not write (the adapter falls back to ``prefill_finished_time``)."""


def _strings(version: str) -> tuple[set[str], set[str]]:
    """The string constants of the files that build ``meta_info``, and ``ServerArgs``' fields, in one wheel."""
    wheel = cached_wheel(f"sglang=={version}", f"sglang-{version}-")
    strings, fields = set(), set()
    with zipfile.ZipFile(wheel) as zf:
        for name in SOURCES:
            tree = ast.parse(zf.read(name))
            strings |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        # ServerArgs' fields: its own (0.5.12), or its namespaces' under arg_groups/fields/ (0.5.23)
        for name in [n for n in zf.namelist() if n == SOURCES[2] or n.startswith("sglang/srt/arg_groups/fields/")]:
            if not name.endswith(".py"):
                continue
            for node in ast.parse(zf.read(name)).body:
                if isinstance(node, ast.ClassDef) and (node.name == "ServerArgs" or name != SOURCES[2]):
                    fields |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return strings, fields


def adapter_keys() -> set[str]:
    """Every ``meta.get("<key>")`` the adapter's ``requests`` reads."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(adapter_module.SglangEngine.requests)))
    return {node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get" and isinstance(node.func.value, ast.Name) and node.func.value.id == "meta"}


@pytest.mark.parametrize("version", ["0.5.23", "0.5.12"])
def test_every_meta_info_key_the_adapter_reads_is_written_by_sglang(version):
    strings, fields = _strings(version)
    keys = adapter_keys()
    assert {"id", "finish_reason", "request_received_ts", "forward_entry_time", "request_finished_ts"} <= keys
    expected = keys - (ONLY_0523 if version == "0.5.12" else set())
    assert expected - strings == set(), f"sglang {version} writes no meta_info key {sorted(expected - strings)}"
    assert set(load_engine("sglang").request_kwargs()) <= fields  # enable_metrics: a ServerArgs field


def test_a_response_becomes_the_record_it_describes():
    adapter = load_engine("sglang")
    assert request_source(adapter) is adapter
    meta = {"id": "a1b2", "finish_reason": {"type": "length", "length": 96}, "prompt_tokens": 4, "completion_tokens": 96,
            "num_retractions": 1, "request_received_ts": 1000.0, "forward_entry_time": 1000.5, "queue_time": 0.25,
            "first_token_latency": 0.75, "prefill_finished_time": 1000.7, "request_finished_ts": 1010.0,
            "e2e_latency": 10.0, "cached_tokens": 0}
    context = RequestContext(replica=2, step=5, clock=EngineClock(offset_ns=0))
    unfinished = {"meta_info": {**meta, "finish_reason": None}}
    (record,) = adapter.requests([{"text": "", "meta_info": meta}, unfinished], context)
    assert (record.id, record.replica, record.step) == ("a1b2", 2, 5)
    assert (record.arrival_ns, record.queued_ns, record.scheduled_ns, record.first_token_ns, record.last_token_ns) == (
        1000 * 10**9, 1000_250_000_000, 1000_500_000_000, 1000_750_000_000, 1010 * 10**9)
    assert (record.prompt_tokens, record.generated_tokens, record.finish_reason, record.preemptions) == (4, 96, "length", 1)
    # 0.5.12 has no first_token_latency; without enable_metrics no time at all
    old = {k: v for k, v in meta.items() if k != "first_token_latency"}
    assert adapter.requests({"meta_info": old}, context)[0].first_token_ns == 1000_700_000_000
    bare = {k: meta[k] for k in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "num_retractions", "e2e_latency")}
    (plain,) = adapter.requests([{"meta_info": bare}], context)
    assert plain.arrival_ns is None and plain.last_token_ns is None and plain.generated_tokens == 96
