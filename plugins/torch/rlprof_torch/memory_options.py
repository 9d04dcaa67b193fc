"""The ``tool_config.torch_memory`` section: the keys verl and torchtitan users bring, checked and normalised.

Each key maps onto torch 2.13's ``torch.cuda.memory._record_memory_history`` or onto what the
backend does around it (``tests/test_torch_memory.py`` checks the mapping against the installed
torch's real signature):

=============================  =========================================================================
key                            meaning
=============================  =========================================================================
``trace_alloc_max_entries``    verl's name for the recorder's ``max_entries``: how many alloc/free events
                               the ring buffer keeps (default 100000; torch's own default is unbounded)
``max_entries``                torch's and torchtitan's name for the same bound (give one of the two)
``context``                    which events keep a traceback: ``null``, ``state``, ``alloc``, ``all``
``stacks``                     ``python`` (Python frames only: torchtitan's choice, far faster dumps) or
                               ``all`` (plus C++ frames)
``clear_history``              true (default): each snapshot holds its own window's events only;
                               false: the history runs on across windows (still bounded by max_entries)
``memory_snapshot_num_steps``  verl: one snapshot per N profiled training step numbers, history kept
                               (default 1: one per capture window)
``dump_on_oom``                verl: on a CUDA out-of-memory error, write a snapshot before the error
                               reaches the training (default true, as in verl)
``kw_args``                    further ``_record_memory_history`` arguments: ``compile_context``,
                               ``global_record_annotations``, ``skip_actions``
``stack_depth``                verl's; torch 2.13's recorder has no depth limit, so a value other than
                               verl's default 32 gets a warning (``stacks: python`` is the way to
                               shorter, cheaper stacks)
=============================  =========================================================================
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from rlprof.errors import ConfigError, fail
from rlprof.backend_api import check_keys, say_once

log = logging.getLogger("rlprof.torch_memory")

CONTEXTS = (None, "state", "alloc", "all")
STACKS = ("python", "all")
DEFAULTS: dict[str, Any] = {
    "trace_alloc_max_entries": 100_000,
    "stack_depth": 32,
    "context": "all",
    "stacks": "all",
    "clear_history": True,
    "memory_snapshot_num_steps": 1,
    "dump_on_oom": True,
    "kw_args": {},
}
"""verl's defaults for its keys (max entries, stack depth, step count per snapshot, OOM dumps); torch's for
``context`` and ``stacks``; clearing between windows so each snapshot shows its own window."""
ALIASES = {"max_entries": "trace_alloc_max_entries"}
"""torch's / torchtitan's names for verl's keys."""
PASSTHROUGH = ("compile_context", "global_record_annotations", "skip_actions")
"""``_record_memory_history`` arguments ``kw_args`` may set; the others are owned by the keys above."""
OWNED = {"enabled": None, "context": "context", "stacks": "stacks", "max_entries": "trace_alloc_max_entries",
         "clear_history": "clear_history", "device": None}
"""``_record_memory_history`` arguments that ``kw_args`` may not set -> the key to use instead (None: none)."""
SKIP_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot")

def validate(tool_config: Mapping[str, Any], key_path: str) -> dict[str, Any]:
    """Check ``tool_config.torch_memory``; return every key with its default filled in (aliases
    resolved to verl's names)."""
    check_keys(tool_config, key_path, used=tuple(DEFAULTS) + tuple(ALIASES))
    config = dict(DEFAULTS)
    for key, value in tool_config.items():
        name = ALIASES.get(key, key)
        if name in DEFAULTS:
            config[name] = value
    for alias, name in ALIASES.items():
        if alias in tool_config and name in tool_config and tool_config[alias] != tool_config[name]:
            raise ConfigError(f"{key_path}.{alias}: got {tool_config[alias]!r} but {name} is {tool_config[name]!r}; "
                              f"allowed: one of the two (they are the same setting)", key=f"{key_path}.{alias}")
    for name in ("trace_alloc_max_entries", "stack_depth", "memory_snapshot_num_steps"):
        if not _positive_int(config[name]):
            raise fail(f"{key_path}.{_written(tool_config, name)}", config[name], "a positive integer")
    for name in ("clear_history", "dump_on_oom"):
        if not isinstance(config[name], bool):
            raise fail(f"{key_path}.{name}", config[name], "true or false")
    for name, allowed in (("context", CONTEXTS), ("stacks", STACKS)):
        if config[name] not in allowed:
            raise fail(f"{key_path}.{name}", config[name], ", ".join("null" if a is None else a for a in allowed))
    config["kw_args"] = _kw_args(config["kw_args"], f"{key_path}.kw_args")
    if config["stack_depth"] != DEFAULTS["stack_depth"]:
        # Said once per process and value (a config is validated once per role and per Profiler),
        # whichever role's section says it first.
        say_once(f"torch_memory: stack_depth={config['stack_depth']}", log,
                 "rlprof: %s.stack_depth=%s has no effect: torch's memory recorder keeps whole stacks and has no "
                 "depth limit; `stacks: python` gives short, cheap Python-only stacks", key_path, config["stack_depth"])
    return config


def _kw_args(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail(key, value, f"a mapping of {', '.join(PASSTHROUGH)}")
    out = dict(value)
    for name, item in out.items():
        if name in OWNED:
            instead = f"set {key.rsplit('.', 1)[0]}.{OWNED[name]} instead" if OWNED[name] else "rlprof sets it"
            raise ConfigError(f"{key}.{name}: {name} is not passed through ({instead}); allowed: {', '.join(PASSTHROUGH)}",
                              key=f"{key}.{name}")
        if name not in PASSTHROUGH:
            raise fail(f"{key}.{name}", item, f"one of the keys {', '.join(PASSTHROUGH)}")
        if name == "skip_actions":
            if not isinstance(item, (list, tuple)) or any(a not in SKIP_ACTIONS for a in item):
                raise fail(f"{key}.{name}", item, f"a list of {', '.join(SKIP_ACTIONS)}")
            out[name] = list(item)
        elif not isinstance(item, bool):
            raise fail(f"{key}.{name}", item, "true or false")
    return out


def record_arguments(config: Mapping[str, Any], *, clear_history: bool) -> dict[str, Any]:
    """Keyword arguments for ``torch.cuda.memory._record_memory_history`` from a validated config."""
    return {"enabled": "all", "context": config["context"], "stacks": config["stacks"],
            "max_entries": config["trace_alloc_max_entries"], "clear_history": clear_history, **config["kw_args"]}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _written(tool_config: Mapping[str, Any], name: str) -> str:
    """The key as the user wrote it (an alias, when that is what they used)."""
    for alias, target in ALIASES.items():
        if target == name and alias in tool_config and name not in tool_config:
            return alias
    return name
