"""The rollout's requests drawn: each replica's running requests over a step in the HTML report, and the requests'
tracks in the timeline.

* **HTML** (:func:`requests_section`): a tail share per step over every step (a dot each, the steps drawn below
  ringed), then for each drawn step (:meth:`rlprof.analysis.rollout_requests.RunRequests.drawn`) one chart: each
  replica's running-requests curve as a step line, its tail a bar under the axis (and a dashed line) from the moment the count fell below half its
  peak to its last end, and a table of the step's figures. Reads nothing: the curves were read into the report
  (:func:`rlprof.analysis.rollout_requests.add_request_curves`).
* **Timeline** (:func:`timeline_events`): in each replica's process (a replica's own, else the trainer rank that
  hosts the rollout), a ``running requests`` counter track (its curve, exact) and a slice per request on ``requests``
  lanes (a request takes the first lane free at its start: overlapping requests never share one), from its start
  to its last token, with its id, queue, prefill, decode, tokens and finish reason, on the manifest's clock; at
  most :data:`SLICES` a step and replica (the counter keeps every change).
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Iterator, Mapping

from rlprof.analysis.rollout_requests import RunRequests
from rlprof.request_figures import ReplicaFigures, running

COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")
WIDTH, HEIGHT = 720, 180
SLICES = 2000
"""Request slices per step and replica in the timeline (beyond: the counter only, and a note)."""
LANES = 64
POINTS = 600
"""A curve drawn with more change points than this is thinned to every n-th (the counter in the timeline keeps all)."""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def requests_section(report: Any) -> str:
    """The report's "Rollout requests" section ("" for a run without request records)."""
    requests: RunRequests | None = getattr(report, "requests", None)
    if requests is None:
        return ""
    per = (f"{requests.bytes_per_request:.1f} B per request stored" if requests.bytes_per_request is not None
           else "no records stored")
    parts = ['<section class="requests"><h3>Rollout requests</h3>',
             f'<p class="muted">{requests.requests} requests in {len(requests.steps)} steps; {_e(per)}; the tail: from '
             "when a replica's running requests fall below half their peak, and stay below, to its last request's end "
             "(docs/analysis.md, \"Rollout requests\")</p>", _tail_series(requests)]
    for step in requests.drawn():
        if step in requests.curves:
            parts.append(_step_chart(step, requests.curves[step], requests.slowest_ids.get(step)))
    parts.append("</section>")
    return "\n".join(parts)


def _tail_series(requests: RunRequests) -> str:
    """Each step's largest tail share, a dot per step."""
    steps = [s for s in requests.steps if s.tail_share is not None]
    if not steps:
        return ""
    first, last = steps[0].step, steps[-1].step
    x = lambda step: 40 + (WIDTH - 60) * ((step - first) / (last - first) if last > first else 0.5)
    y = lambda share: 10 + (HEIGHT / 2 - 30) * (1 - share)
    out = [f'<svg class="tail-series" role="img" aria-label="tail share per step" width="{WIDTH}" height="{HEIGHT // 2}">',
           f'<line x1="40" y1="{y(0):.1f}" x2="{WIDTH - 20}" y2="{y(0):.1f}" stroke="#d0d7de"/>',
           f'<text x="4" y="{y(1) + 4:.1f}">100%</text><text x="4" y="{y(0) + 4:.1f}">0%</text>',
           f'<text x="40" y="{HEIGHT // 2 - 4}">step {first}</text>'
           f'<text x="{WIDTH - 20}" y="{HEIGHT // 2 - 4}" text-anchor="end">step {last}</text>']
    for s in steps:
        ring = ' stroke="#1f2328" stroke-width="2"' if s.step in requests.curves else ""
        out.append(f'<circle cx="{x(s.step):.1f}" cy="{y(s.tail_share):.1f}" r="3" fill="#e15759"{ring}>'
                   f"<title>step {s.step}: tail share {100 * s.tail_share:.0f}%</title></circle>")
    out.append("</svg>")
    return "\n".join(out)


def _step_chart(step: int, replicas: Mapping[int, ReplicaFigures], slowest_id: str | None) -> str:
    starts = [f.window_start_ns for f in replicas.values() if f.window_start_ns is not None]
    ends = [f.window_end_ns for f in replicas.values() if f.window_end_ns is not None]
    if not starts or not ends:
        return ""
    origin, span = min(starts), max(1, max(ends) - min(starts))
    peak = max(1, max(f.peak for f in replicas.values()))
    strip = 10 * len(replicas)  # a tail bar per replica under the axis
    left, top, plot_w, plot_h = 44, 12, WIDTH - 64, HEIGHT - 44
    height = HEIGHT + strip
    x = lambda t: left + plot_w * (t - origin) / span
    y = lambda n: top + plot_h * (1 - n / peak)
    out = [f'<h4>step {step}</h4>',
           f'<svg class="running-requests" data-step="{step}" role="img" aria-label="running requests per replica, step {step}" '
           f'width="{WIDTH}" height="{height}">',
           f'<line x1="{left}" y1="{y(0):.1f}" x2="{left + plot_w}" y2="{y(0):.1f}" stroke="#d0d7de"/>',
           f'<text x="4" y="{y(peak) + 4:.1f}">{peak}</text><text x="4" y="{y(0) + 4:.1f}">0</text>',
           f'<text x="{left}" y="{height - 6}">0 s</text>'
           f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end">{span / 1e9:.3f} s</text>']
    for i, (replica, f) in enumerate(sorted(replicas.items())):
        colour = COLOURS[i % len(COLOURS)]
        if f.tail_start_ns is not None and f.tail_s:  # a dashed line where the tail begins, a bar from there to the end
            at, bar = x(f.tail_start_ns), y(0) + 6 + 10 * i
            title = f"replica {replica}: tail {f.tail_s:.3f} s ({100 * (f.tail_share or 0):.0f}% of its window)"
            out.append(f'<line x1="{at:.1f}" y1="{top}" x2="{at:.1f}" y2="{bar:.1f}" stroke="{colour}" stroke-dasharray="3,3"/>')
            out.append(f'<rect class="tail" data-replica="{replica}" x="{at:.1f}" y="{bar:.1f}" '
                       f'width="{max(1.0, x(f.window_end_ns) - at):.1f}" height="6" fill="{colour}"><title>{_e(title)}</title></rect>')
        curve = list(f.curve)
        if len(curve) > POINTS:
            curve = curve[::len(curve) // POINTS + 1] + [curve[-1]]
        points, level = [], 0
        for t, n in curve:
            points.append(f"{x(t):.1f},{y(level):.1f}")
            points.append(f"{x(t):.1f},{y(n):.1f}")
            level = n
        out.append(f'<polyline class="running" data-replica="{replica}" points="{" ".join(points)}" fill="none" '
                   f'stroke="{colour}" stroke-width="1.5"><title>replica {replica}: peak {f.peak} running</title></polyline>')
        out.append(f'<text x="{left + plot_w - 4}" y="{top + 14 * (i + 1)}" text-anchor="end" fill="{colour}">replica {replica}</text>')
    out.append("</svg>")
    rows = "".join(
        f"<tr><td>replica {r}</td><td>{f.requests}</td><td>{f.peak}</td><td>{_n(f.tokens_per_s, 1)}</td><td>{_n(f.occupancy, 2)}</td>"
        f"<td>{_n(f.tail_s, 3)}</td><td>{'-' if f.tail_share is None else f'{100 * f.tail_share:.0f}%'}</td></tr>"
        for r, f in sorted(replicas.items()))
    slowest = f'<p class="muted">slowest request: <code>{_e(slowest_id)}</code></p>' if slowest_id else ""
    return ("\n".join(out) + '<table class="requests"><tr><th>replica</th><th>requests</th><th>peak running</th>'
            f"<th>tokens/s</th><th>occupancy</th><th>tail s</th><th>tail share</th></tr>{rows}</table>{slowest}")


def _n(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# ----------------------------------------------------------------------------------- the timeline


def timeline_events(records_by_step: Mapping[int, list[Any]], pids: Mapping[int, int], origin: int,
                    first_tid: int) -> Iterator[dict[str, Any]]:
    """The requests' events (see the module doc): ``records_by_step`` step -> its records; ``pids`` replica -> the
    timeline process drawing it; ``origin`` the timeline's zero (ns); tracks from ``first_tid`` on."""
    lanes_used: dict[int, int] = {}
    notes: list[str] = []
    for step in sorted(records_by_step):
        by_replica: dict[int, list[Any]] = {}
        for r in records_by_step[step]:
            by_replica.setdefault(r.replica, []).append(r)
        for replica, rows in sorted(by_replica.items()):
            pid = pids.get(replica)
            if pid is None:
                continue
            for t, n in running(rows):
                yield {"ph": "C", "cat": "rlprof.request", "name": "running requests", "pid": pid, "ts": (t - origin) / 1000.0,
                       "args": {"running": n}}
            timed = sorted((r for r in rows if r.start_ns is not None and r.end_ns is not None), key=lambda r: r.start_ns)
            if len(timed) > SLICES:
                notes.append(f"step {step}, replica {replica}: {len(timed)} requests, the first {SLICES} drawn")
                timed = timed[:SLICES]
            free: list[int] = []
            for r in timed:
                lane = next((i for i, end in enumerate(free) if end <= r.start_ns), None)
                if lane is None:
                    lane = len(free) if len(free) < LANES else min(range(LANES), key=lambda i: free[i])
                    if lane == len(free):
                        free.append(0)
                free[lane] = r.end_ns
                lanes_used[pid] = max(lanes_used.get(pid, 0), lane + 1)
                yield {"ph": "X", "cat": "rlprof.request", "name": f"request {r.id}", "pid": pid, "tid": first_tid + lane,
                       "ts": (r.start_ns - origin) / 1000.0, "dur": (r.end_ns - r.start_ns) / 1000.0, "args": _args(r, step)}
    for pid, count in lanes_used.items():
        for lane in range(count):
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": first_tid + lane, "args": {"name": f"requests {lane}"}}
            yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": first_tid + lane,
                   "args": {"sort_index": first_tid + lane}}
    for note in notes:
        yield {"ph": "i", "s": "g", "cat": "rlprof.request", "name": note, "pid": 0, "tid": 0, "ts": 0.0}


def _args(r: Any, step: int) -> dict[str, Any]:
    def ms(a: int | None, b: int | None) -> float | None:
        return None if a is None or b is None else round((b - a) / 1e6, 3)

    queued = r.queued_ns if r.queued_ns is not None else r.arrival_ns
    return {"id": r.id, "step": step, "replica": r.replica, "queue_ms": ms(queued, r.scheduled_ns),
            "prefill_ms": ms(r.scheduled_ns, r.first_token_ns), "decode_ms": ms(r.first_token_ns, r.last_token_ns),
            "prompt_tokens": r.prompt_tokens, "generated_tokens": r.generated_tokens, "finish_reason": r.finish_reason,
            "preemptions": r.preemptions}


def replica_pids(processes: Iterable[Any]) -> dict[int, int]:
    """Replica -> the timeline process that draws its requests: a replica's own process, else (the hybrid engine:
    rollout inside the training workers) the trainer rank of that number that hosts the rollout."""
    out: dict[int, int] = {}
    procs = list(processes)
    for proc in procs:
        if proc.replica_rank is not None:
            out.setdefault(proc.replica_rank, proc.pid)
    if not out:
        for proc in procs:
            if "rollout" in proc.roles:
                out.setdefault(proc.key[0], proc.pid)
    return out
