"""The report as one self-contained web page (``rlprof report RUN --html``): the page and its sections.

Use it to share a run's findings (attach it to an issue, a CI artifact): one file, no network
requests (inline CSS and SVG, no script, no font or image fetched), readable offline in any browser.
Per run, newest first:

* the verdict (what was captured, what is missing, why nothing was captured);
* **every step**: step time per role over every step of the run (its step metrics,
  :mod:`rlprof.analysis.step_series`), a line chart with the captured steps marked by why (profiled,
  requested, triggered), each mark a link to that step's table below;
* **step anatomy**: a stacked bar per profiled step — the median time of each top-level region, and
  the part of the step no process's region covers — with a whisker from the fastest to the slowest
  rank's step;
* **process x region heat map**: each trainer rank's and rollout replica's time per region (median
  over steps), coloured by how far it is from that region's median across processes; stragglers
  outlined and marked;
* the stragglers;
* **inside regions** (when the report read the run's traces, :mod:`rlprof.analysis.inside`): per step,
  region and process, compute / exposed comm / memory / idle as % of wall and a stacked bar, and whom
  the process waited for in a collective;
* **rollout requests** (:mod:`rlprof.analysis.rollout_requests_html`): each step's tail share, and each replica's
  running requests over the drawn steps with its tail marked;
* **async overlap** (a run where rollout and training overlap, :mod:`rlprof.analysis.overlap`): per
  parameter version the trainer's wait, update and send, and each replica's window as a bar (generating,
  paused for the weight sync, held by the staleness limit, other), the weight sync split and staleness;
* per-step tables, and the files to open next (with the timeline command).

Hovering a bar or cell shows its numbers (SVG ``<title>``). Everything comes from
:class:`rlprof.analysis.report.RunReport`: this module reads no file. The charts are
:mod:`rlprof.analysis.html_charts`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from rlprof.analysis.anatomy import Anatomy, process_name
from rlprof.analysis.compute import compute_html
from rlprof.analysis.html_charts import (escaped, heat_map, inside_bars, overlap_chart, series_chart, step_bars, stragglers,
                                         step_anchor)
from rlprof.analysis.rollout_requests_html import requests_section
from rlprof.analysis.runs import RunReport
from rlprof.analysis.timeline import DEFAULT_OUTPUT as TIMELINE_DEFAULT
from rlprof.analysis.verdict import verdict_lines
from rlprof.invocation import rlprof_command
from rlprof.sizes import size_text

MARKER = b'<meta name="generator" content="rlprof report">'
"""In the head of every page: the program that wrote it."""
FILES_LISTED = 200

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1200px;color:#1f2328;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #d0d7de;padding-bottom:4px}h3{font-size:15px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px;vertical-align:middle}
.ok{background:#1a7f37}.failed{background:#cf222e}
ul.verdict li.problem{color:#cf222e}
table{border-collapse:collapse;margin:8px 0}td,th{padding:2px 10px;border-bottom:1px solid #eaeef2;text-align:right}
td:first-child,th:first-child{text-align:left}tr.straggler td{background:#ffebe9}
code{background:#f6f8fa;padding:1px 4px;border-radius:4px}.muted{color:#656d76}
svg text{font:12px system-ui,sans-serif}
details{margin:6px 0}
"""


def render_page(reports: Sequence[RunReport]) -> str:
    """The whole page for the given runs (newest first, as :func:`rlprof.analysis.report.build_reports` gives them)."""
    title = f"rlprof report: run {reports[0].run_id}" if len(reports) == 1 else f"rlprof report: {len(reports)} runs"
    body = "\n".join(_run_section(r) for r in reports)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{MARKER.decode()}"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escaped(title)}</title><style>{CSS}</style></head>\n<body>\n<h1>{escaped(title)}</h1>\n{body}\n</body></html>\n")


def _run_section(report: RunReport) -> str:
    status = '<span class="badge ok">ok</span>' if report.ok else '<span class="badge failed">FAILED</span>'
    modes = ", ".join(report.modes) or "?"
    tools = ", ".join(report.tools) or "?"
    hosts = sorted({p.host for p in report.processes})
    parts = [f'<section class="run" id="run-{escaped(report.run_id)}">',
             f"<h2>run {escaped(report.run_id)} {status}</h2>",
             f'<p class="muted">mode {escaped(modes)}; tools {escaped(tools)}; {len(report.processes)} profiling process{"es" if len(report.processes) != 1 else ""} on '
             f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}; {', '.join(escaped(d) for d in report.run_dirs)}</p>"]
    lines = verdict_lines(report)
    parts.append('<ul class="verdict">' + "".join(
        f'<li class="{"problem" if _is_problem(line) else "fine"}">{escaped(line)}</li>' for line in lines) + "</ul>")
    parts.append(_series_section(report))
    anatomy = report.anatomy
    if anatomy.has_timings:
        parts.append("<h3>Step anatomy</h3>")
        parts.append('<p class="muted">each bar is the step: its processes\' window, first start to last end over the ranks, then, '
                     "darkest, the rest of the step as its driver timed it (the chart above), outside its processes' own steps: "
                     "their captures opening and closing, the driver's own calls; the ms on its right: the step as its driver "
                     "timed it, the same figure as the chart's (its processes' window in brackets where they differ); "
                     "coloured: each top-level region's median time across the processes that ran it; dark grey: profiling's own "
                     "time writing captures; light grey: the rest of the window (time no process's region covers, and where the "
                     "processes' regions did not line up); the whisker spans the fastest to the slowest rank's own step time, "
                     "inside the window; a red outline: a region with a straggler in that step (listed below)</p>")
        parts.append(step_bars(anatomy, report.series.driver_ms(), report.cost))
        parts.append("<h3>Process &times; region</h3>")
        parts.append('<p class="muted">each trainer rank\'s and rollout replica\'s time (median over steps); colour: distance '
                     "from the region's median across processes (blue faster, red slower); outlined &#9650;: a straggler in some step</p>")
        parts.append(heat_map(anatomy, report.inside.waits if report.inside else []))
        parts.append(stragglers(anatomy))
        parts.append(inside_bars(report))
        parts.append(compute_html(report))
        parts.append(overlap_chart(report))
        parts.append(requests_section(report))
        parts.append(_step_tables(anatomy, report.run_id))
    else:
        parts.append("<p>No step timings in the manifest: nothing to draw.</p>")
    parts.append(_files(report))
    parts.append("</section>")
    return "\n".join(parts)


def _series_section(report: RunReport) -> str:
    """Step time per role over every step of the run (its step metrics file), captured steps marked, each
    mark linking to that step's breakdown below; one line instead where the run has no metrics file."""
    series = report.series
    head = "<h3>Every step</h3>"
    if series.note:
        return f'{head}<p class="muted step-series-none">{escaped(series.note)}</p>'
    return (head + '<p class="muted">from the run\'s step metrics (every step, profiled or not): the step\'s own time, and '
            "each role's slowest process's time in its regions; marked: the captured steps, by why they were captured "
            "(click a mark for that step's breakdown); a value above the chart (a capture's own cost) is drawn at its top, "
            "with &#8593; and its value</p>" + series_chart(series, report.run_id))


def _is_problem(line: str) -> bool:
    return line.startswith(("missing", "not finalized", "backend error", "worker failure", "FAILED", "nothing captured", "not captured"))


def _step_tables(anatomy: Anatomy, run_id: str) -> str:
    out = []
    for step in anatomy.steps:
        s = step.spread
        head = (f"step {step.step}: {step.span_ms:.1f} ms (each rank: median {s.median_ms:.1f}, min {s.min_ms:.1f}, "
                f"max {s.max_ms:.1f} on {s.slowest.name})" if s else f"step {step.step}: no step record")
        rows = []
        for r in step.regions:
            flag = f"straggler: {', '.join(t.name for t in r.stragglers)}" if r.stragglers else ""
            if r.errors:
                flag += ("; " if flag else "") + f"raised on {len(r.errors)} processes"
            rows.append(f'<tr class="{"straggler" if r.stragglers else ""}"><td>{"&nbsp;&nbsp;" * r.depth}{escaped(r.region)}</td>'
                        f"<td>{len(r.spread.per_rank)}</td><td>{r.spread.min_ms:.2f}</td><td>{r.spread.median_ms:.2f}</td>"
                        f"<td>{r.spread.max_ms:.2f}</td><td>{r.spread.slowest.name}</td>"
                        f"<td>{'-' if r.share_of_step is None else f'{100 * r.share_of_step:.0f}%'}</td><td>{escaped(flag)}</td></tr>")
        out.append(f'<details id="{escaped(step_anchor(run_id, step.step))}"><summary>{escaped(head)}</summary>'
                   f"<table><tr><th>region</th><th>processes</th><th>min_ms</th><th>median_ms</th>"
                   f"<th>max_ms</th><th>slowest</th><th>share</th><th></th></tr>{''.join(rows)}</table></details>")
    return "<h3>Per step</h3>" + "\n".join(out)


def _files(report: RunReport) -> str:
    files = report.files
    run_arg = report.run_dirs[0] if report.run_dirs else "SAVE_PATH"
    out = ["<h3>Files to open next</h3>",
           f"<p>The whole run on one timeline (every rank, every role): <code>{escaped(rlprof_command())} timeline {escaped(run_arg)} "
           f"--with-traces</code>, then open the file it names (<code>{TIMELINE_DEFAULT}</code>, or <code>timeline.1.json</code>... "
           "when that exists) in Perfetto (ui.perfetto.dev) or chrome://tracing.</p>"]
    if not files:
        out.append("<p>No files were written.</p>")
        return "\n".join(out)
    out.append(f"<p>{len(files)} files, {size_text(report.total_size)} (each counted once):</p><table class=\"files\">"
               "<tr><th>file</th><th>process</th><th>backend</th><th>steps</th><th>size</th></tr>")
    for f in files[:FILES_LISTED]:
        gone = "" if f.exists else ' <span class="muted">(no longer on disk)</span>'
        link = f'<a href="{escaped(_file_uri(f.path))}">{escaped(os.path.relpath(f.path, report.run_dirs[0]) if report.run_dirs else f.path)}</a>'
        details = "".join(f"<br><span class=\"muted\">{escaped(d)}</span>" for d in f.details)
        out.append(f"<tr><td>{link}{gone}{details}</td><td>{process_name(f.rank, f.replica_rank)}</td><td>{escaped(f.backend)}</td>"
                   f"<td>{','.join(map(str, f.steps)) or '-'}</td><td>{size_text(f.size)}</td></tr>")
    out.append("</table>")
    if len(files) > FILES_LISTED:
        out.append(f"<p class=\"muted\">... and {len(files) - FILES_LISTED} more ({escaped(rlprof_command())} report --json lists all).</p>")
    return "\n".join(out)


def _file_uri(path: str) -> str:
    try:
        return Path(path).absolute().as_uri()
    except ValueError:
        return path
