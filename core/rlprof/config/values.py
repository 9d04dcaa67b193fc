"""Parsing single configuration values (steps, ranks, tool names, booleans, save_path) into their
typed form, each failure a :class:`~rlprof.errors.ConfigError` naming the key path it was given.

Each reader takes ``(value, key_path)`` and returns the typed value, ``None`` (the key absent or
``null``) giving the key's default: the schema (:mod:`rlprof.config.sections`) names one reader per key.
Shared with :mod:`rlprof.config.legacy` (the older guides' keys, named as the user wrote them). The
boolean reader lives in the leaf :mod:`rlprof.tool_config`, where backends use it too.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from rlprof.errors import fail
from rlprof.tool_config import parse_bool

DEFAULT_SAVE_PATH = "outputs/profile"


def parse_tools(value: Any, key: str) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)):
        names = list(value)
    else:
        raise fail(key, value, "a backend name, a list of names (e.g. [nsys, torch_memory]) or null")
    for name in names:
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum() or len(name) > 100:
            raise fail(key, value, "backend names made of letters, digits, '_' and '-'")
    if len(set(names)) != len(names):
        raise fail(key, value, "each backend at most once")
    return tuple(names)


def parse_steps(value: Any, key: str) -> tuple[int, ...] | None:
    """Profiled step numbers. verl counts training steps from 1 (its ``global_steps`` starts at 1),
    so step 0 never happens and is refused rather than silently never profiled."""
    if value is None:
        return None
    value = int_list(value)
    allowed = "a list of step numbers counted from 1 as verl does, e.g. [1, 2, 5], or null for no profiling"
    if not isinstance(value, (list, tuple)):
        raise fail(key, value, allowed)
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise fail(key, value, allowed)
    if len(set(value)) != len(value):
        raise fail(key, value, "each step at most once")
    return tuple(sorted(value))


def parse_ranks(value: Any, key: str) -> tuple[int, ...]:
    """Ranks as a list, one int, or the comma string the guides' command lines produce (``"0,1"``)."""
    allowed = "a list of non-negative integer ranks, e.g. [0, 1] ([] collects nothing)"
    if value is None:
        return ()
    value = int_list(value)
    if not isinstance(value, (list, tuple)):
        raise fail(key, value, allowed)
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise fail(key, value, allowed)
    if len(set(value)) != len(value):
        twice = sorted({r for r in value if value.count(r) > 1}) if len(value) < 1000 else []
        raise fail(key, value, f"each rank at most once{f' (listed more than once: {twice})' if twice else ''}")
    return tuple(sorted(value))


_INT_LIST = re.compile(r"^\s*\d+(\s*,\s*\d+)*\s*,?\s*$")


def int_list(value: Any) -> Any:
    """One int as a one-item list; ``"0,1"`` / ``"[0, 1]"`` as [0, 1]; anything else unchanged (refused later)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str) and len(value) < 100_000:
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        if _INT_LIST.match(text):
            return [int(part) for part in text.split(",") if part.strip()]
    return value


def parse_save_path(value: Any, key: str = "global_profiler.save_path") -> str:
    """The text of ``save_path``; what the file system says about it is checked where files are
    written (:func:`rlprof.layout.check_save_path`), a NUL byte or an over-long name already here."""
    if value is None:
        return DEFAULT_SAVE_PATH
    if not isinstance(value, (str, os.PathLike)):
        raise fail(key, value, "a directory path (string)")
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        raise fail(key, value, "a non-empty directory path (string)")
    if "\0" in text:
        raise fail(key, value, "a directory path without NUL characters")
    longest = max((part for part in text.split(os.sep)), key=lambda p: len(p.encode("utf-8", "surrogateescape")))
    if len(longest.encode("utf-8", "surrogateescape")) > 255:
        raise fail(key, value, f"a directory path whose names are at most 255 bytes each ({longest[:40]!r}... is longer)")
    return text


def parse_tool_sections(value: Any, key: str) -> dict[str, dict[str, Any]]:
    """A ``tool_config`` mapping: tool name -> its section (a mapping; ``null`` is an empty one).
    Which tool names are known is checked by the schema, which knows the selected and installed tools.
    Any empty value (``null``, ``[]``, ``''``) is no sections, as verl's own loader reads it."""
    if not value:
        return {}
    if not isinstance(value, Mapping):
        raise fail(key, value, "a mapping from tool name to its settings")
    for name, section in value.items():
        if section is not None and not isinstance(section, Mapping):
            raise fail(f"{key}.{name}", section, "a mapping")
    return {name: dict(section or {}) for name, section in value.items()}


def parse_command(value: Any, key: str) -> str | None:
    """A shell command line; ``null`` or an empty string is none."""
    if value is not None and not isinstance(value, str):
        raise fail(key, value, "a shell command string or null")
    return value or None


def parse_optional_ranks(value: Any, key: str) -> tuple[int, ...] | None:
    """Ranks where ``null`` and ``[]`` both mean "the default" (None), as verl writes ``finish_hook_ranks: []``."""
    if value is None or value == []:
        return None
    return parse_ranks(value, key)


def parse_optional_bool(value: Any, key: str) -> bool | None:
    """``true``/``false``, or ``None`` when absent or ``null``: for a key whose absence means "let
    another setting decide" (``global_profiler.discrete``), not ``false``."""
    return None if value is None else parse_bool(value, key)


GATHER_MODES = ("none", "traces")
"""``global_profiler.gather``: ``none`` leaves artifacts on their node (the manifest says where), ``traces``
streams them to the controller's ``save_path`` through Ray."""


def parse_gather(value: Any, key: str) -> str:
    """One of :data:`GATHER_MODES`; ``null`` is ``none``."""
    if value is None:
        return "none"
    if not isinstance(value, str) or value.strip().lower() not in GATHER_MODES:
        raise fail(key, value, " or ".join(GATHER_MODES))
    return value.strip().lower()


DEFAULT_GATHER_BUDGET_GB = 50.0


def parse_gather_budget(value: Any, key: str) -> float:
    """A size in GB (a number > 0); ``null`` is :data:`DEFAULT_GATHER_BUDGET_GB`."""
    if value is None:
        return DEFAULT_GATHER_BUDGET_GB
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise fail(key, value, "a size in GB (a number > 0, e.g. 50 or 0.5)")
    return float(value)


DEFAULT_CAPTURE_BUDGET_MB = 2048.0
DEFAULT_RUN_BUDGET_GB = 50.0
DEFAULT_REQUEST_RECORDS_MB = 1024.0


def parse_budget(value: Any, key: str, *, default: float, unit: str) -> float:
    """A size limit in ``unit`` (a number >= 0, ``0``: no limit); ``null`` is ``default``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise fail(key, value, f"a size in {unit} (a number >= 0, e.g. {default:g}; 0: no limit)")
    return float(value)


MAX_PEAK_TFLOPS = 1e6
"""No device comes near a million TFLOP/s: a larger ``peak_tflops`` is a unit mistake (FLOP/s given as TFLOP/s)."""


def parse_peak_tflops(value: Any, key: str) -> float | None:
    """``global_profiler.peak_tflops``: a device's peak in TFLOP/s (a number > 0); ``null``: none configured."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_PEAK_TFLOPS:
        raise fail(key, value, f"a peak in TFLOP/s (a number > 0 and at most {MAX_PEAK_TFLOPS:g}, e.g. 989.4 for an "
                               "H100's bf16; null: the spec table's, else measured)")
    return float(value)


def parse_capture_budget(value: Any, key: str) -> float:
    """``global_profiler.capture_budget_mb``: MB per capture; ``null`` is :data:`DEFAULT_CAPTURE_BUDGET_MB`."""
    return parse_budget(value, key, default=DEFAULT_CAPTURE_BUDGET_MB, unit="MB")


def parse_request_records_budget(value: Any, key: str) -> float:
    """``global_profiler.request_records_mb``: MB of rollout request records per run; ``null`` is
    :data:`DEFAULT_REQUEST_RECORDS_MB`."""
    return parse_budget(value, key, default=DEFAULT_REQUEST_RECORDS_MB, unit="MB")


def parse_run_budget(value: Any, key: str) -> float:
    """``global_profiler.run_budget_gb``: GB per run and node; ``null`` is :data:`DEFAULT_RUN_BUDGET_GB`."""
    return parse_budget(value, key, default=DEFAULT_RUN_BUDGET_GB, unit="GB")
