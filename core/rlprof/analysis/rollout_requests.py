"""The rollout's requests in the report: each step's request figures, the records' size, the curves drawn.

Why: the report's other sections see a replica's rollout as one region; its requests (docs/analysis.md, "Rollout
requests") say whether a step waited for a tail of long requests, on which replica, and for which request. Per run:

* **every step's figures** (:class:`StepRequests`), from the run's step metrics file (``rlprof/requests/...``,
  computed by the run's driver as each step ended, :mod:`rlprof.request_figures`): the report lists them (text: every
  step up to :data:`LISTED`, else the steps with the largest tail share, the first and the last), ``--json`` gives
  them all, ``compare`` compares the tail and the slowest request across two runs (:func:`request_samples`);
* **the records' size**: the records file's bytes and the records it holds, so the bytes per request;
* **the curves** (:func:`add_request_curves`, read from the records file for the steps drawn: the one with the
  largest tail share, the slowest step, the last, at most :data:`DRAWN`): each replica's running requests over the
  step with its tail (``--html``), rebuilt with the same functions the driver used; the slowest request's id.

The HTML drawing is :mod:`rlprof.analysis.rollout_requests_html`; the timeline's tracks are
:func:`rlprof.analysis.rollout_requests_html.timeline_events`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlprof.request_figures import TOPIC, ReplicaFigures, replica_figures, replica_segment, request_figures
from rlprof.request_records import read_run, record_files
from rlprof.sizes import size_text
from rlprof.step_metrics import PREFIX, metrics_files, read_step_metrics

NAMES = f"{PREFIX}/{TOPIC}/"
LISTED = 12
"""The text report lists every step up to this many; beyond, the largest tails, the first and the last step."""
DRAWN = 3
"""Steps whose curves the HTML draws (and whose records the report reads)."""


@dataclass
class StepRequests:
    """One step's request figures, as its step metrics line holds them."""

    step: int
    metrics: dict[str, Any]
    """``rlprof/requests/...`` -> value."""
    stored: int = 0
    """Its records in the records file."""
    start_ns: int | None = None

    def get(self, group: str | None, figure: str) -> Any:
        return self.metrics.get(f"{NAMES}{group}/{figure}" if group else f"{NAMES}{figure}")

    @property
    def count(self) -> int:
        return int(self.metrics.get(f"{NAMES}count") or 0)

    def replicas(self) -> list[int]:
        found = set()
        for name in self.metrics:
            rest = name[len(NAMES):]
            if rest.startswith("replica") and "/" in rest:
                try:
                    found.add(int(rest[len("replica"):rest.index("/")]))
                except ValueError:
                    continue
        return sorted(found)

    def replica(self, replica: int, figure: str) -> Any:
        return self.get(replica_segment(replica), figure)

    @property
    def tail_share(self) -> float | None:
        """The largest tail share of any replica."""
        shares = [v for r in self.replicas() if isinstance(v := self.replica(r, "tail_share"), (int, float))]
        return max(shares) if shares else None

    @property
    def tail_s(self) -> float | None:
        """The tail of the replica the step waited for (else the largest)."""
        waited = self.get(None, "waited_for_replica")
        if isinstance(waited, int) and isinstance(self.replica(waited, "tail_s"), (int, float)):
            return self.replica(waited, "tail_s")
        tails = [v for r in self.replicas() if isinstance(v := self.replica(r, "tail_s"), (int, float))]
        return max(tails) if tails else None

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "stored": self.stored, "metrics": dict(self.metrics)}


@dataclass
class RunRequests:
    """A run's requests (see the module doc)."""

    steps: list[StepRequests]
    files: list[str]
    bytes: int
    curves: dict[int, dict[int, ReplicaFigures]] = field(default_factory=dict)
    """Step -> replica -> its figures with the curve (:func:`add_request_curves`; empty until asked)."""
    slowest_ids: dict[int, str] = field(default_factory=dict)
    """Step -> the id of its slowest request (for the steps read)."""

    @property
    def requests(self) -> int:
        return sum(s.count for s in self.steps)

    @property
    def stored(self) -> int:
        return sum(s.stored for s in self.steps)

    @property
    def bytes_per_request(self) -> float | None:
        return self.bytes / self.stored if self.stored else None

    @property
    def replicas(self) -> list[int]:
        return sorted({r for s in self.steps for r in s.replicas()})

    def drawn(self) -> list[int]:
        """The steps whose curves are drawn: the largest tail share, the slowest request's, the last."""
        if not self.steps:
            return []
        picks = [max(self.steps, key=lambda s: (s.tail_share or 0.0, -s.step)),
                 max(self.steps, key=lambda s: (s.get("slowest", "time_s") or 0.0, -s.step)), self.steps[-1]]
        return sorted({s.step for s in picks})[:DRAWN]

    def listed(self) -> list[StepRequests]:
        """The steps the text lists (see :data:`LISTED`)."""
        if len(self.steps) <= LISTED:
            return self.steps
        worst = sorted(self.steps, key=lambda s: (-(s.tail_share or 0.0), s.step))[:LISTED - 2]
        keep = {s.step for s in worst} | {self.steps[0].step, self.steps[-1].step}
        return [s for s in self.steps if s.step in keep]

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "stored": self.stored, "bytes": self.bytes,
                "bytes_per_request": None if self.bytes_per_request is None else round(self.bytes_per_request, 2),
                "files": self.files, "replicas": self.replicas, "steps": [s.as_dict() for s in self.steps],
                "slowest_ids": {str(k): v for k, v in sorted(self.slowest_ids.items())}}


def run_requests(run_dirs: Iterable[str | Path]) -> RunRequests | None:
    """The requests of the run whose directories are ``run_dirs`` (every node's); None when no step has any."""
    dirs = sorted({str(d) for d in run_dirs})
    found = [f for d in dirs for f in metrics_files(Path(d))]
    files = [f for f in found if f.name == "step_metrics.jsonl"] or found
    steps: dict[int, StepRequests] = {}
    for path in files:
        for record in read_step_metrics(path):
            if record.kind != "step":
                continue
            ours = {k: v for k, v in record.metrics.items() if k.startswith(NAMES)}
            if not ours:
                continue
            kept = steps.get(record.step)
            if kept is None:
                steps[record.step] = StepRequests(record.step, ours, record.request_records, record.start_ns)
            else:  # per-process files of one step: the counts add up, the other figures are the first file's
                kept.metrics[f"{NAMES}count"] = kept.count + int(ours.get(f"{NAMES}count") or 0)
                kept.stored += record.request_records
    if not steps:
        return None
    records = [p for d in dirs for p in record_files(Path(d))]
    return RunRequests([steps[s] for s in sorted(steps)], [str(p) for p in records], sum(p.stat().st_size for p in records))


def add_request_curves(reports: Sequence[Any], steps: Iterable[int] | None = None) -> None:
    """Read the records of each report's steps listed and drawn (or ``steps``): their curves and slowest ids. The
    records file is decompressed whole, the other steps' lines are not decoded (10,000 requests a step over 100 steps:
    bench/bench_request_report.py)."""
    for report in reports:
        requests = getattr(report, "requests", None)
        if requests is None:
            continue
        wanted = list(steps) if steps is not None else sorted({*requests.drawn(), *(s.step for s in requests.listed())})
        parts: dict[int, list[Any]] = {}
        for run_dir in report.run_dirs:
            for step, part in read_run(Path(run_dir), wanted).items():
                parts.setdefault(step, []).extend(part.records)
        for step, records in parts.items():
            by_replica: dict[int, list[Any]] = {}
            for r in records:
                by_replica.setdefault(r.replica, []).append(r)
            requests.curves[step] = {replica: replica_figures(replica, rows) for replica, rows in sorted(by_replica.items())}
            slowest = request_figures(step, records).slowest
            if slowest is not None:
                requests.slowest_ids[step] = slowest.id


# ----------------------------------------------------------------------------------- text


def request_lines(requests: RunRequests | None) -> list[str]:
    """The report's text section (nothing for a run without request records)."""
    if requests is None:
        return []
    replicas = requests.replicas
    size = (f"records {requests.bytes_per_request:.1f} B each ({requests.stored} stored, {size_text(requests.bytes)})"
            if requests.bytes_per_request is not None else "no records stored")
    lines = ["", f"rollout requests: {requests.requests} in {len(requests.steps)} step{'s' if len(requests.steps) != 1 else ''}, "
                 f"replica{'s' if len(replicas) != 1 else ''} {', '.join(map(str, replicas)) or '-'}; {size}"]
    listed = requests.listed()
    if len(listed) < len(requests.steps):
        lines.append(f"  {len(listed)} of {len(requests.steps)} steps listed: the largest tail shares, the first and the "
                     f"last (--json: every step)")
    rows = [("step", "requests", "slowest s", "replica", "tokens", "queue/prefill/decode s", "waited for", "spread s",
             "tail s (share) per replica")]
    for s in listed:
        parts = "/".join(_num(s.get("slowest", name), 3) for name in ("queue_s", "prefill_s", "decode_s"))
        tails = "  ".join(f"r{r} {_num(s.replica(r, 'tail_s'), 3)} ({_pct(s.replica(r, 'tail_share'))})" for r in s.replicas())
        rows.append((str(s.step), str(s.count), _num(s.get("slowest", "time_s"), 3), _num(s.get("slowest", "replica")),
                     _num(s.get("slowest", "tokens")), parts, _num(s.get(None, "waited_for_replica")),
                     _num(s.get(None, "finish_spread_s"), 3), tails))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines += ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    ids = ", ".join(f"step {step}: {rid}" for step, rid in sorted(requests.slowest_ids.items()))
    if ids:
        lines.append(f"  slowest request ids: {ids}")
    return lines


def _num(value: Any, digits: int = 0) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:.{digits}f}" if digits else str(int(value)) if float(value).is_integer() else f"{value:g}"


def _pct(share: Any) -> str:
    return f"{100 * share:.0f}%" if isinstance(share, (int, float)) else "-"


# ----------------------------------------------------------------------------------- compare


TAIL_ROW = "(requests) tail"
SLOWEST_ROW = "(requests) slowest request"
"""``rlprof compare``'s rows from the request figures: the tail of the replica each step waited for (per replica
with ``--ranks``) and the slowest request's latency, in ms, over every step but the first (its warm-up)."""


def request_samples(requests: RunRequests | None, per_rank: bool) -> dict[tuple[str, tuple[int | None, int | None]], tuple[list[float], float]]:
    """``(row, process) -> (per-step values in ms, the widest step-to-step range of one process)`` for compare (a
    process is ``(None, None)`` across replicas, ``(None, r)`` for replica r)."""
    if requests is None:
        return {}
    steps = requests.steps[1:] if len(requests.steps) > 1 else requests.steps
    out: dict[tuple[str, tuple[int | None, int | None]], list[float]] = {}
    for s in steps:
        slowest = s.get("slowest", "time_s")
        if isinstance(slowest, (int, float)):
            out.setdefault((SLOWEST_ROW, (None, None)), []).append(slowest * 1e3)
        if per_rank:
            for r in s.replicas():
                tail = s.replica(r, "tail_s")
                if isinstance(tail, (int, float)):
                    out.setdefault((TAIL_ROW, (None, r)), []).append(tail * 1e3)
        elif s.tail_s is not None:
            out.setdefault((TAIL_ROW, (None, None)), []).append(s.tail_s * 1e3)
    return {row: (values, max(values) - min(values)) for row, values in out.items() if values}
