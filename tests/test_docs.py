"""The backend guide stays honest: a hook or context field added to the code without a line in
docs/writing-a-backend.md, or a hook without a test, fails here."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from rlprof import context, hookspecs
from rlprof.hook_docs import hook_reference
from rlprof.runtime.registry import HOOKS

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "writing-a-backend.md"
CONTEXTS = (context.RunInfo, context.Capture, context.HookContext, context.StepContext, context.IterationContext,
            context.RoleContext, context.FinalizeContext, context.RuntimeEnvContext)


def spec_hooks() -> list[str]:
    """Every hook of the spec: the functions hookspecs.py marks as specs."""
    return [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
            if hasattr(fn, f"{hookspecs.PROJECT}_spec")]


def signature(hook: str) -> str:
    """``def name(args) -> result`` exactly as hookspecs.py writes it."""
    text = str(inspect.signature(getattr(hookspecs, hook)))
    return f"def {hook}{text}".replace("'", "")  # annotations are strings (postponed evaluation)


def section(text: str, title_contains: str) -> str:
    """The guide's section whose heading mentions ``title_contains``, up to the next heading of its level or above."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = re.match(r"(#+) ", line)
        if match and title_contains in line:
            level = len(match.group(1))
            body = []
            for following in lines[index + 1:]:
                other = re.match(r"(#+) ", following)
                if other and len(other.group(1)) <= level:
                    break
                body.append(following)
            return "\n".join(body)
    return ""


@pytest.fixture(scope="module")
def guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


def test_the_spec_and_the_registry_agree_on_the_hooks():
    assert sorted(spec_hooks()) == sorted(HOOKS)


@pytest.mark.parametrize("block, hooks", [
    ("hooks", [h for h in hookspecs.HOOKS if h not in hookspecs.OUTSIDE_A_RUN]),
    ("hooks outside a run", list(hookspecs.OUTSIDE_A_RUN))])
def test_the_hook_sections_are_generated_from_the_spec(guide, block, hooks):
    """One source: a hook is documented in its docstring, the guide's sections regenerated from it."""
    generated = guide.split(f"<!-- {block}: begin -->\n", 1)[1].split(f"<!-- {block}: end -->", 1)[0]
    assert generated == hook_reference(hooks), (
        "regenerate the hook sections of docs/writing-a-backend.md with rlprof.hook_docs.hook_reference()")


@pytest.mark.parametrize("hook", spec_hooks())
def test_every_hook_is_documented_with_its_exact_signature(guide, hook):
    assert signature(hook) in guide, f"docs/writing-a-backend.md lacks the signature of {hook}: add `{signature(hook)}`"
    assert section(guide, f"### {hook}").strip(), f"docs/writing-a-backend.md has no '### {hook}' section"


def summary(hook: str) -> str:
    """The first line of the hook's docstring in hookspecs.py, as markdown (``x`` -> `x`, :func:`x` -> `x`)."""
    first = inspect.getdoc(getattr(hookspecs, hook)).splitlines()[0]
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", first).replace("``", "`")


@pytest.mark.parametrize("hook", spec_hooks())
def test_every_hook_section_quotes_the_spec(guide, hook):
    """One source: each hook's section of the guide opens with the spec's own first line."""
    body = section(guide, f"### {hook}")
    assert f"> {summary(hook)}" in body, (
        f"the '### {hook}' section of docs/writing-a-backend.md must quote hookspecs.py's first line of {hook}: "
        f"> {summary(hook)}")


def test_every_context_class_is_named_in_a_hookspec():
    """Each lifecycle hook's ``ctx`` is typed with its context class (pytest types every hookspec parameter)."""
    for hook in spec_hooks():
        params = inspect.signature(getattr(hookspecs, hook)).parameters
        if "ctx" in params:
            annotation = params["ctx"].annotation
            assert annotation is not inspect.Parameter.empty and hasattr(context, str(annotation)), (hook, annotation)


@pytest.mark.parametrize("cls", CONTEXTS, ids=lambda c: c.__name__)
def test_every_context_field_is_documented(guide, cls):
    """Each class's own fields in its section (inherited ones live in the HookContext section)."""
    body = section(guide, f"`{cls.__name__}`") or section(guide, cls.__name__)
    assert body, f"docs/writing-a-backend.md has no section for {cls.__name__}"
    inherited = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base) for f in dataclasses.fields(base)}
    own = [f.name for f in dataclasses.fields(cls) if f.name not in inherited and not f.name.startswith("_")]
    missing = [name for name in own if f"`{name}`" not in body]
    assert not missing, f"{cls.__name__} fields not documented in its section of docs/writing-a-backend.md: {missing}"


def test_the_context_methods_are_documented(guide):
    body = section(guide, "`HookContext`")
    public = [name for name, member in vars(context.HookContext).items()
              if callable(member) and not name.startswith("_")]
    assert {"output_dir", "add_artifact", "warn", "skip"} <= set(public)
    for method in public:
        assert f"ctx.{method}(" in body, f"HookContext.{method} is not documented in the HookContext section"


def test_the_contract_version_and_every_removed_attribute_are_in_the_migration_notes(guide):
    notes = (ROOT / "docs" / "migration.md").read_text(encoding="utf-8")
    assert f"rlprof_contract = {hookspecs.CONTRACT}" in guide and f"rlprof_contract = {hookspecs.CONTRACT}" in notes
    assert f"## Contract {hookspecs.CONTRACT - 1} → {hookspecs.CONTRACT}" in notes
    for (cls, attribute), (_, since) in context.REMOVED_ATTRIBUTES.items():
        assert f"`{cls}.{attribute}` is gone" in section(notes, f"Contract {since - 1} → {since}"), (cls, attribute)


def test_the_errors_helper_is_cited_where_it_lives(guide):
    from rlprof import errors

    assert callable(errors.fail)
    for text in (guide, inspect.getsource(hookspecs)):
        assert "rlprof.errors.fail" in text and "rlprof.config.fail" not in text


def test_the_kit_settings_and_run_attributes_are_documented(guide):
    from rlprof.testing.scenario import BackendRun, Scenario

    body = section(guide, "Testing your backend")
    fields = [f.name for f in dataclasses.fields(Scenario) if f.name != "name"]
    assert not [f for f in fields if f"`{f}`" not in body], "Scenario fields missing from 'Testing your backend'"
    public = [n for n, m in vars(BackendRun).items() if not n.startswith("_") and (isinstance(m, property) or callable(m))]
    assert not [n for n in public if f".{n}" not in body], "BackendRun members missing from 'Testing your backend'"
    assert "work = " in body and "region_s = " in body


def test_the_subprocess_section_covers_what_real_runs_do(guide):
    body = section(guide, "## Subprocess backends")
    for needle in ("pthread_sigmask", "process_group=0", "SIGINT", "ctx.skip", "blocked_signals", "finalize"):
        assert needle in body, needle
    assert (ROOT / "examples" / "rlprof-pyspy" / "pyproject.toml").is_file()


@pytest.mark.parametrize("hook", spec_hooks())
def test_every_hook_has_a_test(hook):
    pattern = re.compile(rf"def test_hook_{hook}\b")
    found = [p for p in (ROOT / "tests").rglob("test_*.py") if pattern.search(p.read_text(encoding="utf-8"))]
    assert found, f"hook {hook} has no test: add `def test_hook_{hook}(...)` under tests/ (see tests/testing/test_testing_kit.py)"


def test_the_environment_switches_are_documented(guide):
    for switch in ("RLPROF_TRACE_HOOKS", "RLPROF_STRICT"):
        assert switch in guide


def test_the_guide_names_the_entry_point_group_and_the_template(guide):
    assert '[project.entry-points."rlprof.backends"]' in guide
    assert "rlprof-<name>" in guide
    assert (ROOT / "examples" / "backend-template" / "pyproject.toml").is_file()
