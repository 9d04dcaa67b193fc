"""Hook contract versions: a backend written for a contract the core no longer speaks is refused at
load in one message; one that declares nothing and reads a removed context attribute is told what
replaced it, once, and released; the training and the other backends go on."""

from __future__ import annotations

import json
import logging

import pytest

from rlprof import hookspecs, notices
from rlprof.context import RunInfo, step_context
from rlprof.errors import BackendError
from rlprof.runtime.profiler import Profiler
from rlprof.runtime.registry import contract_of, load_backend
from rlprof.testing.scenario import Scenario


def test_the_spec_speaks_contract_1_and_step_context_has_no_iteration():
    assert hookspecs.CONTRACT == 1 and hookspecs.CONTRACT in hookspecs.SUPPORTED_CONTRACTS
    ctx = step_context(RunInfo("r", 0, 1, "h", 1, __import__("pathlib").Path("/nonexistent"), ("actor",)),
                       "b", {}, None, (), step=1, opens_capture=False, closes_capture=False, ends_step=True)
    with pytest.raises(AttributeError, match=r"removed in rlprof hook contract 1, use the iteration_boundary hook"):
        ctx.iteration
    with pytest.raises(AttributeError, match=r"^'StepContext' object has no attribute 'nonsense'$"):
        ctx.nonsense
    assert getattr(ctx, "region", None) is None  # getattr with a default still works on every context


def test_a_declared_contract_the_core_no_longer_speaks_is_refused_in_one_message(test_backends):
    with pytest.raises(BackendError) as info:
        load_backend("contract0")
    message = str(info.value)
    for part in ('"contract0"', "rlprof-test-backends 0.0.1", "contract 0", "speaks contract 1", "docs/migration.md"):
        assert part in message, message
    assert "\n" not in message


@pytest.mark.parametrize("declared", ["1", 1.0, True, 2])
def test_a_declaration_that_is_not_a_supported_int_is_refused(declared):
    backend = type("B", (), {"rlprof_contract": declared})
    with pytest.raises(BackendError, match=rf"contract {declared!r}, which this rlprof no longer speaks"):
        contract_of(backend, "b")


def test_run_start_refuses_the_contract_0_backend(test_backends, tmp_path):
    config = Scenario(steps=(1,)).config("contract0", tmp_path)
    with pytest.raises(BackendError, match=r"written for rlprof hook contract 0.*docs/migration.md"):
        Profiler(config, roles=("actor", "ref"), run_id="refused")


def test_rlprof_backends_shows_each_contract_and_the_refusal(test_backends, rlprof_cli):
    listing = rlprof_cli("backends")
    assert listing.returncode == 0, listing.stderr
    out = listing.stdout
    block = out[out.index("contract0 "):]
    assert "REFUSED" in block.splitlines()[0]
    assert "docs/migration.md" in block
    recorder = out[out.index("\nrecorder "):]
    assert "contract: 1\n" in recorder
    undeclared = out[out.index("\nundeclared "):]
    assert "contract: 1 (assumed: the backend declares none)" in undeclared
    as_json = rlprof_cli("backends", "--json")
    info = {b["name"]: b for b in json.loads(as_json.stdout)}
    assert info["contract0"]["refused"] and not info["contract0"]["imports"]
    assert (info["recorder"]["contract"], info["recorder"]["contract_declared"]) == (1, True)


def test_an_undeclared_backend_reading_a_removed_attribute_fails_once_and_is_released(test_backends, tmp_path,
                                                                                        caplog, monkeypatch):
    monkeypatch.setenv("RLPROF_STRICT", "0")
    notices.forget()  # nothing said yet in this process: the notice must appear exactly once
    config = Scenario(steps=(1, 2, 3)).config("undeclared", tmp_path)
    config["global_profiler"]["tool"] = ["undeclared", "recorder"]
    for role in ("actor", "ref"):
        config["actor_rollout_ref"][role]["profiler"]["tool_config"]["recorder"] = {"discrete": False}
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        prof = Profiler(config, roles=("actor", "ref"), run_id="undeclared")
        for step in (1, 2, 3, 4):
            prof.start_step(step)
            with prof.role("actor", "update"):
                pass
            prof.step_boundary()
        prof.finalize()
    records = [json.loads(line) for f in (tmp_path / "undeclared" / "manifest").glob("*.jsonl")
               for line in f.read_text().splitlines()]
    errors = [r for r in records if r["type"] == "error"]
    assert len(errors) == 1, errors
    assert errors[0]["backend"] == "undeclared" and errors[0]["hook"] == "step_boundary"
    assert "use the iteration_boundary hook" in errors[0]["error"] and "contract 1" in errors[0]["error"]
    assert [r["backend"] for r in records if r["type"] == "cleanup"] == ["undeclared"]
    said = [r.getMessage() for r in caplog.records if "declares no hook contract" in r.getMessage()]
    assert len(said) == 1  # said once per process, through rlprof.notices
    recorded = {r["capture"] for r in records if r["type"] == "artifact" and r["backend"] == "recorder"}
    assert recorded == {"step1", "step2", "step3"}  # the other backend went on
    assert len([r for r in caplog.records if "AttributeError" in r.getMessage()]) == 1
