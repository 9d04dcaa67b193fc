"""The testing kit's scripted loop finalizes each Profiler once, and again only when the loop itself
failed (issue 31): a kit that finalizes twice on success hides the "second finalize" it then checks."""

from __future__ import annotations

import pytest

import rlprof
from rlprof.runtime.profiler import Profiler
from rlprof.testing.scenario import Scenario, run_scenario


class _Writes:
    """A backend that adds one file at finalize (through ctx.add_artifact, not a return value)."""

    @rlprof.hookimpl
    def finalize(self, ctx):
        path = ctx.output_dir() / "summary.txt"
        path.write_text("done")
        ctx.add_artifact(path)


@pytest.fixture
def finalize_calls(monkeypatch):
    calls: list[str] = []
    real = Profiler.finalize

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("reason", args[0] if args else "end"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Profiler, "finalize", counted)
    return calls


def test_a_successful_loop_finalizes_each_profiler_once_before_the_repeat_check(finalize_calls, tmp_path):
    run = run_scenario(_Writes(), Scenario(name="once"), tmp_path / "once", name="writes")
    # one finalize in the loop, one more by the kit's own repeat check (second_finalize)
    assert finalize_calls == ["end", "end"]
    assert not run.second_finalize.profiler_repeat_differs
    # the kit's second call of the backend's finalize hook saw the file it adds again: already listed
    assert run.second_finalize.new_paths == [] and run.second_finalize.error is None


def test_a_loop_that_fails_still_finalizes_what_it_made(finalize_calls, tmp_path, monkeypatch):
    def broken_play(profilers, run, work, module):
        raise RuntimeError("the scripted trainer broke")

    monkeypatch.setattr("rlprof.testing.scenario._play", broken_play)
    with pytest.raises(RuntimeError, match="the scripted trainer broke"):
        run_scenario(_Writes(), Scenario(name="broken"), tmp_path / "broken", name="writes")
    assert finalize_calls == ["end"]


def test_the_kit_reads_contexts_through_their_public_api():
    """The kit is what plugin authors copy: it reads what a backend added with ctx.added_artifacts(),
    never a context's private fields."""
    import ast
    from pathlib import Path

    import rlprof.testing

    for path in Path(rlprof.testing.__file__).parent.glob("*.py"):
        private = [f"{path.name}:{node.lineno} ctx.{node.attr}" for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ctx"
                   and node.attr.startswith("_")]
        assert not private, private
