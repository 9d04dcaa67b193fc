"""Starting processes under ``nsys profile``: the Ray ``runtime_env`` of a profiled worker, and the
command line or runtime_env of the driver (verl's "controller").

nsys must wrap a process from its first instruction, so this is decided before the process exists:
on the Ray controller, through the ``worker_runtime_env`` hook, once per worker actor. A worker gets

``capture-range=cudaProfilerApi`` (or ``nvtx`` with ``--nvtx-capture=rlprof_capture@rlprof``)
    nothing is recorded outside rlprof's capture windows (cudaProfilerStart/Stop, or the NVTX range
    rlprof opens per window when the tool_config says ``capture_range: nvtx``);
``capture-range-end=repeat-shutdown:N``
    N is the exact number of windows the worker opens under the plan
    (:meth:`rlprof.runtime.plan.ProcessPlan.expected_captures`, handed over as ``ctx.expected_captures``).
    nsys then writes the reports as soon as the N-th window closes. Too small an N loses the later
    windows; a bigger one (verl's guess is 6 per profiled step) makes nsys wait for the
    process to exit before writing anything, which a killed Ray worker never does cleanly.
    When the plan cannot count (a role's per-step stages unknown, an unbounded sampling schedule),
    ``repeat`` is used instead, with a warning saying why;
``kill=none``
    after the N-th window nsys shuts its session down, and by default it would then SIGTERM the worker;
``sample=none``, ``cpuctxsw=none``
    only on a host without hardware performance counters, where nsys 2022.4 hangs otherwise
    (:mod:`rlprof_nsys.cpu_sampling`), and only when the user set neither.

and, in ``env_vars``, ``PATH`` starting with the directory of this interpreter: Ray's nsight plugin
starts the worker as ``nsys profile ... python``, a bare ``python`` looked up on the worker's PATH,
which outside an activated virtual environment is the system's, without Ray (the worker dies with
``No module named 'ray'``).

The user's ``worker_nsight_options`` are kept (``trace``, ``cuda-memory-usage``, ``o``...); an explicit
``capture-range-end`` wins over the computed one (verl's documented escape hatch), with a warning
when it disagrees with the plan.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import sys
from typing import Any, Iterable, Mapping, Sequence

from .cpu_sampling import sampling_options
from .options import CAPTURE_RANGE, CONTROLLER, NVTX, RANGE, WORKER, validate
from .ranges import NVTX_CAPTURE
from .reports import UNDER_NSYS_ENV

log = logging.getLogger("rlprof")

_COUNTED_END = re.compile(r"repeat(?:-shutdown)?:(\d+)")


def worker_nsight_options(tool_config: Mapping[str, Any], expected_captures: int | None) -> tuple[dict[str, str], list[str]]:
    """The ``nsight`` dict for one worker that opens ``expected_captures`` windows (None: unknown),
    and the warnings to log about it."""
    options = dict(tool_config.get(WORKER) or {})
    warnings: list[str] = []
    options["capture-range"] = tool_config.get(RANGE) or CAPTURE_RANGE
    if options["capture-range"] == NVTX:
        options["nvtx-capture"] = NVTX_CAPTURE
    chosen = options.get("capture-range-end")
    if chosen is None:
        if expected_captures is None:
            options["capture-range-end"] = "repeat"
            warnings.append(
                "the plan cannot count this worker's capture windows (the stages a selected role runs per step were "
                "not declared, or its sampling schedule repeats without end), so nsys gets capture-range-end=repeat: "
                "it will write the reports only when the worker process exits. Declare the stages "
                "(Profiler(..., stages={'actor': ['update', ...]})) or bound the schedule to get repeat-shutdown:N"
            )
        else:
            options["capture-range-end"] = f"repeat-shutdown:{expected_captures}"
    else:
        counted = _COUNTED_END.match(chosen)
        if expected_captures is not None and (counted is None or int(counted.group(1)) != expected_captures):
            warnings.append(
                f"worker_nsight_options.capture-range-end={chosen!r} is kept, but the plan opens exactly "
                f"{expected_captures} capture window(s) on this worker: "
                + ("windows after that count are not recorded" if counted and int(counted.group(1)) < expected_captures
                   else "nsys writes the reports only at process exit")
                + f"; leave it null to get repeat-shutdown:{expected_captures}"
            )
    options.setdefault("kill", "none")
    if options["kill"] != "none" and options["capture-range-end"].startswith("repeat-shutdown"):
        warnings.append(
            f"worker_nsight_options.kill={options['kill']!r}: nsys will signal the worker after its last capture window"
        )
    options, sampling = sampling_options(options)
    if sampling:
        warnings.append(sampling)
    return options, warnings


def worker_runtime_env(tool_config: Mapping[str, Any], *, captures: bool, expected_captures: int | None,
                       who: str = "worker", rank: int | None = None) -> dict[str, Any] | None:
    """``{"nsight": {...}, "env_vars": {"RLPROF_NSYS_WORKER": "1", "PATH": ...}}`` for a worker that opens
    capture windows (the variable tells the worker its reports will come, see rlprof_nsys.relocation;
    PATH makes Ray's bare ``python`` this interpreter); None for one that opens none (it then runs
    without nsys at all: no overhead, no empty report)."""
    if not captures or expected_captures == 0:
        return None
    options, warnings = worker_nsight_options(tool_config, expected_captures)
    for warning in warnings:
        log.warning("rlprof nsys (%s): %s", who, warning)
    env_vars = {UNDER_NSYS_ENV: "1", "PATH": interpreter_path()}
    if rank is not None:
        env_vars[RANK_ENV] = str(rank)
    return {"nsight": options, "env_vars": env_vars}


RANK_ENV = "RLPROF_NSYS_RANK"
"""The worker's rank, in its runtime_env: it makes each profiled worker's runtime_env unique. Ray
otherwise hands the second identical runtime_env to the worker process it is still starting for the
first; under nsys that process (``nsys profile``) never registers itself (its child, the real worker,
does), so the second worker waits for Ray's 60-second registration timeout."""


def interpreter_path() -> str:
    """A worker's ``PATH``: this interpreter's directory (a virtual environment's ``bin``, not resolved
    through its symbolic link, which would lose the environment), then the worker's own PATH (Ray
    expands ``${PATH}`` when it starts the worker)."""
    return f"{os.path.dirname(os.path.abspath(sys.executable))}{os.pathsep}${{PATH}}"


def nsys_problem() -> str | None:
    """The error to show when ``nsys`` is not on this node's PATH, else None."""
    if shutil.which("nsys") is not None:
        return None
    return (
        f"nsys (Nsight Systems CLI) is not on PATH on host {socket.gethostname()}: Ray's nsight runtime_env needs it on "
        "every node that starts a profiled worker, or the actor fails with RuntimeEnvSetupError 'nsight is not installed'. "
        "Install Nsight Systems and put its bin directory on PATH (e.g. /opt/nvidia/nsight-systems/<version>/bin)"
    )


# ---------------------------------------------------------------------------------- the driver


def controller_nsight_options(config: Any = None, overrides: Iterable[str] = ()) -> dict[str, str]:
    """``global_tool_config.nsys.controller_nsight_options`` of a run's config, validated and normalised.

    ``config`` is anything :func:`rlprof.load_config` reads (YAML path, dict, DictConfig); ``overrides``
    dotted ``key=value`` strings. The loaded section holds no core keys (``discrete``, ``_target_``...):
    :func:`rlprof.load_config` removes them from every tool section."""
    from rlprof.backend_api import load_config

    loaded = load_config(config, overrides)
    return validate(loaded.global_.global_tool_config.get("nsys") or {}, "global_profiler.global_tool_config.nsys")[CONTROLLER]


RAY_DEFAULT_NSIGHT = {"t": "cuda,cudnn,cublas,nvtx", "o": "'worker_process_%p'", "stop-on-exit": "true"}
"""What Ray's ``{"nsight": "default"}`` stands for (Ray 2.x), spelled out when options must be added to it."""


def controller_runtime_env(config: Any = None, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """The runtime_env for a driver-side Ray actor (verl's ``TaskRunner``): ``{"nsight": options,
    "env_vars": {"PATH": ...}}``, the options being Ray's own ``"default"`` when none are configured
    (Ray ignores an empty dict). As for workers: this interpreter first on PATH (Ray runs a bare
    ``python``), and no CPU sampling where nsys would hang on it (:mod:`rlprof_nsys.cpu_sampling`)."""
    options = controller_nsight_options(config, overrides)
    adjusted, warning = sampling_options(options or dict(RAY_DEFAULT_NSIGHT))
    if warning:
        log.warning("rlprof nsys (controller): %s", warning)
    nsight: dict[str, str] | str = adjusted if (options or warning) else "default"
    return {"nsight": nsight, "env_vars": {"PATH": interpreter_path()}}


def controller_command(argv: Sequence[str], config: Any = None, overrides: Iterable[str] = ()) -> list[str]:
    """``["nsys", "profile", <controller options>, *argv]``: run the driver script itself under nsys,
    options spelled the way Ray spells them (``-t cuda`` for one letter, ``--cuda-memory-usage=true`` else);
    without CPU sampling on a host where nsys would hang on it (:mod:`rlprof_nsys.cpu_sampling`)."""
    options, warning = sampling_options(controller_nsight_options(config, overrides))
    if warning:
        log.warning("rlprof nsys (controller): %s", warning)
    return ["nsys", "profile", *command_options(options), *argv]


def command_options(options: Mapping[str, str]) -> list[str]:
    """nsys command-line arguments for an options dict."""
    args: list[str] = []
    for name, value in options.items():
        args.extend([f"-{name}", value] if len(name) == 1 else [f"--{name}={value}"])
    return args
