"""A trace kind a plugin adds alone, through its ``trace_reader`` hook, is found wherever rlprof looks for traces
(issue 47): ``rlprof breakdown DIR`` walks a folder with the installed readers' patterns, and ``rlprof timeline
--with-traces`` merges the files a backend's own reader claims as Chrome traces. Nothing in the core names
the plugin's file pattern (``*.spans.json``): the distribution is written here and pip-installed, as a user
installs a plugin."""

from __future__ import annotations

import json
import textwrap

import pytest

from installing import discoverable, private_site  # tests/installing.py

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "rlprof-spans"
version = "0.0.1"
requires-python = ">=3.10"

[project.entry-points."rlprof.backends"]
spans = "rlprof_spans.backend:SpansBackend"

[tool.setuptools]
packages = ["rlprof_spans"]
"""

BACKEND = '''
"""Writes each capture's role regions as a Chrome trace of its own kind, ``<capture>.spans.json``."""

import json
import os
import time

import rlprof
from rlprof.hookspecs import TraceReader
from rlprof.layout import open_file


class SpansBackend:
    rlprof_contract = 1

    def __init__(self):
        self.open = {}
        self.spans = []

    @rlprof.hookimpl
    def start_role(self, ctx):
        self.open[ctx.region] = time.time_ns()

    @rlprof.hookimpl
    def stop_role(self, ctx):
        self.spans.append((ctx.region, self.open.pop(ctx.region), time.time_ns()))

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        if not ctx.closes_capture:
            return None
        events = [{"ph": "X", "cat": "spans", "name": f"spans:{name}", "pid": os.getpid(), "tid": 1,
                   "ts": start / 1000, "dur": (end - start) / 1000} for name, start, end in self.spans]
        self.spans = []
        path = ctx.output_dir() / f"{ctx.capture.capture_id}.spans.json"
        with open_file(path, ctx.run.run_dir, "w") as handle:
            handle.write(json.dumps({"traceEvents": events}))
        return [path]

    @rlprof.hookimpl
    def trace_reader(self):
        return TraceReader(patterns=("*.spans.json",), target="rlprof_spans.reader:read_trace", format="spans",
                           chrome=True)
'''

READER = '''
"""A ``*.spans.json`` file as the breakdown's events: each span a region, and a host op filling it."""

import json

from rlprof.analysis.breakdown import COMPUTE, Region, TraceEvents


def read_trace(path):
    with open(path, encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    trace = TraceEvents(path=path, rank=0, device="cpu")
    for e in events:
        start, end = e["ts"] / 1000, (e["ts"] + e["dur"]) / 1000
        trace.regions.append(Region(e["name"].removeprefix("spans:"), None, start, end))
        trace.add(start, end, COMPUTE)
    return trace
'''


@pytest.fixture(scope="module")
def spans_site(tmp_path_factory):
    source = tmp_path_factory.mktemp("spans-source") / "rlprof-spans"
    (source / "rlprof_spans").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "rlprof_spans" / "__init__.py").write_text("")
    (source / "rlprof_spans" / "backend.py").write_text(textwrap.dedent(BACKEND))
    (source / "rlprof_spans" / "reader.py").write_text(textwrap.dedent(READER))
    return private_site(tmp_path_factory, source, "spans")


@pytest.fixture
def spans_run(spans_site, monkeypatch, tmp_path):
    """One profiled step of a run whose tool is the plugin's ``spans``."""
    import rlprof

    discoverable(spans_site, monkeypatch, "rlprof_spans")
    monkeypatch.setenv("PYTHONPATH", str(spans_site))  # the in-run analysis' child reads the plugin's files too
    save = tmp_path / "save"
    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), run_id="spans-run", overrides=[
        "global_profiler.tool=spans", f"global_profiler.save_path={save}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    prof.start_step(1)
    with prof.role("actor", "update"):
        sum(range(100_000))
    prof.step_boundary()
    prof.finalize()
    return save


def test_rlprof_breakdown_of_a_folder_reads_the_plugin_s_own_trace_kind(spans_run, rlprof_cli):
    shown = rlprof_cli("breakdown", spans_run, "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["rows"]
    assert {row["region"] for row in rows if row["path"].endswith(".spans.json")} >= {"actor_update"}


def test_rlprof_timeline_with_traces_merges_the_plugin_s_chrome_trace(spans_run, rlprof_cli, tmp_path):
    out = tmp_path / "timeline.json"
    shown = rlprof_cli("timeline", spans_run, "-o", out, "--with-traces")
    assert shown.returncode == 0, shown.stderr
    events = json.loads(out.read_text())["traceEvents"]
    merged = [e for e in events if e.get("name") == "spans:actor_update" and e.get("ph") == "X"]
    region = [e for e in events if e.get("name") == "actor_update" and e.get("ph") == "X" and e.get("cat") != "spans"]
    assert len(merged) == 1 and len(region) == 1, (merged, region)
    assert merged[0]["pid"] == region[0]["pid"]  # under the rank's own process, on the manifest's clock
    assert abs(merged[0]["ts"] - region[0]["ts"]) < 50_000
