"""The ``tool_config.torch`` section: what it may hold and how ``contents`` becomes profiler arguments.

verl's meaning of ``contents`` is kept: an empty list asks for everything the machine can trace
(CPU and, where there is one, CUDA); ``memory``, ``shapes`` and ``stack`` switch on the profiler's
``profile_memory``, ``record_shapes`` and ``with_stack``. Unlike verl, CPU activity is always on:
the role ranges rlprof marks are CPU events, and a trace without them cannot be read per role.

``flops`` (rlprof's own key, default true): the profiler is asked for FLOPs (``with_flops``), so each role
region's row in the breakdown has its counted FLOPs and MFU (docs/analysis.md, "What the compute achieves").
torch then records every op's input shapes (``record_shapes``: a few microseconds an op while the capture
records, bench/bench_flops.py); ``false`` records none.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from rlprof.backend_api import check_keys, parse_bool, parse_contents, say_once

log = logging.getLogger("rlprof.torch")

CONTENTS = ("cuda", "cpu", "memory", "shapes", "stack")
"""The ``contents`` names verl documents for the torch tool."""

VERL_UNUSED_KEYS = ("step_start", "step_end", "manual_save")
"""Keys older verl releases write into ``tool_config.torch``; accepted, and ignored with a warning
when set to anything but verl's defaults (the role's ``profiler.schedule`` replaces
step_start/step_end, and traces are always saved)."""
VERL_UNUSED_DEFAULTS = {"step_start": (-1, None), "step_end": (-1, None), "manual_save": (False, None)}
REPLACEMENT = {
    "step_start": "sample micro-batches with the role's profiler.schedule (e.g. {skip_first: 2, active: 3})",
    "step_end": "sample micro-batches with the role's profiler.schedule (e.g. {skip_first: 2, active: 3})",
    "manual_save": "rlprof saves every capture's trace itself",
}

_FLAGS = {"memory": "profile_memory", "shapes": "record_shapes", "stack": "with_stack"}


def validate(tool_config: Mapping[str, Any], key_path: str) -> dict[str, Any]:
    """Check the section and return what the backend keeps: ``{"contents": (...)}``.

    ``cuda`` asked for on a machine without a CUDA device is valid (the same config runs on the
    GPU nodes) but is said here, so ``rlprof check`` shows it before a run. Each warning is said
    once per process (:func:`rlprof.notices.say_once`): the section is validated for every role
    and every Profiler."""
    check_keys(tool_config, key_path, used=("contents", "flops"), ignored=VERL_UNUSED_KEYS)
    contents = parse_contents(tool_config.get("contents"), f"{key_path}.contents", CONTENTS)
    for key, defaults in VERL_UNUSED_DEFAULTS.items():
        if key in tool_config and tool_config[key] not in defaults:
            say_once(f"torch: {key}={tool_config[key]!r} ignored", log, "rlprof: %s.%s=%r is ignored: %s",
                     key_path, key, tool_config[key], REPLACEMENT[key])
    if "cuda" in contents:
        _warn_if_no_cuda(f"{key_path}.contents")
    return {"contents": contents, "flops": parse_bool(tool_config.get("flops"), f"{key_path}.flops", default=True)}


def _warn_if_no_cuda(key: str) -> None:
    import torch

    if not torch.cuda.is_available():
        say_once("torch: contents cuda without CUDA", log,
                 "rlprof: %s asks for 'cuda' but this machine has no CUDA device (torch.cuda.is_available() "
                 "is False): torch traces here hold CPU activity only", key)


def profile_arguments(contents: tuple[str, ...], cuda_available: bool, flops: bool = False) -> dict[str, Any]:
    """Keyword arguments for :class:`torch.profiler.profile` from a validated ``contents`` and ``flops``."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU]
    if cuda_available and (not contents or "cuda" in contents):
        activities.append(ProfilerActivity.CUDA)
    arguments: dict[str, Any] = {"activities": activities}
    for name, flag in _FLAGS.items():
        arguments[flag] = name in contents
    arguments["with_flops"] = bool(flops)
    if not arguments["with_stack"]:
        arguments.update(_trace_only())
    return arguments


def _trace_only() -> dict[str, Any]:
    """``experimental_config=_ExperimentalConfig(trace_only=True)`` where this torch has it, else nothing.

    Why: stopping the profiler runs on the training thread (Kineto requires it), and by default it also
    builds the event tree that ``key_averages()`` reads, which rlprof never asks for; ``trace_only`` skips
    that and writes the same Chrome trace. Measured here on a 54 MB trace (CPU): ``stop()`` took 540 ms,
    338 ms with ``trace_only``, same events. torch turns it off itself with ``with_stack`` (stacks need
    the tree), hence not asked for then."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return {"experimental_config": _ExperimentalConfig(trace_only=True)}
    except (ImportError, TypeError):  # an older torch: the tree is built, as before
        return {}
