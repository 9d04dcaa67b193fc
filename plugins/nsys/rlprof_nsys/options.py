"""The nsys backend's ``tool_config``: verl's ``global_tool_config.nsys`` keys, checked and normalised.

Called through the ``validate_tool_config`` hook when a Profiler is created and by ``rlprof check``,
so a typo fails before any Ray worker starts under ``nsys``. What a section may hold::

    nsys:
      controller_nsight_options: {trace: "cuda,nvtx,cublas,ucx", cuda-memory-usage: "true"}   # nsys CLI options for the driver
      worker_nsight_options:     {trace: "cuda,nvtx,cublas,ucx", capture-range-end: null}     # ... for every profiled Ray worker
      ray_nsight_dir: /tmp/ray/session_latest/logs/nsight   # where Ray's nsight plugin writes reports (relocation)
      capture_range: cudaProfilerApi                        # or nvtx: how capture windows are opened (below)
      name: nsight                                          # verl's NsightToolConfig field: accepted, ignored

(``_target_`` and the capture-mode switch belong to the core, which removes them first.)

An options dict maps an ``nsys profile`` option, without its dashes, to a value, exactly as Ray's
``runtime_env={"nsight": {...}}`` takes it: one-letter keys become ``-k value``, longer ones
``--key=value``. Normalisation makes the dict safe to hand to Ray:

* leading dashes are stripped (``--trace`` and ``trace`` mean the same);
* ``null`` values are dropped: verl writes ``capture-range-end: null`` for "let the program decide";
* booleans become ``"true"``/``"false"``, numbers strings, lists comma-joined (``trace: [cuda, nvtx]``);
* ``output`` is renamed ``o``: Ray only honours the short form (it adds its own ``-o`` otherwise).

``capture_range`` says how rlprof opens a capture window, and so what nsys waits for:
``cudaProfilerApi`` (default) calls cudaProfilerStart/Stop (needs torch with CUDA);
``nvtx`` opens an NVTX range named ``rlprof_capture`` in the ``rlprof`` domain, which nsys captures
with ``--capture-range=nvtx --nvtx-capture=rlprof_capture@rlprof`` (works without CUDA, and where
other code of the process already calls cudaProfilerStart).

For workers, ``capture-range`` may only repeat ``capture_range`` and ``capture-range-end`` only be
one of nsys' repeating forms; anything else would silently capture the wrong thing, so it is a
:class:`rlprof.ConfigError` here.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from rlprof.errors import ConfigError, describe, fail, unknown_key

CONTROLLER = "controller_nsight_options"
WORKER = "worker_nsight_options"
RAY_DIR = "ray_nsight_dir"
RANGE = "capture_range"
IGNORED = ("name",)
"""Keys verl defines for this tool that change nothing here."""
KNOWN = (CONTROLLER, WORKER, RAY_DIR, RANGE, *IGNORED)

CUDA_PROFILER_API = "cudaProfilerApi"
NVTX = "nvtx"
CAPTURE_RANGES = (CUDA_PROFILER_API, NVTX)
CAPTURE_RANGE = CUDA_PROFILER_API
"""The default ``capture_range``."""
_OPTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\Z")
_LONG_FORMS = {"c": "capture-range", "output": "o"}
"""Spellings folded into one key, so a user's value is found (and conflicts are seen) whichever form they wrote."""
_REPEATING_END = re.compile(r"(repeat(:\d+)?|repeat-shutdown:\d+)(:(defer|sync|async))?\Z")


def validate(tool_config: Mapping[str, Any], key_path: str) -> dict[str, Any]:
    """Check a ``tool_config.nsys`` section; return ``{controller_nsight_options, worker_nsight_options,
    ray_nsight_dir}`` with both option dicts normalised (see the module docstring).

    :raises ConfigError: naming the key path, the bad value and what is allowed.
    """
    if not isinstance(tool_config, Mapping):
        raise fail(key_path, tool_config, f"a mapping with {', '.join(KNOWN)}")
    for key in tool_config:  # the core removed its own keys (_target_, discrete, schedule...) before calling
        if key not in KNOWN:
            raise unknown_key(key_path, key, KNOWN)
    capture_range = tool_config.get(RANGE)
    if capture_range is None:
        capture_range = CAPTURE_RANGE
    if capture_range not in CAPTURE_RANGES:
        raise fail(f"{key_path}.{RANGE}", capture_range,
                   "'cudaProfilerApi' (windows are cudaProfilerStart/Stop, needs CUDA) or 'nvtx' (windows are NVTX ranges)")
    worker = nsight_options(tool_config.get(WORKER), f"{key_path}.{WORKER}")
    _check_worker_capture(worker, f"{key_path}.{WORKER}", capture_range)
    return {
        CONTROLLER: nsight_options(tool_config.get(CONTROLLER), f"{key_path}.{CONTROLLER}"),
        WORKER: worker,
        RAY_DIR: _directory(tool_config.get(RAY_DIR), f"{key_path}.{RAY_DIR}"),
        RANGE: capture_range,
    }


def nsight_options(raw: Any, key_path: str) -> dict[str, str]:
    """Normalise one dict of ``nsys profile`` options (None or empty: no options)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise fail(key_path, raw, "a mapping of nsys profile options, e.g. {trace: 'cuda,nvtx', cuda-memory-usage: 'true'}")
    options: dict[str, str] = {}
    written: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise fail(f"{key_path}", key, "option names as strings, e.g. 'trace' or 'capture-range-end'")
        name = key.lstrip("-")
        if not _OPTION_NAME.match(name):
            raise fail(f"{key_path}.{key}", key, "an nsys profile option name made of letters, digits and '-', e.g. 'cuda-memory-usage'")
        name = _LONG_FORMS.get(name, name)
        if name in written:
            raise ConfigError(
                f"{key_path}: {written[name]!r} and {key!r} set the same nsys option; allowed: one of them",
                key=f"{key_path}.{key}",
            )
        written[name] = key
        text = _option_value(value, f"{key_path}.{key}")
        if text is not None:
            options[name] = text
    return options


def _option_value(value: Any, key_path: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise ConfigError(
        f"{key_path}: got {describe(value)}; allowed: a string, number, true/false, a list of strings or null",
        key=key_path,
    )


def _check_worker_capture(options: Mapping[str, str], key_path: str, capture_range: str) -> None:
    given = options.get("capture-range")
    if given is not None and given != capture_range:
        raise fail(
            f"{key_path}.capture-range", given,
            f"{capture_range!r} or leave it out: it follows the section's capture_range ({capture_range}); "
            "set capture_range to choose cudaProfilerApi or nvtx",
        )
    if options.get("nvtx-capture") is not None:
        raise fail(f"{key_path}.nvtx-capture", options["nvtx-capture"],
                   "leave it out: with capture_range nvtx rlprof sets it to its own window range")
    end = options.get("capture-range-end")
    if end is not None and not _REPEATING_END.match(end):
        raise fail(
            f"{key_path}.capture-range-end", end,
            "null (rlprof computes 'repeat-shutdown:N' from the plan), 'repeat[:N][:mode]' or 'repeat-shutdown:N[:mode]' "
            "with mode defer, sync or async: a profiled worker opens one window per capture, so a non-repeating end "
            "would keep only the first",
        )


def _directory(value: Any, key_path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise fail(key_path, value, "a directory path (string) or null for Ray's default")
    return os.path.expanduser(str(value))
