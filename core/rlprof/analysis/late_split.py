"""A profiled step's split finished after its processes ended (``python -m rlprof.cli.late_split JOB`` runs it).

Why: the end of a run waits for nothing it does not need (issue 49). A process that ends while its last traces
are still being analysed for the step metrics (a plain Profiler's last profiled step is written at finalize; a
100k-event trace takes seconds to read) hands them on (:meth:`rlprof.runtime.split_analyser.SplitAnalyser.hand_off`)
instead of waiting; the step's book (:class:`rlprof.runtime.step_book.StepBook`, the process's own or the run's
driver) writes a job file in ``<run>/late_splits/`` and starts its program (:mod:`rlprof.cli.late_split`, which calls
:func:`run_job`), in a session of its own at the lowest priority, not ended with the process that started it.

The job (JSON): ``run``, ``metrics`` (the step metrics file) and ``steps``, in step order, each a ``step`` and its
``processes``: per process, the ``figures`` its files already answered (``[[role, region, figures], ...]``) and the
files handed on (``late``: ``[[path, roles], ...]``). Each file is analysed as in the run (:func:`rlprof.analysis.step_split.analyse`: its
rows cached in the run's ``breakdown/``, where ``rlprof report`` reads them), the figures combined by the run's
one rule (:func:`rlprof.step_metrics.combine`), and the step's ``split`` line appended to the metrics file,
marked ``late``. The job file is removed last: a file left there names a split that was not finished (its
traces are still in the run; ``rlprof report`` splits them itself). Nothing goes to the ``step_metrics`` hook
or a tracker: the run has ended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlprof.step_metrics import StepMetricsRecord, add_region_figures, combine, split_metrics


def finish(job: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    """The ``split`` lines of ``job``'s steps (see the module doc), appended to its metrics file in step order; a
    step no process has figures for writes none."""
    from rlprof.manifest import ManifestWriter, record_fields

    writer = ManifestWriter(Path(job["metrics"]), {"run": job["run"]}, root=root)
    written = []
    try:
        for entry in job["steps"]:
            record = _split_line(int(entry["step"]), entry["processes"])
            if record is not None:
                writer.write(record.TYPE, **record_fields(record))
                written.append(record_fields(record))
    finally:
        writer.close()
    return written


def _split_line(step: int, processes: list[dict[str, Any]]) -> StepMetricsRecord | None:
    from rlprof.analysis.step_split import NotATrace, analyse

    figures_of = []
    for process in processes:
        figures: dict[tuple[str, str], dict] = {(role, region): dict(values) for role, region, values in process["figures"]}
        for path, roles in process["late"]:
            try:
                found = analyse(path, roles, [step]).get(step, {})
            except (NotATrace, OSError, ValueError, EOFError):
                found = {}
            for key, values in found.items():
                add_region_figures(figures.setdefault(key, {}), values)
        if figures:
            figures_of.append(figures)
    split = combine(figures_of)
    if not split:
        return None
    return StepMetricsRecord("split", step, split_metrics(step, split), processes=len(figures_of), late=True)


def pending(run_dir: Path) -> list[Path]:
    """The jobs of a run not finished yet (their splits still to come, or their program ended first)."""
    from rlprof.layout import LATE_DIR

    return sorted((Path(run_dir) / LATE_DIR).glob("step*.json"))


def wait(run_dir: Path, timeout_s: float = 120.0) -> bool:
    """Wait until the run's late splits are written (or ``timeout_s`` passed): True when none is pending. For a
    caller that reads the step metrics file right after a run (tests, a script), not for the run itself."""
    import time

    deadline = time.monotonic() + timeout_s
    while pending(run_dir):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def run_job(job_path: Path) -> None:
    """Finish the split of the job file at ``job_path`` and remove it (left in place when finishing failed: the
    split was not written).

    :raises Exception: reading the job or writing the line failed (the caller says it in one line)."""
    job = json.loads(job_path.read_text())
    finish(job, job_path.parent.parent)  # <run>/late_splits/JOB
    job_path.unlink(missing_ok=True)
