"""The ``precision_debugger`` backend: msprobe dumps of the model each selected stage runs.

The core decides which ranks, steps and roles are profiled and in which mode; this backend only
dumps. For each region (``start_role`` .. ``stop_role``) that is one of the section's ``stages``
(:data:`rlprof_msprobe.settings.STAGES`), it starts msprobe's debugger on the region's model
(``ctx.module``, which the trainer hands to ``prof.role(..., module=model)``), writing into
``<capture>/<rank dir>/precision_debugger/<region>/``, and at the region's end stops it and lists that
directory in the manifest (kind ``msprobe_dump``, with its step, role, rank and ``stage``). The same
in either capture mode: an end-to-end capture holds one dump directory per dumped region.

Every region that is not dumped says why with ``ctx.skip`` (so the verdict counts it as explained):
not one of ``stages``, no model, no usable config, another region being dumped (msprobe's debugger is
one per process: :mod:`rlprof_msprobe.debugger`), or nothing written. With ``strict: true`` each of
those "cannot dump" reasons (all but "not one of the stages") raises instead: the core records the
error and releases the backend; training goes on.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Mapping

from rlprof import hookimpl
from rlprof.backend_api import CliCommand

from .debugger import PROCESS
from .dumps import details, dump_files
from .settings import MSPROBE_PACKAGE, STAGES, PrecisionSettings, config_problem, precision_settings

ARTIFACT_KIND = "msprobe_dump"
"""Manifest ``kind`` of a region's dump directory (what :func:`rlprof_msprobe.dumps.details` reads)."""


class CannotDump(RuntimeError):
    """``strict: true`` and a selected stage could not be dumped: raised from the hook, so the core
    records it as an error of this backend."""


class PrecisionDebuggerBackend:
    """One per process session (colocated roles share it); the regions it is dumping are a stack."""

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for (docs/migration.md)."""
    reads_module = True
    """It dumps the region's model (``ctx.module``): integrations that look the model up (the verl
    drop-in, from verl's worker) do so for it."""

    def __init__(self) -> None:
        self._open: list[tuple[Path, str] | None] = []
        """Per region begun and not yet ended, innermost last: ``(dump directory, stage)`` when it is
        being dumped, else None."""

    # ------------------------------------------------------------------ configuration and environment

    @hookimpl
    def validate_tool_config(self, tool_config: Mapping[str, Any], key_path: str) -> Mapping[str, Any]:
        return precision_settings(tool_config, key_path).as_tool_config()

    @hookimpl
    def check_environment(self) -> list[str]:
        if importlib.util.find_spec("msprobe") is None:
            return [f"msprobe is not installed: pip install {MSPROBE_PACKAGE}"]
        return []

    # ------------------------------------------------------------------ the lifecycle

    @hookimpl
    def start_role(self, ctx) -> None:
        self._open.append(None)  # first: the matching stop_role pops it whatever happens below
        settings = PrecisionSettings.of(ctx.tool_config)
        stage = settings.stage_of(ctx.region)
        if stage is None:
            ctx.skip(f"{ctx.region} is not a precision_debugger stage to dump "
                     f"(stages: {', '.join(settings.stages if settings.stages is not None else STAGES)})")
            return
        problem = _why_not(ctx, settings, stage)
        if problem is not None:
            _cannot(ctx, settings, problem)
            return
        dump_path = _fresh(ctx.output_dir() / ctx.region)
        try:
            PROCESS.start(ctx.region, settings.config_path, ctx.module, dump_path)
        except Exception as exc:
            _cannot(ctx, settings, f"msprobe could not start dumping stage {stage}: {type(exc).__name__}: {exc}")
            return
        self._open[-1] = (dump_path, stage)

    @hookimpl
    def stop_role(self, ctx) -> None:
        entry = self._open.pop() if self._open else None
        if entry is None:
            return
        dump_path, stage = entry
        PROCESS.stop()
        if dump_files(dump_path):
            ctx.add_artifact(dump_path, kind=ARTIFACT_KIND, stage=stage)
        else:
            _cannot(ctx, PrecisionSettings.of(ctx.tool_config),
                    f"msprobe wrote no dump for stage {stage} (the step and rank lists of its config may leave it out)")

    @hookimpl
    def finalize(self, ctx) -> None:
        PROCESS.stop()  # the core closes every region first; this only guards a dump left open by a crash
        self._open.clear()

    # ------------------------------------------------------------------ outside a run

    @hookimpl
    def report_details(self, path) -> list[str]:
        return details(path)

    @hookimpl
    def cli_commands(self) -> Mapping[str, CliCommand]:
        return {"msprobe-compare": CliCommand(
            "compare two runs' msprobe dumps: the layers that differ beyond a tolerance, first divergence first",
            _compare, "RUN_A RUN_B [--tolerance T] [--method auto|msprobe|statistics] [--step N] [--region R] [--rank R]")}


def _compare(argv: list[str]) -> int:
    from .compare import main  # argparse and csv: only when the command runs

    return main(argv)


def _why_not(ctx, settings: PrecisionSettings, stage: str) -> str | None:
    """Why stage ``stage`` (region ``ctx.region``) cannot be dumped, or None."""
    if ctx.module is None:
        return (f"no model for stage {stage}: the trainer passes none to its region "
                f"(prof.role({ctx.role!r}, ..., module=model))")
    return config_problem(settings.config_path) or PROCESS.problem(settings.config_path)


def _cannot(ctx, settings: PrecisionSettings, reason: str) -> None:
    """A selected stage cannot be dumped: an error with ``strict``, else a skip saying why."""
    if settings.strict:
        raise CannotDump(f"{reason} (precision_debugger.strict is true)")
    ctx.skip(reason)


def _fresh(directory: Path) -> Path:
    """``directory``, or ``directory-2``, ``-3``... when a region ran more than once in one capture."""
    candidate, n = directory, 1
    while candidate.exists():
        n += 1
        candidate = directory.with_name(f"{directory.name}-{n}")
    return candidate
