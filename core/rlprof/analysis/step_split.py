"""One trace's split per step and role region, for the step metrics while the run goes on.

The program ``python -m rlprof.cli.step_split TRACE --roles actor,ref --steps 2`` prints it. Why a program:
a profiled step's split (compute, exposed communication, exposed memory, idle, and the peak memory allocated
where the capture recorded memory) reaches the experiment tracker during the run, so a process that profiles has its own traces analysed as they are written
(:mod:`rlprof.runtime.split_analyser`). Reading a trace takes seconds of CPU and the memory of its events;
in a process of its own at the lowest priority (:mod:`rlprof.priority`) that cost never lands on the training thread,
its interpreter lock or its heap.

What it prints, on stdout, one JSON object: ``{"steps": {"<step>": [[role, region, figures], ...]}}``
where ``figures`` holds the region's ``compute_ms``, ``exposed_comm_ms``, ``exposed_memory_ms``, ``idle_ms``,
``window_ms`` (the four parts add up to the window: :mod:`rlprof.analysis.breakdown`) and
``peak_allocated_bytes`` (None where the trace recorded no memory), ``flops``, ``uncounted`` and the peak
(``peak_tflops``, ``measured_tflops``, ``peak_source``) where the capture counted FLOPs; ``{"steps": {}, "skipped": "..."}``
when no installed reader reads the file (it is no trace); ``{"error": "..."}`` (exit status 1) when reading
it failed. Its rows are cached in the run's
``breakdown/`` folder (:func:`rlprof.analysis.breakdown_files.file_rows`), so a later ``rlprof report``
reads no trace again.

Which rows: the role regions only. A role's regions are named ``<role>`` or ``<role>_<stage>``
(``Profiler.role``), so a row's region belongs to the longest of ``roles`` it is, or begins with plus
``_``; other rows (``ProfilerStep#N``, ``(trace)``, a user's ``record_function``) are not a role's. A row
of no step (a capture without step markers) belongs to the capture's step when it has one (``--steps``).
A region seen twice in a step (entered twice) adds up.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from rlprof.step_metrics import FIGURE_COLUMNS, FLOPS, PEAK, PEAK_KEYS, UNCOUNTED, add_region_figures

TIMES = tuple(name for name in FIGURE_COLUMNS if name not in (PEAK, FLOPS, UNCOUNTED, *PEAK_KEYS))
"""The figures that are times (the window's parts and the window), each read from its
:class:`~rlprof.row_model.Row` column (:data:`rlprof.step_metrics.FIGURE_COLUMNS`); the others are the peak
allocated, the counted FLOPs, the uncounted operators and the device's peak."""


class NotATrace(ValueError):
    """No installed reader reads the file (a memory snapshot, a backend's other output): nothing to analyse."""


def role_of(region: str, roles: Iterable[str]) -> str | None:
    """The role whose region ``region`` is (``actor_update`` -> ``actor``), or None."""
    found = [role for role in roles if region == role or region.startswith(role + "_")]
    return max(found, key=len) if found else None


def step_figures(rows: Iterable[Any], roles: Sequence[str], steps: Sequence[int] = ()) -> dict[int, dict[tuple[str, str], dict]]:
    """Step -> (role, region) -> figures (see the module doc) of ``rows``."""
    default = steps[0] if len(steps) == 1 else None
    out: dict[int, dict[tuple[str, str], dict]] = {}
    for row in rows:
        role = role_of(row.region, roles)
        step = row.step if row.step is not None else default
        if role is None or step is None:
            continue
        figures = out.setdefault(step, {}).setdefault((role, row.region), dict.fromkeys(TIMES, 0.0) | {PEAK: None})
        add_region_figures(figures, {**{name: float(getattr(row, FIGURE_COLUMNS[name]) or 0.0) for name in TIMES},
                                     PEAK: getattr(row, PEAK, None),  # a row of a reader without memory
                                     **{name: getattr(row, name, None) for name in (FLOPS, UNCOUNTED, *PEAK_KEYS)}})
    return out


def analyse(path: str, roles: Sequence[str], steps: Sequence[int] = ()) -> dict[int, dict[tuple[str, str], dict]]:
    """The figures of the trace at ``path`` (see the module doc).

    :raises NotATrace: no installed reader reads it (the reason)."""
    from pathlib import Path

    from rlprof.analysis.trace_readers import claim, readers
    from rlprof.analysis.breakdown_files import file_rows

    answers, _ = readers()
    target, why = claim(Path(path), answers)
    if target is None:
        raise NotATrace(why)
    return step_figures(file_rows(path, target).rows, roles, steps)


