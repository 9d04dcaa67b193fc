"""Generated hostile configurations for fuzzing the loader, ``rlprof check`` and ``Profiler()``.

Shared by ``tests/config/test_config_fuzz.py`` (a fixed budget in CI) and ``scripts/fuzz_config.py`` (the
long run, each case in a child process to catch hangs and crashes).

A case starts from a real configuration — an example of the seed guides (``test_plan_seeds.CASES``,
the legacy guides' keys) or verl 0.9.1's generated trainer config — and applies a few mutations drawn
from the real key space: values of the wrong type or range, deleted/renamed/added keys (typos;
keys that are not strings, ``true``, ``1``, ``2.5``, ``null``, a tuple, bytes, planted at every depth of every
profiler section and in override values), sections replaced by null/list/scalar, interpolations (dangling, malformed,
self-referencing), deep nesting, shared references (what a YAML alias becomes) up to an alias bomb.
The result is handed over as a dict, a DictConfig (one nested past the depth limit is built the way a user
with a raised recursion limit could: `_deep_dictconfig`), a YAML file or dotted overrides.
"""

from __future__ import annotations

import copy
import os
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

KEYS = [
    # global_profiler and role profiler keys, tool_config keys the backends and verl know
    "tool", "steps", "save_path", "profile_continuous_steps", "global_tool_config", "relocate_results", "finish_hook_cmd",
    "finish_hook_all_ranks", "finish_hook_ranks", "enable", "all_ranks", "ranks", "tool_config", "schedule", "discrete",
    "contents", "level", "analysis", "skip_first", "wait", "warmup", "active", "repeat", "profile_token_start",
    "profile_token_end", "trace_alloc_max_entries", "stack_depth", "memory_snapshot_num_steps", "context", "stacks",
    "kw_args", "npu", "nsys", "torch", "torch_memory", "precision_debugger", "recorder", "profiler", "mode",
    "profile_ranks", "profile_ranks_all", "profile_discrete", "profile_steps", "npu_profile", "options", "with_npu",
    "with_cpu", "with_memory", "record_shapes", "with_module", "with_stack", "_target_", "name", "roles", "stages",
]
SECTION_PATHS = [
    "global_profiler", "global_profiler.global_tool_config", "actor_rollout_ref", "actor_rollout_ref.actor",
    "actor_rollout_ref.actor.profiler", "actor_rollout_ref.actor.profiler.tool_config", "actor_rollout_ref.rollout",
    "actor_rollout_ref.rollout.profiler", "actor_rollout_ref.ref.profiler", "critic", "critic.profiler",
    "reward_model.profiler", "trainer", "actor_rollout_ref.profiler", "npu_profile", "trainer.npu_profile.options",
    "actor_rollout_ref.critic", "actor_rollout_ref.rm",
]
KEY_PATHS = SECTION_PATHS + [
    "global_profiler.global_tool_config.torch", "global_profiler.global_tool_config.npu.contents_by",
    "actor_rollout_ref.actor.profiler.tool_config.torch", "actor_rollout_ref.actor.profiler.tool_config.torch.schedule",
    "actor_rollout_ref.rollout.profiler.tool_config.nsys.options", "critic.profiler.tool_config.npu",
    "critic.profiler.schedule", "reward_model.profiler.tool_config",
]
"""Mappings where the "key" mutation plants a key that is not a string (and from there one to three levels down)."""
NON_STRING_KEYS = [True, False, 0, 1, -1, 7, 2.5, float("nan"), None, (1, 2), b"k"]
"""Keys YAML (``true:``, ``1:``, ``1.5:``, ``null:``, ``!!binary``), a dict or a DictConfig can hold besides strings."""
TOOLS = ["torch", "torch_memory", "npu", "nsys", "recorder", "precision_debugger", "torchh", "torch,npu", ""]

LEGACY_EXAMPLES = [
    {"trainer": {"profile_steps": [1, 2, 5]},
     "actor_rollout_ref": {"actor": {"profile_discrete": False, "profile_ranks": [0, 1]}, "profiler": {"discrete": False, "all_ranks": False, "ranks": [0]}},
     "npu_profile": {"options": {"save_path": "./profile", "roles": ["actor_update", "rollout_generate"], "level": "level1",
                                 "with_memory": False, "record_shapes": False, "with_npu": True, "with_cpu": True,
                                 "with_module": False, "with_stack": False, "analysis": True}}},
    {"trainer": {"profile_steps": [1, 2]}, "actor_rollout_ref": {"actor": {"profile_ranks": None, "profile_ranks_all": True},
                                                                 "rollout": {"profile_ranks": [0]}},
     "critic": {"profile_ranks_all": True, "profile_discrete": True}},
]


def hostile_scalar():
    return st.one_of(
        st.integers(min_value=-3, max_value=10),
        st.sampled_from([0, -1, 2**31, 2**63, 10**30, 123456789, 1.5, float("nan"), float("inf"), True, False, None]),
        st.sampled_from(["", "0,1", "1,2,3", "[0, 1]", "all", "${nope}", "${}", "${global_profiler}", "${global_profiler.steps}",
                         "${oc.select:global_profiler.tool,null}", "${oc.env:HOME}", "a\0b", "n" * 300, "level1", "level9",
                         "cpu", "cuda", "npu", "torch", "~", "???", "${" * 80 + "}" * 80, "x" * 5000]),
        st.text(max_size=12),
        st.sampled_from(TOOLS),
    )


def hostile_value():
    return st.recursive(
        hostile_scalar(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.sampled_from(NON_STRING_KEYS)), inner,
                            max_size=4),
        ),
        max_leaves=12,
    )


def _paths(node: Any, prefix: tuple = (), out: list | None = None, limit: int = 400) -> list[tuple]:
    """Every key path of a plain dict/list tree (bounded)."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(node, dict):
        for key, value in list(node.items()):
            out.append(prefix + (key,))
            _paths(value, prefix + (key,), out, limit)
    elif isinstance(node, list):
        for i, value in enumerate(node[:8]):
            out.append(prefix + (i,))
            _paths(value, prefix + (i,), out, limit)
    return out


def _parent(doc: Any, path: tuple) -> Any:
    node = doc
    for part in path[:-1]:
        node = node[part]
    return node


def _ensure(doc: dict, dotted: str) -> dict:
    node = doc
    for part in dotted.split("."):
        child = node.get(part) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    return node


def _deep(levels: int) -> Any:
    root: Any = [1]
    for _ in range(levels):
        root = [root]
    return root


def _bomb(levels: int) -> Any:
    node: Any = ["lol"] * 9
    for _ in range(levels):
        node = [node] * 9
    return node


@st.composite
def mutation(draw, doc: dict) -> str:
    """Apply one mutation to ``doc`` (in place); returns what it did, for the report."""
    try:
        return _mutate(draw, doc)
    except (KeyError, IndexError, TypeError, AttributeError):  # an earlier mutation changed the shape under a path
        return "skipped"


def _mutate(draw, doc: dict) -> str:
    kind = draw(st.sampled_from(["set", "set", "set", "delete", "add", "rename", "wrap", "section", "interpolate",
                                 "nest", "alias", "enable", "key", "key"]))
    paths = _paths(doc)
    if kind in ("set", "delete", "rename", "wrap", "interpolate", "alias") and not paths:
        kind = "add"
    if kind == "set":
        path = draw(st.sampled_from(paths))
        _parent(doc, path)[path[-1]] = draw(hostile_value())
    elif kind == "delete":
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        if isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    elif kind == "add":
        section = _ensure(doc, draw(st.sampled_from(SECTION_PATHS)))
        key = draw(st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=10), st.sampled_from(NON_STRING_KEYS)))
        section[key] = draw(hostile_value())
    elif kind == "rename":
        path = draw(st.sampled_from([p for p in paths if isinstance(p[-1], str)] or paths))
        parent = _parent(doc, path)
        if isinstance(parent, dict) and isinstance(path[-1], str) and path[-1]:
            i = draw(st.integers(0, len(path[-1]) - 1))
            typo = path[-1][:i] + path[-1][i + 1:] + draw(st.sampled_from(["", "s", "_", "x"]))
            parent[typo] = parent.pop(path[-1])
    elif kind == "wrap":
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        value = parent[path[-1]]
        parent[path[-1]] = draw(st.sampled_from([[value], {"value": value}, {0: value}]))
    elif kind == "section":
        dotted = draw(st.sampled_from(SECTION_PATHS))
        parts = dotted.split(".")
        parent = _ensure(doc, ".".join(parts[:-1])) if len(parts) > 1 else doc
        parent[parts[-1]] = draw(st.sampled_from([None, [], [1, 2], 5, "x", True, {}]))
    elif kind == "interpolate":
        path = draw(st.sampled_from(paths))
        target = draw(st.sampled_from(paths))
        ref = ".".join(str(p) for p in target)
        _parent(doc, path)[path[-1]] = draw(st.sampled_from([f"${{{ref}}}", f"${{{ref}.nope}}", "${", "${a:${b}}", f"prefix ${{{ref}}}"]))
    elif kind == "nest":
        _nest(draw, doc, paths, [3, 10, 63, 70, 200, 600, 2000])
    elif kind == "alias":
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        shared = draw(st.sampled_from([_bomb(2), _bomb(5), _bomb(8), [1, 2], {"enable": True}]))
        parent[path[-1]] = shared
        other = draw(st.sampled_from(paths))
        try:
            _parent(doc, other)[other[-1]] = shared
        except (KeyError, IndexError, TypeError):
            pass
    elif kind == "key":
        return _plant_key(draw, doc)
    elif kind == "enable":  # switch profiling on, so the later stages (plan, backends) run too
        g = _ensure(doc, "global_profiler")
        g.setdefault("tool", draw(st.sampled_from(["torch", "torch_memory", "npu", "nsys", "recorder"])))
        g.setdefault("steps", draw(st.sampled_from([[1], [1, 2], [2, 3, 5], 1])))
        role = _ensure(doc, draw(st.sampled_from(["actor_rollout_ref.actor.profiler", "critic.profiler", "reward_model.profiler"])))
        role["enable"] = True
        role.setdefault("all_ranks", draw(st.booleans()))
    return kind


def _plant_key(draw, doc: dict) -> str:
    """Put a key that is not a string into a mapping: the top level, a section of :data:`KEY_PATHS`,
    or up to three mappings below one (whatever the document holds there), so such keys appear at
    every depth of every profiler section."""
    dotted = draw(st.sampled_from([""] + KEY_PATHS))
    node = _ensure(doc, dotted) if dotted else doc
    depth = len(dotted.split(".")) if dotted else 0
    for _ in range(draw(st.integers(0, 3))):
        children = [k for k, v in node.items() if isinstance(v, dict)]
        if not children:
            break
        node = node[draw(st.sampled_from(children))]
        depth += 1
    key = draw(st.sampled_from(NON_STRING_KEYS))
    node[key] = draw(st.one_of(st.none(), st.just({}), hostile_scalar(), st.just({"enable": True})))
    return f"key {key!r} at depth {depth + 1}"


def non_string_key_depths(case: "Case") -> set[int]:
    """The depths (1: the top level) at which the case's document holds a key that is not a string;
    0 stands for one in an override's value. Shared references are walked once."""
    depths, seen, stack = set(), set(), [(case.doc, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            if any(not isinstance(k, str) for k in node):
                depths.add(depth)
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
    if any(isinstance(o, str) and re.search(r"[{,]\s*(true|false|null|~|-?\d[\d.]*)\s*:", o) for o in case.overrides):
        depths.add(0)
    return depths


def _nest(draw, doc: dict, paths: list[tuple], levels: list[int]) -> str:
    """Replace a value (or global_profiler.steps) with a list nested one of ``levels`` deep."""
    depth = draw(st.sampled_from(levels))
    if paths:
        path = draw(st.sampled_from(paths))
        _parent(doc, path)[path[-1]] = _deep(depth)
    else:
        doc["global_profiler"] = {"steps": _deep(depth)}
    return f"nest {depth}"


@dataclass
class Case:
    base: str
    doc: Any
    form: str
    overrides: list = field(default_factory=list)
    world_size: int = 2
    mutations: list = field(default_factory=list)
    handed_as: str = ""
    """What :func:`materialize` handed over: ``form``, ``deep dictconfig``, or ``dict`` where the form could not be built."""


class Bases(list):
    """The starting configurations (a list with a short repr: Hypothesis prints strategy arguments)."""

    def __repr__(self) -> str:
        return f"<{len(self)} base configurations>"


def bases(verl_config: dict | None) -> Bases:
    import sys

    # the seed cases live with the plan's tests (tests/runtime): importable there whoever runs this
    # (pytest on tests/config alone, scripts/fuzz_config.py), not only when pytest collected them first
    runtime_tests = str(Path(__file__).resolve().parents[1] / "runtime")
    if runtime_tests not in sys.path:
        sys.path.append(runtime_tests)
    from test_plan_seeds import CASES

    out = []
    for name, (source, overrides, _, _) in CASES.items():
        doc = copy.deepcopy(source) if isinstance(source, dict) else {}
        for item in overrides:
            key, _, value = item.partition("=")
            import yaml

            parts = key.lstrip("+").split(".")
            node = _ensure(doc, ".".join(parts[:-1])) if len(parts) > 1 else doc
            node[parts[-1]] = yaml.safe_load(value)
        out.append((f"seed {name}", doc))
    for i, doc in enumerate(LEGACY_EXAMPLES):
        out.append((f"legacy {i}", copy.deepcopy(doc)))
    if verl_config is not None:
        out.append(("verl 0.9.1 generated", verl_config))
    return Bases(out)


@st.composite
def cases(draw, base_docs: list[tuple[str, dict]]) -> Case:
    name, base = draw(st.sampled_from(base_docs))
    doc = copy.deepcopy(base)
    done = [draw(mutation(doc)) for _ in range(draw(st.integers(1, 4)))]
    form = draw(st.sampled_from(["dict", "dict", "dictconfig", "yaml", "overrides"]))
    if form == "dictconfig" and draw(st.integers(0, 3)) == 0:  # a DictConfig nested past the limit (issue 24)
        done.append(_nest(draw, doc, _paths(doc), [70, 600, 2000]))
    overrides: list = []
    # a DictConfig often comes with overrides too (Profiler(cfg, overrides=...)): copying it for them
    # is where a deep one used to end in RecursionError
    if form == "overrides" or (form == "dictconfig" and draw(st.booleans())):
        overrides = draw(st.lists(st.one_of(
            st.builds(lambda k, v: f"{k}={v}", st.sampled_from([p + "." + k for p in SECTION_PATHS for k in ("steps", "enable", "ranks", "tool")]),
                      st.sampled_from(["[1,2]", "[0,0]", "'0,1'", "true", "null", "${nope}", "[1", "{a: 1}", "~", "[" * 100, "1e400", ""])),
            st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEY_PATHS),  # keys that are not strings in a value
                      st.sampled_from(["{1: x}", "{true: null}", "{torch: {0: 1}}", "{null: 1}", "{1.5: {a: 1}}",
                                       "{enable: true, false: 1}", "[{2: a}]"])),
            st.sampled_from(["~global_profiler.tool", "~nope.nope", "global_profiler", "=x", "+global_profiler.steps=[1]",
                             "++critic.profiler.enable=true", "~global_profiler.tool=torch", "a..b=1", " =1"]),
        ), max_size=4))
    world = draw(st.sampled_from([1, 2, 4, 8, 123456789]))
    return Case(base=name, doc=doc, form=form, overrides=overrides, world_size=world, mutations=done)


# ----------------------------------------------------------------------------- running one case


class DoNothing:
    """A backend with no hooks: the core's own paths run, nothing is captured."""


KEY_PATH = re.compile(r"^(override |config file |config\b|[A-Za-z0-9_~\-\[\]'().]+(\.[^ :]+)*:)")


def materialize(case: Case, workdir: Path) -> Any:
    """The case's configuration in its input form (a YAML file is written under ``workdir``); a
    ``dictconfig`` nested deeper than rlprof's limit is built as a user with a raised recursion limit could."""
    case.handed_as = case.form
    if case.form == "dictconfig":
        from omegaconf import OmegaConf

        from rlprof.errors import ConfigError

        from rlprof.config.limits import check_tree

        try:
            check_tree(case.doc, "")  # an alias bomb would take OmegaConf.create hours: the user could not build it
            return OmegaConf.create(case.doc)
        except ConfigError as exc:
            built = _deep_dictconfig(case.doc) if "levels deep" in str(exc) and _buildable(case.doc) else case.doc
        except Exception:  # the user could not have built this DictConfig either: hand over the dict
            built = case.doc
        case.handed_as = "deep dictconfig" if built is not case.doc else "dict"
        return built
    if case.form == "yaml":
        import yaml

        path = workdir / "config.yaml"
        try:
            text = yaml.safe_dump(case.doc, sort_keys=False)
        except Exception:  # not representable as YAML (e.g. too deep for the dumper): hand over the dict
            case.handed_as = "dict"
            return case.doc
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        return path
    return case.doc


def _buildable(doc: Any) -> bool:
    """``doc`` reaches at most MAX_VALUES values however deep it nests: OmegaConf.create copies every
    shared reference, so a deep doc that also holds an alias bomb would take hours to build (the
    user could not build it; check_tree stops at the depth before it counts the values)."""
    from rlprof.config.limits import MAX_VALUES

    budget, stack = MAX_VALUES, [doc]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            return False
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return True


def _deep_dictconfig(doc: Any) -> Any:
    """``doc`` as a DictConfig even when it nests hundreds of levels deep: OmegaConf.create recurses
    once per level, so a user who raised ``sys.setrecursionlimit`` can build one (and hand it to
    rlprof, whose own limit is the default). Falls back to the dict when even that is too deep."""
    import sys

    from omegaconf import OmegaConf

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50_000))
    try:
        return OmegaConf.create(doc)
    except Exception:  # RecursionError past 50 000 frames, keys OmegaConf refuses
        return doc
    finally:
        sys.setrecursionlimit(limit)


def _inside(save_path: str, workdir: Path) -> bool:
    try:
        return (workdir / save_path).resolve().is_relative_to(workdir.resolve())
    except (OSError, ValueError, RuntimeError):
        return False


def run_case(case: Case, workdir: Path) -> dict[str, str]:
    """Run the case through the three paths; per stage ``ok``, ``rejected`` (a ConfigError naming a
    key path or an input), ``rejected-unnamed`` or ``traceback: ...``. Never raises."""
    from rlprof import ConfigError, Profiler, load_config
    from rlprof.runtime.checking import check_config

    out: dict[str, str] = {}
    os.chdir(workdir)  # relative save paths land in the scratch directory
    os.environ["HOME"] = str(workdir)  # ${oc.env:HOME} too
    source = materialize(case, workdir)
    out["input"] = case.handed_as
    tools: tuple = ()

    def stage(name, func):
        started = time.perf_counter()
        try:
            result = func()
            out[name] = "ok"
            return result
        except ConfigError as exc:
            named = exc.key is not None or bool(KEY_PATH.match(str(exc)))
            out[name] = "rejected" if named else f"rejected-unnamed: {str(exc)[:200]}"
        except Exception:
            out[name] = "traceback: " + traceback.format_exc(limit=-4)[-1500:]
        finally:
            out[name + "_s"] = f"{time.perf_counter() - started:.3f}"
        return None

    cfg = stage("load", lambda: load_config(source, case.overrides))
    if cfg is not None:
        tools = cfg.global_.tools
    stage("check", lambda: check_config(source, case.overrides, world_size=case.world_size))

    given = source
    if cfg is not None and (cfg.global_.finish_hook_cmd or not _inside(cfg.global_.save_path, workdir)):
        # never run a generated shell command, never write outside the scratch directory
        given = cfg.with_overrides(finish_hook_cmd=None, save_path=str(workdir / "profile"))

    def profiler():
        prof = Profiler(given, overrides=() if given is not source else case.overrides, rank=0,
                        world_size=min(case.world_size, 8), roles=("actor", "rollout", "ref"),
                        backends={t: DoNothing() for t in tools})
        prof.finalize()

    stage("profiler", profiler)
    return out
