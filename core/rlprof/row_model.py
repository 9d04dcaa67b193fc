"""The breakdown's row model: each column of a region's row declared once, with everything that reads it.

A row is one (trace or process, step, region) as :mod:`rlprof.analysis.breakdown` measures it. Each column
is a :func:`column`: its label in tables, its text in docs/analysis.md, the tables that list it, whether it
is one of the parts that add up to the window (with its name in the step metrics and its colour in the HTML
page's bars), how a region seen twice adds up, its unit. Everything that lists rows, draws the split, names
its figures for a tracker or adds two of them reads these declarations: ``rlprof breakdown``, the report
(text, JSON, HTML), the rows cache's version, the step metrics (:mod:`rlprof.step_metrics`), the in-run
analysis (:mod:`rlprof.analysis.step_split`), the driver's step book. A leaf: the runtime's step metrics
and the analysis both read it.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Iterable, Sequence

from rlprof.sizes import size_text

DEFINITIONS = 2
"""The version of the split's definitions (docs/analysis.md, "Inside a region"): raised when a figure is
measured another way while :class:`Row`'s columns stay the same (2: ``memory_ms`` became every copy's time,
``exposed_memory_ms`` the part no kernel covers). With the columns it makes :func:`rows_version`."""

BREAKDOWN, REPORT = "breakdown", "report"
"""Where a column is listed (:func:`column`'s ``listed``): ``rlprof breakdown``'s table (per trace, its
value), the report's and the HTML page's table of each region (per process, ms as a share of the wall time)."""


def column(label: str = "", *, doc: str, listed: tuple[str, ...] = (), part: str = "", colour: str = "",
           merge: str = "sum", unit: str = "ms", default: Any = MISSING) -> Any:
    """Declare a column of :class:`Row`: the one place a figure of the breakdown is named, documented and
    placed. Everything that lists rows reads these declarations, in the order :class:`Row` declares them:
    ``rlprof breakdown`` (text and ``--json``), the report's inside-regions table, its ``--json`` and the
    HTML page (:mod:`rlprof.analysis.inside`), the reference in docs/analysis.md (:func:`row_reference`),
    and the rows cache's version (:func:`rows_version`).

    :param label: its name in tables (none: not in any table; still in every JSON).
    :param doc: what it holds (the reference's text).
    :param listed: the tables that show it (:data:`BREAKDOWN`, :data:`REPORT`).
    :param part: a column that is one of the parts adding up to the window (compute + exposed communication +
        exposed memory + idle) names the part here, as the step metrics name it (``exposed_comm``: the tracker's
        ``exposed_comm_frac``, the in-run analysis' ``exposed_comm_ms``); skew, the stacked bars, ``rlprof
        compare`` and the step metrics weigh these (:data:`WINDOW_PARTS`).
    :param colour: a part's colour in the HTML page's stacked bars.
    :param merge: how a region that ran twice in a step on one process adds up: ``sum``, ``sum_known``
        (None until a row knows it), ``first``, ``first_known``, ``last``, ``max``.
    :param unit: ``ms`` (the report shows it as a share of the region's wall time), or ``bytes``.
    """
    if merge not in MERGES:
        raise ValueError(f"column merge: got {merge!r}; allowed: {', '.join(MERGES)}")
    if part and not colour:
        raise ValueError(f"column part {part!r}: a part needs its colour in the stacked bars")
    metadata = {"label": label, "doc": doc, "listed": listed, "part": part, "colour": colour, "merge": merge, "unit": unit}
    return field(default=default, metadata=metadata)


MERGES = {
    "sum": lambda a, b: a + b,
    "sum_known": lambda a, b: a if b is None else (a or 0.0) + b,
    "first": lambda a, b: a,
    "first_known": lambda a, b: a if a is not None and a != "" else b,
    "last": lambda a, b: b,
    "max": lambda a, b: b if a is None else a if b is None else max(a, b),
    "names": lambda a, b: names((a, b)),
    "derived": lambda a, b: a,  # worked out again once added up (derive)
}
"""Each ``merge`` rule of :func:`column`: (the value kept, the same figure seen again) -> the value kept now."""


@dataclass(kw_only=True)
class Row:
    """One (trace or process, step, region): the schema of docs/analysis.md, every time in ms. Each field
    is a :func:`column`; tables list the labelled ones in this order."""

    path: str = column(merge="first", unit="", doc="The trace file.")
    rank: int | None = column(merge="first", unit="", doc="The trace's rank (from rlprof's layout; null when unknown).")
    step: int | None = column(merge="first", unit="", doc="The step whose range holds the region's start (null: none).")
    region: str = column(merge="first", unit="", doc="`ProfilerStep#N`, an annotation (rlprof's role regions, a user's "
                                                    "`record_function`), or `(trace)`: the whole trace.")
    device: str = column(merge="first", unit="", doc="`cuda`, `npu` or `cpu` (a trace without device events: its host ops).")
    start_ms: float = column(merge="first", doc="The region's start, on the trace's clock (the window begins here).")
    end_ms: float = column(merge="last", doc="The region's end (the window may go on to the end of its last device event).")
    wall_ms: float = column(doc="The region itself: end − start.")
    window_ms: float = column("window", listed=(BREAKDOWN,), doc="Region start to max(region end, end of its last "
                              "device event); the `(trace)` row: first to last device event.")
    compute_ms: float = column("compute", listed=(BREAKDOWN, REPORT), part="compute", colour="#4c78a8", doc="|C|: the union of the compute "
                               "kernels (host ops other than collectives, less communication, on a CPU-only trace).")
    exposed_communication_ms: float = column("exposed comm", listed=(BREAKDOWN, REPORT), part="exposed_comm", colour="#e45756",
                                             doc="|K| − |C ∩ K|: communication no compute covers.")
    exposed_memory_ms: float = column("exposed memory", listed=(BREAKDOWN, REPORT), part="exposed_memory", colour="#f2cf5b",
                                      doc="|M − (C ∪ K)|: copies no kernel covers, the time the device only copied.")
    idle_ms: float = column("idle", listed=(BREAKDOWN, REPORT), part="idle", colour="#d0d7de", doc="window − |C ∪ K ∪ M|.")
    memory_ms: float = column("memory", listed=(BREAKDOWN, REPORT), doc="|M|: the copies' union, hidden under a kernel or "
                              "not (not a part: its hidden share is inside compute or exposed communication).")
    overlap_ms: float = column("overlap", listed=(BREAKDOWN,), doc="|C ∩ K|: compute and communication at once.")
    communication_ms: float = column(doc="|K|: the union of the collectives.")
    communication_wait_ms: float | None = column(
        "comm wait", listed=(BREAKDOWN,), merge="sum_known", default=None,
        doc="Time in collectives before the last rank arrived; null when no other rank's trace was given.")
    communication_transfer_ms: float | None = column(merge="sum_known", default=None, doc="communication − wait.")
    waited_for_rank: int | None = column(merge="first_known", unit="", default=None,
                                         doc="The rank that arrived last in the collective the region waited longest for.")
    waited_in: str | None = column(merge="first_known", unit="", default=None,
                                   doc="That collective's name (`c10d::allreduce_`, `ncclDevKernel_AllReduce...`).")
    clock_offset_ms: float | None = column(merge="first", default=None,
                                           doc="Ranks on several hosts: what was added to this trace's host clock to "
                                               "align it on the reference host's (null on one host).")
    clock_residual_ms: float | None = column(merge="first", default=None,
                                             doc="How far those clocks still disagree after aligning (the waits are good "
                                                 "to about this).")

    peak_allocated_bytes: float | None = column(
        "peak allocated", listed=(BREAKDOWN, REPORT), merge="max", unit="bytes", default=None,
        doc="The most memory allocated on the trace's device at any moment of the region (what was allocated "
            "as it began, and every change inside it), where the capture recorded memory (torch's "
            "`profile_memory`, `contents: [memory]`); null where it did not.")

    # What the compute achieved (docs/analysis.md, "What the compute achieves"): the counted FLOPs and the peak
    # come from the trace (rlprof.analysis.achieved.counted); the rest follows from them (derive)
    flops: float | None = column("flops", listed=(BREAKDOWN,), merge="sum_known", unit="flop", default=None,
                                 doc="The FLOPs counted in the region: the matrix products (`mm`, `addmm`, `bmm`, "
                                     "`baddbmm`, `conv2d`) that began in it, by torch's formulas from their recorded "
                                     "shapes; null where the capture did not count FLOPs.")
    uncounted: str | None = column(merge="names", unit="", default=None,
                                   doc="Compute operators no formula counts that ran in the region (attention "
                                       "kernels, other convolutions...): its `flops` are a lower bound, no MFU is given.")
    peak_tflops: float | None = column(merge="first_known", unit="", default=None,
                                       doc="The peak TFLOP/s MFU is divided by (configured, the device's spec, or measured).")
    measured_tflops: float | None = column(merge="first_known", unit="", default=None,
                                           doc="What a matmul calibration measured on the device, once per run and host.")
    peak_source: str | None = column(merge="first_known", unit="", default=None,
                                     doc="Which peak, said whole: `spec 989.4 TFLOP/s (NVIDIA H100 80GB HBM3, bf16)`.")
    flops_per_s_window: float | None = column(merge="derived", unit="flop/s", default=None, doc="flops / window.")
    flops_per_s_compute: float | None = column(merge="derived", unit="flop/s", default=None,
                                               doc="flops / compute: never below `flops_per_s_window`.")
    mfu_window: float | None = column("MFU window", listed=(BREAKDOWN,), merge="derived", unit="frac", default=None,
                                      doc="`flops_per_s_window` / the peak, 0 to 1; null where `mfu_note` says why.")
    mfu_compute: float | None = column("MFU compute", listed=(BREAKDOWN, REPORT), merge="derived", unit="frac",
                                       default=None, doc="`flops_per_s_compute` / the peak, 0 to 1: the kernels' own "
                                                         "efficiency, the waiting left out.")
    mfu_compute_measured: float | None = column(merge="derived", unit="frac", default=None,
                                                doc="`flops_per_s_compute` / the measured peak.")
    mfu_note: str | None = column(merge="derived", unit="", default=None,
                                  doc="Why an MFU is not given: uncounted compute, nothing counted, no peak, or a "
                                      "figure above 100% and what is inconsistent (the peak or the count).")

    def add(self, other: "Row") -> None:
        """Add ``other``, the same region of the same process in the same step seen again (it ran twice),
        each column by its ``merge`` rule, then the derived ones worked out again (:func:`derive`)."""
        for f in _COLUMNS:
            setattr(self, f.name, MERGES[f.metadata["merge"]](getattr(self, f.name), getattr(other, f.name)))
        derive(self)


_COLUMNS = fields(Row)


def merge_rule(name: str) -> Callable[[Any, Any], Any]:
    """Column ``name``'s merge rule for a figure that may be unknown on either side (None: the other is kept),
    as the step metrics add a region's figures seen twice (:func:`rlprof.step_metrics.add_region_figures`)."""
    rule = MERGES[_MERGE_OF[name]]
    return lambda kept, value: value if kept is None else kept if value is None else rule(kept, value)


def columns(listed: str | None = None, *, part: bool | None = None) -> tuple[str, ...]:
    """The names of :class:`Row`'s columns, in declaration order: those a table lists (``listed``), the
    parts of the window (``part=True``)."""
    return tuple(f.name for f in _COLUMNS if (listed is None or listed in f.metadata["listed"])
                 and (part is None or bool(f.metadata["part"]) == part))


WINDOW_PARTS = columns(part=True)
"""The columns that are the parts of a region's window (they add up to it), in the order every listing shows them."""
PART_NAMES = {f.name: f.metadata["part"] for f in _COLUMNS if f.metadata["part"]}
"""Each part's column -> the part's name in the step metrics (``exposed_communication_ms`` -> ``exposed_comm``)."""
COLOURS = {f.name: f.metadata["colour"] for f in _COLUMNS if f.metadata["part"]}
"""Each part's column -> its colour in the HTML page's stacked bars."""
LABELS = {f.name: f.metadata["label"] for f in _COLUMNS if f.metadata["label"]}
"""Each listed column's name in tables."""


def rows_version() -> str:
    """The version of rows as :class:`Row` makes them: :data:`DEFINITIONS` and a digest of the columns' names.
    A cache of rows made by another version is made again, so a new column needs no version bumped by hand."""
    names = ",".join(f.name for f in _COLUMNS)
    return f"{DEFINITIONS}.{hashlib.sha256(names.encode()).hexdigest()[:12]}"


def cell(row: Row, name: str) -> str:
    """A column's value in ``rlprof breakdown``'s table: ms to the hundredth, bytes in binary units, ``-`` when unknown."""
    value = getattr(row, name)
    if value is None:
        return "-"
    return _UNIT_TEXT.get(_UNITS[name], lambda v: format(v, ".2f"))(value)


def shown(rows: Iterable[Row], name: str) -> str:
    """A column of the report's table for one or more processes (their median): ms as a share of each
    one's wall time (``32%``), bytes in binary units."""
    rows = list(rows)
    if _UNITS[name] == "ms":
        return f"{100 * statistics.median(getattr(r, name) / r.wall_ms if r.wall_ms > 0 else 0.0 for r in rows):.0f}%"
    known = [getattr(r, name) for r in rows if getattr(r, name) is not None]
    return _UNIT_TEXT.get(_UNITS[name], str)(statistics.median(known)) if known else "-"


def flops_text(n: float) -> str:
    """``2.56 MFLOP``."""
    for unit in ("", "K", "M", "G", "T", "P"):
        if abs(n) < 1000 or unit == "P":
            return f"{n:.3g} {unit}FLOP"
        n /= 1000
    return f"{n} FLOP"


_UNIT_TEXT = {"bytes": size_text, "flop": flops_text, "flop/s": lambda v: flops_text(v) + "/s",
              "frac": lambda v: f"{100 * v:.1f}%"}
"""How a figure of each unit but ms reads in a table."""
_UNITS = {f.name: f.metadata["unit"] for f in _COLUMNS}
_MERGE_OF = {f.name: f.metadata["merge"] for f in _COLUMNS}


def known(rows: Iterable[Any], names: Sequence[str]) -> tuple[str, ...]:
    """Of ``names``, those worth a table's column for ``rows``: every time, and a figure that may be unknown
    (``peak allocated``: only where a capture recorded memory) where some row knows it."""
    rows = list(rows)
    return tuple(n for n in names if _UNITS[n] == "ms" or any(getattr(r, n, None) is not None for r in rows))


def row_reference() -> str:
    """The columns table of docs/analysis.md, generated from :class:`Row` (a test keeps the page equal to it)."""
    lines = ["| column | listed in | meaning |", "|---|---|---|"]
    for f in _COLUMNS:
        where = ", ".join(f"{w} ({f.metadata['label']})" for w in f.metadata["listed"]) or "JSON only"
        part = " One of the window's parts." if f.metadata["part"] else ""
        doc = f.metadata["doc"].replace("|", "\\|")  # a union's length, |C|, is not a cell's end
        lines.append(f"| `{f.name}` | {where} | {doc}{part} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ what the compute achieved

DERIVED = ("flops_per_s_window", "flops_per_s_compute", "mfu_window", "mfu_compute", "mfu_compute_measured", "mfu_note")
"""The columns :func:`derive` writes (their ``merge`` is ``derived``: worked out again, never added)."""


def derive(row: Row) -> None:
    """Fill ``row``'s :data:`DERIVED` columns from its ``flops``, times and peak: FLOP/s over the window and over
    compute, MFU over each against the peak (over compute against the measured peak too), and ``mfu_note`` where an
    MFU is not given: compute no formula counts ran in it, no counted operator ran in its compute, no peak is known,
    or the figure passed 100% (:mod:`rlprof.mfu` names what is inconsistent). Nothing where nothing was counted."""
    from rlprof.mfu import fraction, inconsistency, shown as within, why_not_shown

    for name in DERIVED:
        setattr(row, name, None)
    flops = row.flops
    if flops is None:
        return
    window_s, compute_s = row.window_ms / 1e3, row.compute_ms / 1e3
    row.flops_per_s_window = flops / window_s if window_s > 0 else None
    row.flops_per_s_compute = flops / compute_s if compute_s > 0 else None
    if row.uncounted:
        row.mfu_note = f"compute no formula counts ran in it ({row.uncounted}): its FLOPs are a lower bound"
        return
    if flops <= 0 and row.compute_ms > 0:
        row.mfu_note = "no operator whose FLOPs are counted ran in its compute"
        return
    if not row.peak_tflops:
        row.mfu_note = "no peak known for its device"
        return
    on_window, on_compute = fraction(flops, window_s, row.peak_tflops), fraction(flops, compute_s, row.peak_tflops)
    if on_compute is not None and on_compute > 1.0:
        wrong = inconsistency(row.flops_per_s_compute, row.peak_tflops, row.measured_tflops, analytic=False)
        row.mfu_note = why_not_shown(wrong, row.peak_source)
    row.mfu_window, row.mfu_compute = within(on_window), within(on_compute)
    row.mfu_compute_measured = within(fraction(flops, compute_s, row.measured_tflops))


def names(values: Iterable[str | None]) -> str | None:
    """Operator names as one cell: ``aten::a, aten::b`` (each once, in order), None for none."""
    seen = list(dict.fromkeys(n for value in values if value for n in value.split(", ")))
    return ", ".join(seen) or None
