"""Per-step metrics: what every step's region timings say, under names every experiment tracker accepts.

Every process times the regions of its enabled roles on every step, profiled or not
(:mod:`rlprof.runtime.step_timings`). Where the step's processes meet (verl's trainer, the Ray
controller, a plain :class:`~rlprof.Profiler` for its own process) those timings become, per step:

* per role and region (``rlprof/<role>/<region>/<figure>``):

  - ``slowest_s``: the slowest process's time in the region (a process that entered it twice counts both);
  - ``slowest_rank``: its rank (a rollout replica's: its replica rank);
  - ``median_s``: the median process's time;
  - ``spread_s``: the slowest minus the fastest;
  - ``late_rank``: the rank that entered the region latest, when its lateness stands clear of the run's
    noise (:mod:`rlprof.noise`: its entry, counted from the step's start, passes the other processes'
    median entry by the noise of the last :data:`NOISE_STEPS` steps plus the larger of 5% of the region's
    median time and the floor); ``-1`` when no rank does (a tracker plots numbers). The noise is the
    earlier steps' only: with two ranks a step's own lateness would be its own noise. A rank late from
    some step on is named at the first such step; from then on its lateness is part of the run's noise.
    None is named before the region's :data:`NOISE_MIN_STEPS`-th step;
  - ``late_by_s``: how much later than the others' median that rank entered (0 when ``late_rank`` is -1);

* per step (``rlprof/step/<figure>``): ``time_s`` (the step's wall time, from its driver's start to its end)
  and ``outside_regions_s`` (the part of the step no region of any process covers: the union of their
  intervals on the shared wall clock, as the report's "(outside regions)");

* on a profiled step, once its traces are analysed: the split of each region's wall time as
  :mod:`rlprof.analysis.breakdown` measures it (``compute_frac``, ``exposed_comm_frac``,
  ``exposed_memory_frac``, ``idle_frac``: the slowest process's, whose time the step waited for) and the
  largest memory allocated inside the region where the capture recorded memory (``peak_allocated_bytes``).
  Those figures arrive steps later (a trace is analysed after its capture closed), so they always carry
  the step they describe as :data:`SPLIT_STEP` (``rlprof/split/step``): a tracker that refuses a step
  lower than one it has (wandb) logs them against that key (``wandb.define_metric``), never out of order.

Names (:func:`metric_name`, the one function that builds them): ``rlprof/<role>/<region>/<figure>``, the
region without its role's prefix (``actor_update`` is ``rlprof/actor/update/...``; a region named as its
role, or ``<role>_<role>``, keeps its whole name), units in the name (``_s``, ``_frac``, ``_bytes``; a rank
has none), only ``[A-Za-z0-9_./-]``, and no name a path prefix of another (:func:`check_names` says which
breaks a rule). They suit wandb, mlflow, tensorboard, swanlab, clearml and JSON alike.

The file (:class:`StepMetricsRecord`, written by :func:`metrics_writer`): ``<run>/step_metrics.jsonl``
where a driver combines every process (verl's trainer, the Ray controller, a plain Profiler of a
one-process run), else ``<run>/step_metrics/<rank>-<host>-<pid>.jsonl`` per process; docs/analysis.md,
"Step metrics", gives its schema.

A leaf: the drivers (runtime, integrations) compute with it and the analysis reads the file with it.
"""

from __future__ import annotations

import bisect
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, Sequence

from rlprof.intervals import length, union
from rlprof.noise import MARGIN, between_processes, others_medians, stands_clear
from rlprof.step_work import Work, WorkFigures, work_figures
from rlprof.row_model import PART_NAMES, merge_rule

PREFIX = "rlprof"
STEP = "step"
"""The ``<role>`` segment of the step's own figures (no role has that name)."""
REGION_FIGURES = ("slowest_s", "slowest_rank", "median_s", "spread_s", "late_rank", "late_by_s")
"""What every step says of each region, from every process's timing of it."""
PEAK = "peak_allocated_bytes"
"""The split's memory figure: the :class:`~rlprof.row_model.Row` column of the same name."""
SPLIT_FIGURES = tuple(f"{part}_frac" for part in PART_NAMES.values()) + (PEAK, "mfu_compute")
"""What an analysed profiled step adds to each region (with :data:`SPLIT_STEP`): each part of the window
(:data:`rlprof.row_model.WINDOW_PARTS`, named as the row model names it for the step metrics) as a fraction, the
peak, and ``mfu_compute`` where its trace counted FLOPs (:func:`combine`)."""
STEP_FIGURES = ("time_s", "outside_regions_s")
"""What every step says of itself."""
SPLIT_STEP = f"{PREFIX}/split/step"
"""The step a split figure describes: logged with them, their x-axis in a tracker that wants steps in order."""
NO_RANK = -1
"""``late_rank`` of a step where no rank entered clearly late."""
NOISE_STEPS = 20
"""How many recent steps' entries make the noise a late rank must stand clear of."""
NOISE_MIN_STEPS = 3
"""No rank is named late before the region was timed in this many earlier steps (a first step's entries
differ by the workers' warm-up, and no noise is known yet)."""
ALLOWED = re.compile(r"[A-Za-z0-9_./-]+")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

FILE = "step_metrics.jsonl"
"""The run's file, where one driver combines every process (under the run directory)."""
PROCESS_DIR = "step_metrics"
"""Per-process files, where no driver combines them (``<run>/step_metrics/<rank>-<host>-<pid>.jsonl``)."""


# ------------------------------------------------------------------------------------------ names


def _segment(text: str) -> str:
    cleaned = _UNSAFE.sub("_", str(text)).strip(".")
    return cleaned or "_"


def region_segment(role: str, region: str) -> str:
    """The ``<region>`` segment: the region name less ``<role>_`` (``actor_update`` -> ``update``), the whole
    name when that leaves the role's own name or nothing (``actor``, ``actor_actor``): one segment per region."""
    rest = region[len(role) + 1:] if region.startswith(role + "_") else region
    return _segment(region if not rest or rest == role else rest)


def metric_name(role: str, region: str | None, figure: str) -> str:
    """The tracker name of ``figure`` of ``region`` of ``role`` (``region`` None: a figure of ``role`` itself, or,
    ``role`` empty, of the step): ``rlprof/actor/update/slowest_s``, ``rlprof/step/time_s``, ``rlprof/requests/count``
    (the rollout's requests, :mod:`rlprof.request_figures`). The one place names are made; every name it makes
    passes :func:`check_names` with the others."""
    if region is None:
        return f"{PREFIX}/{_segment(role) if role else STEP}/{_segment(figure)}"
    return f"{PREFIX}/{_segment(role)}/{region_segment(role, region)}/{_segment(figure)}"


def check_names(names: Iterable[str]) -> list[str]:
    """What breaks the naming rules among ``names`` (empty: none): a character outside ``[A-Za-z0-9_./-]``,
    or a name that is a path prefix of another (``a/b`` beside ``a/b/c``: a tracker that nests by ``/`` cannot hold
    both; ``a/tail_s`` beside ``a/tail_share`` is fine)."""
    problems = []
    ordered = sorted(set(names))
    known = set(ordered)
    for name in ordered:
        if not ALLOWED.fullmatch(name):
            problems.append(f"{name!r}: a character outside [A-Za-z0-9_./-]")
    for name in ordered:  # a path prefix: the name and a "/" begin another (tail_s beside tail_share is fine)
        parts = name.split("/")
        problems += [f"{prefix!r} is a prefix of {name!r}" for prefix in ("/".join(parts[:i]) for i in range(1, len(parts)))
                     if prefix in known]
    return problems


# ------------------------------------------------------------------------------------------ figures


@dataclass(frozen=True)
class Timing:
    """One region of one process, once: ``rank`` (a replica's replica rank), its ``role`` and ``region``,
    wall-clock ns."""

    rank: int
    role: str
    region: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class RegionFigures:
    """What one step says of one region (see the module doc for each figure)."""

    role: str
    region: str
    times_s: Mapping[int, float]
    """Rank -> its time in the region in this step (seconds; entered twice: both)."""
    entries_s: Mapping[int, float]
    """Rank -> when it first entered the region, seconds after the step's start (what ``late_rank`` judges)."""
    slowest_s: float
    slowest_rank: int
    median_s: float
    spread_s: float
    late_rank: int
    """:data:`NO_RANK` when no rank entered clearly late."""
    late_by_s: float
    work: WorkFigures | None = None
    """Its analytic FLOPs, where its processes said how many tokens it processed (:mod:`rlprof.step_work`)."""

    def metrics(self) -> dict[str, float]:
        out = {metric_name(self.role, self.region, name): getattr(self, name) for name in REGION_FIGURES}
        if self.work is not None:
            out.update({metric_name(self.role, self.region, name): value for name, value in self.work.metrics().items()})
        return out


@dataclass(frozen=True)
class StepFigures:
    """One step's figures: what a driver keeps for the latest steps (:class:`rlprof.runtime.step_book.StepBook`)
    and writes as the step's line."""

    step: int
    start_ns: int
    end_ns: int
    regions: Mapping[tuple[str, str], RegionFigures]
    """(role, region) -> its figures, for every region some process timed in the step."""
    outside_regions_s: float
    processes: int
    """How many processes' timings the figures hold."""
    requests: Any = None
    """The step's rollout request figures (a :class:`rlprof.request_figures.RequestFigures`, which builds on this
    module), or None: no request was recorded."""

    @property
    def time_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def metrics(self) -> dict[str, float]:
        """The step's figures under their tracker names."""
        out = {metric_name("", None, "time_s"): round(self.time_s, 6),
               metric_name("", None, "outside_regions_s"): round(self.outside_regions_s, 6)}
        for figures in self.regions.values():
            out.update(figures.metrics())
        if self.requests is not None:
            out.update(self.requests.metrics())
        return {k: rounded(v) if isinstance(v, float) else v for k, v in out.items()}

    def work(self) -> dict[str, Any]:
        """``"<role>/<region>"`` -> its analytic figures in full (:meth:`WorkFigures.as_dict`): the step line's ``work``."""
        return {f"{role}/{region}": f.work.as_dict() for (role, region), f in self.regions.items() if f.work is not None}


def rounded(value: float) -> float:
    """A figure as the file and the tracker get it: to the microsecond (6 decimals), and to 6 significant digits
    below 1 (an MFU or TFLOP/s of a small model on a CPU is well under a millionth)."""
    return float(f"{value:.6g}") if abs(value) < 1 else round(value, 6)


def step_figures(step: int, start_ns: int, end_ns: int, timings: Sequence[Timing],
                 recent: Sequence[StepFigures] = (), processes: int = 0, requests: Any = None) -> StepFigures:
    """The figures of ``step`` (its window ``[start_ns, end_ns]``) from the ``timings`` of its regions, sent
    by ``processes`` processes; ``recent``: the steps before it (the noise a late rank must stand clear of);
    ``requests``: its rollout request figures, when it has any."""
    times: dict[tuple[str, str], dict[int, float]] = {}
    entries: dict[tuple[str, str], dict[int, float]] = {}
    intervals = []
    works: dict[tuple[str, str], list[Work]] = {}
    for t in timings:
        if isinstance(t, Work):  # tokens a process processed in the region, not a time in it
            works.setdefault((t.role, t.region), []).append(t)
            continue
        key = (t.role, t.region)
        times.setdefault(key, {})
        times[key][t.rank] = times[key].get(t.rank, 0.0) + (t.end_ns - t.start_ns) / 1e9
        entry = (t.start_ns - start_ns) / 1e9
        known = entries.setdefault(key, {})
        if t.rank not in known or entry < known[t.rank]:
            known[t.rank] = entry
        intervals.append((max(t.start_ns, start_ns), min(t.end_ns, end_ns)))
    step_ms = (end_ns - start_ns) / 1e6
    regions = {}
    for key in sorted(times):
        history = [f.regions[key].entries_s for f in recent[-NOISE_STEPS:] if key in f.regions]
        regions[key] = _region_figures(key, times[key], entries[key], history, step_ms, works.get(key, ()))
    covered = length(union(intervals)) / 1e9
    return StepFigures(step, start_ns, end_ns, regions, max(0.0, (end_ns - start_ns) / 1e9 - covered), processes, requests)


def _region_figures(key: tuple[str, str], times: dict[int, float], entries: dict[int, float],
                    history: list[Mapping[int, float]], step_ms: float, works: Sequence[Work] = ()) -> RegionFigures:
    slowest = max(times, key=lambda rank: (times[rank], -rank))
    median = statistics.median(times.values())
    late, late_by = NO_RANK, 0.0
    if len(entries) > 1 and len(history) >= NOISE_MIN_STEPS:
        latest = max(entries, key=lambda rank: (entries[rank], -rank))
        excess_ms = (entries[latest] - others_medians(entries)[latest]) * 1e3
        noise_ms = between_processes([{r: v * 1e3 for r, v in e.items()} for e in history]).get(latest, 0.0)
        if stands_clear(excess_ms, noise_ms, median * 1e3, MARGIN, step_ms):
            late, late_by = latest, excess_ms / 1e3
    return RegionFigures(key[0], key[1], dict(times), dict(entries), times[slowest], slowest, median,
                         times[slowest] - min(times.values()), late, late_by, work_figures(works, times))


def in_window(starts: Sequence[int], windows: Sequence[tuple[int, int, int]], start_ns: int) -> int | None:
    """The step whose window (``(step, start_ns, end_ns)``, ordered by start, ``starts`` their starts) holds
    ``start_ns``, or None: how a driver gives a step to a region whose process was told none."""
    index = bisect.bisect_right(starts, start_ns) - 1
    if index >= 0 and start_ns <= windows[index][2]:
        return windows[index][0]
    return None


# ------------------------------------------------------------------------------------------ the split


WINDOW = "window_ms"
FLOPS, UNCOUNTED = "flops", "uncounted"
PEAK_KEYS = ("peak_tflops", "measured_tflops", "peak_source")
"""A region's figures of one process that say its counted FLOPs, the compute no formula counts, its device's peak
(the :class:`~rlprof.row_model.Row` columns of the same names: FLOPs add up, names are listed once, the peak is the first known)."""
FIGURE_COLUMNS = ({f"{part}_ms": column for column, part in PART_NAMES.items()} | {WINDOW: WINDOW, PEAK: PEAK}
                  | {name: name for name in (FLOPS, UNCOUNTED, *PEAK_KEYS)})
"""A process's figures of one region in one step, as the analysis of a trace sends them (:mod:`rlprof.analysis.step_split`,
run as :mod:`rlprof.cli.step_split`: ``compute_ms``, ``exposed_comm_ms``, ...) -> the :class:`~rlprof.row_model.Row`
column each is read from."""
SPLIT_TIMES = {f"{part}_frac": f"{part}_ms" for part in PART_NAMES.values()}
"""Each fraction of a split -> the time one process's region spent so (its part of ``window_ms``), as a driver
combines it (:func:`rlprof.runtime.step_book.combine`)."""




def add_region_figures(kept: dict[str, Any], values: Mapping[str, Any]) -> None:
    """``values``, a region's figures of one process in one step (:data:`FIGURE_COLUMNS`), added to ``kept``,
    the same region of the same process and step seen before (entered twice, or in two files), each by its
    column's merge rule (:func:`rlprof.row_model.merge_rule`: the times add up, the peak is the larger of those
    known): the rule a :class:`~rlprof.row_model.Row` follows, for a trace's analysis and a driver combining
    several files of a process."""
    for name, value in values.items():
        kept[name] = merge_rule(FIGURE_COLUMNS.get(name, WINDOW))(kept.get(name), value)  # another figure: a time


def combine(processes: list[dict[tuple[str, str], dict]]) -> dict[tuple[str, str], dict[str, float]]:
    """One profiled step's split from each process's figures of it (``(role, region) -> compute_ms,
    exposed_comm_ms, exposed_memory_ms, idle_ms, window_ms, peak_allocated_bytes``, FLOPs and peak): per region
    the fractions of the process whose window was longest (parts over its window), the largest peak any process
    recorded, and ``mfu_compute``: every process's counted FLOPs over its compute time x its device's peak
    (none where some process ran compute no formula counts, or the figure would pass 100%)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key in sorted({key for figures in processes for key in figures}):
        seen = [figures[key] for figures in processes if key in figures]
        slowest = max(seen, key=lambda f: f.get("window_ms") or 0.0)
        window = slowest.get("window_ms") or 0.0
        values: dict[str, float] = {}
        if window > 0:
            for fraction, part in SPLIT_TIMES.items():
                values[fraction] = (slowest.get(part) or 0.0) / window
        peaks = [f[PEAK] for f in seen if f.get(PEAK) is not None]
        if peaks:
            values[PEAK] = max(peaks)
        counted = [f for f in seen if f.get(FLOPS) is not None and f.get("peak_tflops") and (f.get("compute_ms") or 0) > 0]
        if counted and len(counted) == len(seen) and not any(f.get(UNCOUNTED) for f in seen):
            capacity = sum(f["compute_ms"] / 1e3 * f["peak_tflops"] * 1e12 for f in counted)
            mfu = sum(f[FLOPS] for f in counted) / capacity
            if 0.0 <= mfu <= 1.0:
                values["mfu_compute"] = mfu
        if values:
            out[key] = values
    return out


def split_metrics(step: int, split: Mapping[tuple[str, str], Mapping[str, float]]) -> dict[str, float]:
    """An analysed profiled step's split figures under their tracker names, with :data:`SPLIT_STEP`:
    ``split`` maps (role, region) to :data:`SPLIT_FIGURES` values (those known)."""
    out: dict[str, float] = {SPLIT_STEP: step}
    for (role, region), values in sorted(split.items()):
        for name in SPLIT_FIGURES:
            if values.get(name) is not None:
                out[metric_name(role, region, name)] = rounded(values[name]) if isinstance(values[name], float) else values[name]
    return out


# ------------------------------------------------------------------------------------------ the file


@dataclass
class StepMetricsRecord:
    """One line of a step metrics file (docs/analysis.md, "Step metrics"): ``kind`` ``step``, one per step
    as its figures are complete (every process that reports has passed the step's end, or the driver gave up
    waiting), or ``split``, one per analysed profiled step. Written by the drivers, read by the analysis
    (:func:`read_step_metrics`); a field added here is written and read with no other edit."""

    TYPE: ClassVar[str] = "step_metrics"
    kind: str
    """``step`` (a step's timings), ``split`` (an analysed profiled step's split) or ``framework`` (the trainer's
    own figures rlprof's stand beside: verl's ``perf/mfu/*``, with its peak in ``work``)."""
    step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    """Tracker name -> value (:func:`metric_name`)."""
    start_ns: int | None = None
    """The step's window on the wall clock (``time.time_ns()``); None on a ``split`` line."""
    end_ns: int | None = None
    processes: int = 0
    """How many processes' timings the ``step`` line holds; on a ``split`` line, how many processes' traces
    its figures come from."""
    profiled: bool = False
    """Some process captured this step."""
    work: dict[str, Any] = field(default_factory=dict)
    """On a ``step`` line, each region whose processes said their tokens: ``{"<role>/<region>": {tokens, flops,
    flops_per_token, formula, peak, tokens_per_s, model_tflops, mfu_window, mfu_window_measured, note,
    processes}}`` (:mod:`rlprof.step_work`)."""
    timings: dict[str, Any] = field(default_factory=dict)
    """The step's raw timings on a ``step`` line, for analyses that need the intervals: ``{"<role>/<region>":
    {"rank": [...], "start_s": [...], "end_s": [...]}}``, seconds after ``start_ns``, one item per time a
    process was in the region; ``{"left_out": n}`` for a step of more than 4096 timings."""
    request_records: int = 0
    """How many of the step's rollout request records (``rlprof/requests/count``) the run's records file holds of it
    (:mod:`rlprof.request_records`; fewer: the budget left them out)."""
    late: bool = False
    """A ``split`` line written after its run by :mod:`rlprof.analysis.late_split` (some of its traces were
    still being analysed as their processes ended)."""


def metrics_files(run_dir: Path) -> list[Path]:
    """A run's step metrics files: the run's own when a driver wrote one, else every process's."""
    run_dir = Path(run_dir)
    if (run_dir / FILE).is_file():
        return [run_dir / FILE]
    return sorted((run_dir / PROCESS_DIR).glob("*.jsonl"))


def read_step_metrics(path: Path) -> list[StepMetricsRecord]:
    """The records of one step metrics file, in file order (a line that is not one is passed over)."""
    import json

    from rlprof.manifest import read_record

    out = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                raw = json.loads(line)
                if raw.get("type") == StepMetricsRecord.TYPE:
                    out.append(read_record(StepMetricsRecord, raw))
            except (ValueError, AttributeError, TypeError):
                continue
    return out
