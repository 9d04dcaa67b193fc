"""The report page's SVG charts: every step's series, the step anatomy's bars, the process x region heat map, the
stragglers, the split inside regions and the async overlap (:mod:`rlprof.analysis.html` puts them on the page)."""

from __future__ import annotations

import html
from typing import Sequence

from rlprof.analysis.anatomy import Anatomy
from rlprof.analysis.inside import SHOWN, Waited
from rlprof.analysis.overlap import MISSING_NOTE
from rlprof.analysis.runs import RunReport
from rlprof.analysis.step_series import KINDS, StepSeries
from rlprof.row_model import COLOURS, LABELS, WINDOW_PARTS, known, shown

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#86bcb6", "#d37295", "#a0cbe8")
UNTRACKED = "#d9d9d9"
WRITING = "#8c959f"
"""Profiling's own time in a step: captures being written (``writing_ms``)."""
HEAT_ROWS = 256
"""The heat map draws at most this many processes (the slowest first beyond that)."""
STRAGGLER_OUTLINE = 'stroke="#cf222e" stroke-width="2"'
"""A step's region with a straggler in that step (the legend says so)."""


MARK_COLOURS = {"profiled": "#1f2328", "requested": "#0969da", "triggered": "#cf222e"}
"""A captured step's mark on the every-step chart, by why it was captured (each a shape of its own too)."""
STEP_LINE = "#57606a"
ROLE_COLOURS = ("#59a14f", "#b07aa1", "#9c755f", "#76b7b2", "#edc948", "#ff9da7", "#86bcb6", "#d37295")
"""The roles' lines (apart from the regions' colours of the anatomy just below)."""
CLIP = 1.5
"""The chart's top is this many times the slowest step not captured, when a captured step is slower still (a
capture's own cost would flatten every other step); such a point is drawn at the top with its value."""
POINTS_DRAWN = 2000
"""Up to this many steps get a point each (hover for its numbers); a longer run is drawn as lines only."""


def series_chart(series: StepSeries, run_id: str) -> str:
    label_w, width, top, plot_h = 70, 760, 26, 200
    steps = series.steps
    first, last = steps[0], steps[-1]
    values = [v for v in series.step_s if v is not None] + [v for vs in series.roles.values() for v in vs if v is not None]
    captured = {m.step for m in series.marks}
    calm = [v for vs in (series.step_s, *series.roles.values()) for step, v in zip(steps, vs) if v is not None and step not in captured]
    top_s = max(values + [1e-6])
    if calm and top_s > CLIP * max(calm):
        top_s = CLIP * max(calm)
    tick, ymax = _ticks(1e3 * top_s)

    def x(step: int) -> float:
        return label_w + (width / 2 if last == first else (step - first) / (last - first) * width)

    def y(seconds: float) -> float:
        return top + plot_h - min(1e3 * seconds, ymax) / ymax * plot_h

    lines = [("the whole step", "step", series.step_s, STEP_LINE)] + [
        (role, role, vs, ROLE_COLOURS[i % len(ROLE_COLOURS)]) for i, (role, vs) in enumerate(series.roles.items())]
    kinds = [k for k in KINDS if any(m.kind == k for m in series.marks)]
    legend_items = len(lines) + len(kinds)
    height = top + plot_h + 34 + 22 * ((legend_items + 3) // 4)
    out = [f'<svg class="step-series" role="img" aria-label="step time over every step" width="{label_w + width + 40}" '
           f'height="{height}" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">']
    for k in range(int(round(ymax / tick)) + 1):
        ms = k * tick
        gy = top + plot_h - ms / ymax * plot_h
        out.append(f'<line x1="{label_w}" x2="{label_w + width}" y1="{gy:.1f}" y2="{gy:.1f}" stroke="#eaeef2"/>'
                   f'<text x="{label_w - 6}" y="{gy + 4:.1f}" text-anchor="end">{ms:g} ms</text>')
    for step in _step_ticks(steps):
        out.append(f'<text x="{x(step):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{step}</text>')
    out.append(f'<text x="{label_w + width}" y="{top + plot_h + 30}" text-anchor="end" class="muted">step</text>')
    for m in series.marks:
        if not first <= m.step <= last:
            continue
        mx, colour = x(m.step), MARK_COLOURS[m.kind]
        tip = f"step {m.step} captured: {m.why}" + ("" if m.breakdown else "; no breakdown of it in this report")
        body = (f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{colour}" stroke-width="1" '
                f'stroke-dasharray="3,3"/>{_mark_shape(m.kind, mx, top - 9)}<title>{escaped(tip)}</title>')
        if m.breakdown:
            target = "#" + step_anchor(run_id, m.step)
            out.append(f'<a class="mark" data-kind="{m.kind}" data-step="{m.step}" href="{escaped(target)}" xlink:href="{escaped(target)}">'
                       f"{body}</a>")
        else:
            out.append(f'<g class="mark" data-kind="{m.kind}" data-step="{m.step}">{body}</g>')
    for name, key, vs, colour in lines:
        run: list[str] = []
        segments = []
        for step, v in zip(steps, vs):
            if v is None:
                segments.append(run)
                run = []
            else:
                run.append(f"{x(step):.1f},{y(v):.1f}")
        segments.append(run)
        for seg in segments:
            if len(seg) > 1:
                out.append(f'<polyline class="series" data-role="{escaped(key)}" points="{" ".join(seg)}" fill="none" '
                           f'stroke="{colour}" stroke-width="{2 if key == "step" else 1.5}"/>')
        for step, v in zip(steps, vs):
            if v is not None and len(steps) <= POINTS_DRAWN:
                out.append(f'<circle class="point" data-role="{escaped(key)}" data-step="{step}" cx="{x(step):.1f}" cy="{y(v):.1f}" '
                           f'r="3" fill="{colour}"><title>step {step} {escaped(name)}: {1e3 * v:.1f} ms</title></circle>')
            if v is not None and 1e3 * v > ymax:  # above the chart's top: drawn there, with its value
                out.append(f'<text class="clipped" x="{x(step) + 6:.1f}" y="{top + 12}">&#8593; {1e3 * v:.0f} ms</text>')
    ly = top + plot_h + 44
    items = [(name, colour, None) for name, _, _, colour in lines] + [(f"{k} step", None, k) for k in kinds]
    for k, (name, colour, kind) in enumerate(items):
        lx, lyk = label_w + (k % 4) * 190, ly + (k // 4) * 22
        key = (f'<rect x="{lx}" y="{lyk + 5}" width="14" height="3" fill="{colour}"/>' if kind is None
               else _mark_shape(kind, lx + 7, lyk + 6))
        out.append(f'<g class="legend" data-kind="{kind or "line"}">{key}<text x="{lx + 20}" y="{lyk + 10}">{escaped(name)}</text></g>')
    out.append("</svg>")
    note = "" if len(steps) <= POINTS_DRAWN else f'<p class="muted">{len(steps)} steps: drawn as lines (points up to {POINTS_DRAWN} steps).</p>'
    return "\n".join(out) + note


def _mark_shape(kind: str, cx: float, cy: float) -> str:
    """The mark of a ``kind`` of capture centred on (cx, cy): a triangle pointing down (profiled), a square
    (requested), a diamond (triggered); each in its colour (:data:`MARK_COLOURS`)."""
    colour = MARK_COLOURS[kind]
    if kind == "requested":
        return f'<rect x="{cx - 5:.1f}" y="{cy - 5:.1f}" width="10" height="10" fill="{colour}"/>'
    if kind == "triggered":
        return f'<polygon points="{cx:.1f},{cy - 7:.1f} {cx + 6:.1f},{cy:.1f} {cx:.1f},{cy + 7:.1f} {cx - 6:.1f},{cy:.1f}" fill="{colour}"/>'
    return f'<polygon points="{cx - 6:.1f},{cy - 5:.1f} {cx + 6:.1f},{cy - 5:.1f} {cx:.1f},{cy + 6:.1f}" fill="{colour}"/>'


def _ticks(max_ms: float) -> tuple[float, float]:
    """A round tick (1, 2 or 5 x 10^k ms) giving 3 to 6 gridlines, and the axis top (a multiple of it)."""
    import math

    raw = max_ms / 4
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    tick = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return tick, tick * math.ceil(max_ms / tick - 1e-9)


def _step_ticks(steps: Sequence[int]) -> list[int]:
    """At most ~10 step numbers along the axis, the first and last included."""
    if len(steps) <= 10:
        return list(steps)
    every = -(-len(steps) // 10)
    picked = list(steps[::every])
    return picked if picked[-1] == steps[-1] else picked[:-1] + [steps[-1]] if len(picked) > 1 else [steps[0], steps[-1]]


def _colours(anatomy: Anatomy) -> dict[str, str]:
    return {r.region: PALETTE[i % len(PALETTE)] for i, r in enumerate(anatomy.regions)}


def step_bars(anatomy: Anatomy) -> str:
    colours = _colours(anatomy)
    steps = anatomy.steps
    label_w, width, bar_h, gap = 90, 760, 22, 10
    longest = max([s.spread.max_ms for s in steps if s.spread] + [s.span_ms or 0.0 for s in steps]
                  + [s.tracked_ms + s.writing_ms + _rest_ms(s) for s in steps] + [1e-9])
    scale = width / longest
    top_regions = [r for r in anatomy.regions if r.depth == 0]
    writing = any(s.writing_ms for s in steps)
    straggling = any(r.stragglers for s in steps for r in s.regions if r.depth == 0)
    legend_h = 22 * ((len(top_regions) + 2 + writing + straggling + 3) // 4)
    height = len(steps) * (bar_h + gap) + 30 + legend_h
    out = [f'<svg class="step-anatomy" role="img" aria-label="step anatomy" width="{label_w + width + 110}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg">']
    for i, step in enumerate(steps):
        y = i * (bar_h + gap)
        total = step.span_ms if step.span_ms is not None else step.tracked_ms
        out.append(f'<text x="0" y="{y + bar_h * 0.7:.1f}">step {step.step}</text>')
        x = float(label_w)
        for r in (r for r in step.regions if r.depth == 0):
            w = r.spread.median_ms * scale
            share = f" ({100 * r.share_of_step:.0f}% of the step)" if r.share_of_step is not None else ""
            tip = f"step {step.step} {r.region}: {r.spread.median_ms:.2f} ms median{share}; min {r.spread.min_ms:.2f}, max {r.spread.max_ms:.2f} on {r.spread.slowest.name}"
            stroke = f" {STRAGGLER_OUTLINE}" if r.stragglers else ""
            out.append(f'<rect class="segment" data-region="{escaped(r.region)}" x="{x:.2f}" y="{y}" width="{max(w, 0.5):.2f}" '
                       f'height="{bar_h}" fill="{colours[r.region]}"{stroke}><title>{escaped(tip)}</title></rect>')
            x += w
        if step.writing_ms:
            w = step.writing_ms * scale
            out.append(f'<rect class="segment writing" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{WRITING}">'
                       f"<title>step {step.step}: {step.writing_ms:.2f} ms writing captures (profiling's own time)</title></rect>")
            x += w
        rest = _rest_ms(step)
        if rest:
            unaligned = rest - (step.untracked_ms or 0.0)
            tip = f"step {step.step}: {step.untracked_ms or 0.0:.2f} ms outside every process's regions" + (
                f", {unaligned:.2f} ms more where the processes' regions did not line up (each region is drawn at its median)"
                if unaligned >= 0.005 else "")
            out.append(f'<rect class="segment untracked" x="{x:.2f}" y="{y}" width="{rest * scale:.2f}" height="{bar_h}" fill="{UNTRACKED}">'
                       f"<title>{escaped(tip)}</title></rect>")
        if step.spread:
            x0, x1, mid = label_w + step.spread.min_ms * scale, label_w + step.spread.max_ms * scale, y + bar_h / 2
            out.append(f'<line class="whisker" x1="{x0:.2f}" x2="{x1:.2f}" y1="{mid}" y2="{mid}" stroke="#1f2328" stroke-width="1.5">'
                       f"<title>step {step.step}: {step.spread.min_ms:.2f} to {step.spread.max_ms:.2f} ms across ranks "
                       f"(slowest: {step.spread.slowest.name})</title></line>")
            for xe in (x0, x1):
                out.append(f'<line x1="{xe:.2f}" x2="{xe:.2f}" y1="{y + 4}" y2="{y + bar_h - 4}" stroke="#1f2328" stroke-width="1.5"/>')
        out.append(f'<text x="{label_w + longest * scale + 8:.1f}" y="{y + bar_h * 0.7:.1f}">{total:.1f} ms</text>')
    y = len(steps) * (bar_h + gap) + 12
    items = [(r.region, f'fill="{colours[r.region]}"') for r in top_regions] + [("writing captures", f'fill="{WRITING}"')] * writing + [
        ("rest of the window", f'fill="{UNTRACKED}"')] + [("straggler in the step", f'fill="#ffffff" {STRAGGLER_OUTLINE}')] * straggling
    for k, (name, paint) in enumerate(items):
        lx, ly = label_w + (k % 4) * 200, y + (k // 4) * 22
        out.append(f'<rect class="legend" x="{lx}" y="{ly}" width="12" height="12" {paint}/><text x="{lx + 16}" y="{ly + 11}">{escaped(name)}</text>')
    k = len(items)  # the whisker's key
    lx, ly = label_w + (k % 4) * 200, y + (k // 4) * 22 + 6
    out.append(f'<line class="legend" x1="{lx}" x2="{lx + 12}" y1="{ly}" y2="{ly}" stroke="#1f2328" stroke-width="1.5"/>'
               f'<text x="{lx + 16}" y="{ly + 5}">ranks\' step times, fastest to slowest</text>')
    out.append("</svg>")
    return "\n".join(out)


def _rest_ms(step) -> float:
    """The light grey end of a step's bar: what fills the drawn bar up to the step's window. The regions
    are drawn at their medians, so where processes ran them at different times their sum falls short of
    the window covered; this part holds that as well as the time no region covers (``untracked_ms``)."""
    if step.span_ms is None:
        return step.untracked_ms or 0.0
    return max(step.untracked_ms or 0.0, step.span_ms - step.tracked_ms - step.writing_ms)


def heat_map(anatomy: Anatomy, waits: Sequence[Waited] = ()) -> str:
    """``waits``: a cell whose process waited in a collective says for whom (its colour is the wait too)."""
    regions = anatomy.regions
    waited: dict[tuple[str, str], list[str]] = {}
    for w in waits:
        waited.setdefault((w.waiter, w.region), []).append(f"step {w.step}: waited {w.wait_ms:.1f} ms for {w.late}")
    straggling = {(s.time.key, s.region) for s in anatomy.stragglers}
    names = {t.key: t.name for r in regions for t in r.spread.per_rank}
    shown = sorted(names)
    note = ""
    if len(shown) > HEAT_ROWS:
        slowness: dict[tuple, float] = {}
        for r in regions:
            for t in r.spread.per_rank:
                ratio = t.ms / r.spread.median_ms if r.spread.median_ms else 1.0
                slowness[t.key] = max(slowness.get(t.key, 0.0), ratio)
        note = f'<p class="muted">{HEAT_ROWS} of {len(shown)} processes shown: the slowest.</p>'
        shown = sorted(sorted(shown, key=lambda k: -slowness.get(k, 0.0))[:HEAT_ROWS])
    cell_w, cell_h, label_w, head_h = max(60, min(140, 900 // max(1, len(regions)))), 18, 80, 110
    times = {(t.key, r.region): t.ms for r in regions for t in r.spread.per_rank}
    medians = {r.region: r.spread.median_ms for r in regions}
    width, height = label_w + cell_w * len(regions) + 160, head_h + cell_h * len(shown) + 10  # room for the slanted last label
    out = [f'<svg class="heat-map" role="img" aria-label="process by region heat map" width="{width}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg">']
    for j, r in enumerate(regions):
        x = label_w + j * cell_w + cell_w / 2
        out.append(f'<text transform="translate({x:.1f},{head_h - 6}) rotate(-35)">{escaped(r.region)}</text>')
    for i, key in enumerate(shown):
        y, name = head_h + i * cell_h, names[key]
        out.append(f'<text x="0" y="{y + cell_h * 0.75:.1f}">{name}</text>')
        for j, r in enumerate(regions):
            x = label_w + j * cell_w
            ms = times.get((key, r.region))
            if ms is None:
                out.append(f'<rect class="cell empty" x="{x}" y="{y}" width="{cell_w - 1}" height="{cell_h - 1}" fill="#f6f8fa">'
                           f"<title>{name} {escaped(r.region)}: not run</title></rect>")
                continue
            ratio = ms / medians[r.region] if medians[r.region] > 0 else 1.0
            slow = (key, r.region) in straggling
            stroke = ' stroke="#1f2328" stroke-width="2"' if slow else ""
            out.append(f'<rect class="cell{" straggler" if slow else ""}" data-process="{name}" data-region="{escaped(r.region)}" x="{x}" '
                       f'y="{y}" width="{cell_w - 1}" height="{cell_h - 1}" fill="{heat_colour(ratio)}"{stroke}>'
                       f"<title>{name} {escaped(r.region)}: {ms:.2f} ms ({100 * (ratio - 1):+.0f}% vs the median {medians[r.region]:.2f} ms)"
                       f"{'; straggler' if slow else ''}{escaped(''.join('; ' + line for line in waited.get((name, r.region), [])))}</title></rect>")
            late = sorted({w.split(" for ")[1] for w in waited.get((name, r.region), [])})
            out.append(f'<text x="{x + 4}" y="{y + cell_h * 0.75:.1f}">{"&#9650; " if slow else ""}{ms:.1f}'
                       f'{" (waited for " + ", ".join(late) + ")" if late else ""}</text>')
    out.append("</svg>")
    return note + "\n".join(out)


def heat_colour(ratio: float) -> str:
    """White at the median; towards red when slower (full at +50%), towards blue when faster (full at -50%)."""
    t = max(-1.0, min(1.0, (ratio - 1.0) / 0.5))
    if t >= 0:
        r, g, b = 255, int(255 - 160 * t), int(255 - 170 * t)
    else:
        r, g, b = int(255 + 170 * t), int(255 + 110 * t), 255
    return f"#{r:02x}{g:02x}{b:02x}"


def stragglers(anatomy: Anatomy) -> str:
    if not anatomy.stragglers:
        return "<p>No stragglers flagged.</p>"
    rows = "".join(f'<tr class="straggler"><td>step {s.step}</td><td>{escaped(s.region)}</td><td>{s.time.name} ({escaped(s.time.host)})</td>'
                   f"<td>{s.time.ms:.2f}</td><td>{s.median_ms:.2f}</td><td>+{s.over_pct:.0f}%</td></tr>"
                   for s in sorted(anatomy.stragglers, key=lambda s: -(s.time.ms - s.median_ms)))
    return (f"<h3>Stragglers ({len(anatomy.stragglers)})</h3><table class=\"stragglers\"><tr><th>step</th><th>region</th>"
            f"<th>process</th><th>ms</th><th>the others' median ms</th><th>over</th></tr>{rows}</table>")


def inside_bars(report: RunReport) -> str:
    """Per step, region and process the split of the region's window (a stacked bar) and who waited for whom."""
    inside = report.inside
    if inside is None or not inside.splits:
        return ""
    waits = {(w.step, w.region, w.waiter): w for w in inside.waits}
    listed = known(inside.splits, SHOWN)
    legend = " ".join(f'<span style="display:inline-block;width:10px;height:10px;background:{COLOURS[c]}"></span> {LABELS[c]}'
                      for c in WINDOW_PARTS)
    rows = []
    for s in inside.splits:
        window = sum(getattr(s, c) for c in WINDOW_PARTS) or 1.0
        x, bar = 0.0, []
        for c in WINDOW_PARTS:
            w = 200 * getattr(s, c) / window
            bar.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="12" fill="{COLOURS[c]}">'
                       f"<title>{LABELS[c]}: {getattr(s, c):.2f} ms ({100 * s.share(c):.0f}% of wall)</title></rect>")
            x += w
        waited = waits.get((s.step, s.region, s.name))
        rows.append(f'<tr class="split" data-process="{escaped(s.name)}" data-region="{escaped(s.region)}"><td>step {s.step}</td>'
                    f"<td>{escaped(s.region)}</td><td>{escaped(s.name)}</td><td>{s.wall_ms:.1f}</td>"
                    + "".join(f"<td>{escaped(shown([s], c))}</td>" for c in listed)
                    + f'<td><svg width="200" height="12" xmlns="http://www.w3.org/2000/svg">{"".join(bar)}</svg></td>'
                    + f"<td>{escaped(waited.line().split(': ', 1)[1]) if waited else ''}</td></tr>")
    return ("<h3>Inside regions</h3>"
            f'<p class="muted">from the traces: each region\'s window split into {legend} (% of the region\'s wall time; '
            "memory: every copy's time, hidden under a kernel or not; definitions in docs/analysis.md); a wait in a "
            "collective is the late rank's fault, not the waiter's</p>"
            '<table class="inside"><tr><th>step</th><th>region</th><th>process</th><th>wall ms</th>'
            + "".join(f"<th>{LABELS[c]}</th>" for c in listed) + "<th>split</th><th>waited</th></tr>"
            + "".join(rows) + "</table>")


OVERLAP_COLOURS = (("generating_ms", "generating", "#59a14f"), ("paused_ms", "paused for the weight sync", "#e15759"),
                   ("held_ms", "held by the staleness limit", "#edc948"), ("other_ms", "other", "#d0d7de"))


def overlap_chart(report: RunReport) -> str:
    """Per parameter version of an async run: the trainer's side, and each replica's window as a stacked bar."""
    overlap = report.overlap
    if overlap is None:
        return ""
    legend = " ".join(f'<span style="display:inline-block;width:10px;height:10px;background:{colour}"></span> {label}'
                      for _, label, colour in OVERLAP_COLOURS)
    rows = []
    for v in overlap.versions:
        t, w = v.trainer, v.window_ms or 1.0
        stale = v.staleness or {}
        rows.append(f'<tr class="version" data-version="{v.step}"><td>version {v.step}</td><td>trainer</td><td>{v.window_ms:.1f}</td>'
                    + (f"<td>waited {t.wait_ms:.1f}, updated {t.update_ms:.1f}, sent {t.send_ms:.1f} "
                       f"({t.send_beyond_pause_ms:.1f} with no replica paused)</td>" if t else "<td>-</td>")
                    + f"<td>{v.overlap_ms:.1f}" + (f" ({100 * v.overlap_share:.0f}%)" if v.overlap_share is not None else "")
                    + f"</td><td>{'-' if v.sync_ms is None else f'{v.sync_ms:.1f}'}</td>"
                    + (f"<td>mean {stale['mean']:.2f}, max {stale['max']}</td>" if stale.get("samples") else "<td>-</td>")
                    + "<td></td></tr>")
        for r in v.replicas:
            x, bar = 0.0, []
            for attr, label, colour in OVERLAP_COLOURS:
                width = 200 * getattr(r, attr) / w
                bar.append(f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="12" fill="{colour}">'
                           f"<title>{label}: {getattr(r, attr):.1f} ms ({100 * getattr(r, attr) / w:.0f}% of the window)</title></rect>")
                x += width
            rows.append(f'<tr class="replica" data-version="{v.step}" data-replica="{r.replica_rank}"><td></td><td>{escaped(r.name)}</td>'
                        f"<td></td><td>generating {r.generating_ms:.1f}, paused {r.paused_ms:.1f}, held {r.held_ms:.1f}, other "
                        f"{r.other_ms:.1f} (between steps {r.between_steps_ms:.1f})</td><td></td>"
                        f"<td>transport {r.transport_ms:.1f}, load {r.load_ms:.1f}, resume {r.resume_ms:.1f}</td><td></td>"
                        f'<td><svg width="200" height="12" xmlns="http://www.w3.org/2000/svg">{"".join(bar)}</svg></td></tr>')
        for f in v.framework_idle:  # the framework's own idle figure beside rlprof's (docs/analysis.md: why they differ)
            ours = "-" if f["rlprof_ratio"] is None else f"{f['rlprof_ratio']:.3f} ({100 * f['difference']:+.1f} points)"
            rows.append(f'<tr class="framework-idle" data-version="{v.step}"><td></td><td>{escaped(f["side"])}</td><td></td>'
                        f"<td>{escaped(f['metric'])} {f['idle_ratio']:.3f}; rlprof's {ours}</td><td></td><td></td><td></td><td></td></tr>")
    missing = (f'<p class="muted">versions {",".join(map(str, overlap.missing))} are not shown: {escaped(MISSING_NOTE)}</p>'
               if overlap.missing else "")
    return ("<h3>Async overlap</h3>"
            '<p class="muted">per parameter version: each process\'s regions clipped to the version\'s window (every '
            "process's step, first start to last end), unions not sums; generated while updating: the trainer's update "
            f"time some replica generated in; each replica's window: {legend}; definitions in docs/analysis.md</p>"
            '<table class="overlap"><tr><th>version</th><th>process</th><th>window ms</th><th>ms</th>'
            "<th>generated while updating</th><th>weight sync ms</th><th>staleness</th><th>window</th></tr>"
            + "".join(rows) + "</table>" + missing)


def step_anchor(run_id: str, step: int) -> str:
    """The id of a profiled step's breakdown (its per-step table) on the page: where its mark links."""
    return f"run-{run_id}-step-{step}"


def escaped(text: object) -> str:
    return html.escape(str(text), quote=True)
