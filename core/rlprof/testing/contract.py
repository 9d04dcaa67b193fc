"""The backend contract of docs/writing-a-backend.md, as checks that say in words what is wrong.

Two kinds, each a function returning a list of problems (empty: the promise is kept):

* :data:`STATIC_CHECKS` look at the backend object (:mod:`rlprof.testing.object_checks`, re-exported here): it registers (no misspelled hook such as
  ``start_stepp``), ``check_environment`` returns strings and never raises, ``validate_tool_config``
  returns the config and rejects an unknown key with an :class:`~rlprof.ConfigError` naming its
  path, ``worker_runtime_env`` returns a JSON-serialisable mapping or None, ``cli_commands`` returns
  name -> :class:`~rlprof.hookspecs.CliCommand`, ``trace_reader`` a
  :class:`~rlprof.hookspecs.TraceReader` whose target imports, ``report_details``/``after_exit`` answer quietly for
  a file and a run directory that are not theirs, ``step_metrics`` takes a step's metrics and a split.
* :data:`RUN_CHECKS` look at one scripted run (a :class:`~rlprof.testing.scenario.BackendRun`):

  - **every hook it implements is handled**: no hook raised (the core would have logged it and
    skipped the backend for the rest of the run);
  - **a region that raises**: the exception reached the trainer unchanged and the core called
    ``stop_role`` with ``ctx.error``;
  - **writes only under its directory**: no file opened for writing, directory made or file moved
    outside the run directory (an audit hook sees Python code doing it anywhere), nothing left in
    the working directory, the temporary directory or ``save_path``, nothing in the run directory
    outside ``<capture>/<process>/<backend>/``, no manifest entry marked ``outside_output_dir``;
  - **lists what it wrote**: every file under its output directories is in the manifest;
  - **artifacts are complete**: listed once, present, non-empty, ``.json``/``.gz`` files parse;
  - **every capture is written**: a backend that lists artifacts for some captures lists one for
    every capture the core closed, the one whose region raised included;
  - **released when it raised** (``released_after_<hook>`` scenarios: the suite raises right after
    the backend's own hook ran): the core closed what it had open and called its ``finalize``, which
    ran without raising; it then holds no capture (``open_captures()``), file, thread or process. A
    hook the core never called in the run (an optional one no scripted run reaches) is not checked;
    the suite's report names it (``unreached``);
  - **colocated roles** (a check of the core): two Profilers of one process share one capture per step;
  - **nothing left open**: no file under the run still open after finalize, no thread or child
    process it started still running, and, when the backend has ``open_captures()``, no capture
    held that the core has already closed;
  - **finalize is idempotent**: a second call raises nothing, returns nothing new, changes no file.

The optional leak-report protocol: a backend may define a plain method (not a hook)
``open_captures(self) -> Iterable[str]`` returning the ``ctx.capture.capture_id`` of every window
it opened and has not closed yet; the scripted run asks it after a region raised, after every step
and after finalize.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Callable

from rlprof.layout import CORE_DIRS
from rlprof.manifest import WRITTEN
from rlprof.step_metrics import FILE as STEP_METRICS_FILE, PROCESS_DIR as STEP_METRICS_DIR
from rlprof.testing.object_checks import (KEY_PATH, UNKNOWN_KEY, Subject, _short_traceback,  # noqa: F401  (re-exported)
                                          commands_are_listable, environment_check_is_quiet, implemented,
                                          outside_hooks_are_quiet, registers, runtime_env_is_shippable,
                                          step_metrics_are_taken, tool_config_is_validated, trace_reader_imports)
from rlprof.testing.scenario import BackendRun


STATIC_CHECKS: dict[str, Callable[[Subject], list[str]]] = {
    "registers": registers,
    "check_environment": environment_check_is_quiet,
    "validate_tool_config": tool_config_is_validated,
    "worker_runtime_env": runtime_env_is_shippable,
    "cli_commands": commands_are_listable,
    "trace_reader": trace_reader_imports,
    "outside_a_run": outside_hooks_are_quiet,
    "step_metrics": step_metrics_are_taken,
}
"""Checks of the backend object itself, without a run, by name."""


# --------------------------------------------------------------------------- checks of one run


def no_hook_errors(run: BackendRun) -> list[str]:
    """Every hook the backend implements ran without raising, and none made training wait past the limit."""
    problems = []
    for error in run.errors:
        if error.get("kind") == "timeout":
            problems.append(f"its {error['hook']} hook made training wait: {error['error']} (the kit's limit, "
                            f"RLPROF_HOOK_TIMEOUT_S={run.scenario.hook_timeout_s:g}); a subprocess that never got its "
                            "stop signal? (see 'Subprocess backends' in docs/writing-a-backend.md)")
            continue
        detail = _logged_traceback(run, error["hook"])
        problems.append(f"its {error['hook']} hook raised {error['error']}; the core logged it and skipped the backend "
                        f"for the rest of the run{detail}")
    return problems


def region_error_passes_through(run: BackendRun) -> list[str]:
    """The region's exception reached the trainer unchanged, and stop_role was told about it."""
    if run.scenario.raise_in is None:
        return []
    if run.raised is None:
        return [f"the scenario never ran region {run.scenario.raise_in!r}, so the error path was not tested (a bug in the scenario)"]
    problems = []
    if run.caught is not run.raised:
        problems.append(f"the exception raised inside {run.scenario.raise_in} did not reach the trainer unchanged: the "
                        f"trainer got {run.caught!r} instead of {run.raised!r}")
    told = [f for h, f in run.recorder.calls if h == "stop_role" and f.get("error") == type(run.raised).__name__]
    if not told:
        problems.append("the core never called stop_role with ctx.error set for the failing region (a bug in rlprof's "
                        "core, not in the backend)")
    return problems


def writes_only_under_output_dir(run: BackendRun) -> list[str]:
    """Nothing written outside ``<run>/<capture>/<process>/<backend>/`` (and ``_process/...``)."""
    problems = []
    footprint = run.footprint
    for write in footprint.writes_outside:
        problems.append(f"wrote outside the run directory: {write}. Write only under ctx.output_dir()")
    for path in footprint.appeared:
        problems.append(f"left a file outside the run directory: {path}. Write only under ctx.output_dir(), and remove "
                        "temporary files before the hook returns")
    for record in {r["path"]: r for r in run.artifacts}.values():
        if record.get("outside_output_dir"):
            problems.append(f"listed {record['path']} in the manifest, which is outside the run directory {run.run_dir} "
                            "(the manifest marks it outside_output_dir)")
        elif not _in_own_dir(Path(record["path"]), run.name):
            problems.append(f"listed {record['path']}, which is not under its own output directory "
                            f"(<capture>/<process>/{run.name}/ as ctx.output_dir() returns)")
    if run.run_dir.exists():
        for path in sorted(p for p in run.run_dir.rglob("*") if p.is_file()):
            relative = path.relative_to(run.run_dir)
            core = relative.parts[0] in CORE_DIRS or relative.parts[0] in (STEP_METRICS_FILE, STEP_METRICS_DIR)
            if not core and not _in_own_dir(relative, run.name):
                problems.append(f"wrote {relative} into the run directory but outside its own output directories "
                                f"(<capture>/<process>/{run.name}/): write only under ctx.output_dir()")
    return problems


def lists_what_it_wrote(run: BackendRun) -> list[str]:
    """Every file under the backend's output directories is covered by a manifest artifact."""
    listed = [run.run_dir / r["path"] for r in run.artifacts]
    unlisted = [p for p in run.files_written() if not any(p == item or item in p.parents for item in listed)]
    if not unlisted:
        return []
    shown = ", ".join(str(p.relative_to(run.run_dir)) for p in unlisted[:5]) + (" ..." if len(unlisted) > 5 else "")
    return [f"wrote {len(unlisted)} file{'s' if len(unlisted) > 1 else ''} it did not list in the manifest: {shown}. Return "
            "each path from the hook that wrote it, or call ctx.add_artifact(path)"]


def artifacts_are_complete(run: BackendRun) -> list[str]:
    """Each listed artifact is listed once, exists after finalize, is non-empty and, for JSON/gzip, parses."""
    problems = []
    for path, count in Counter(r["path"] for r in run.artifacts).items():
        if count > 1:
            problems.append(f"listed {path} {count} times; return each artifact once (from the hook that wrote it)")
    for record in {r["path"]: r for r in run.artifacts}.values():
        path = run.run_dir / record["path"]
        if record.get("state") not in (None, WRITTEN):
            problems.append(f"listed {record['path']} as {record['state']} and never as written: finalize must wait "
                            f"for files written in the background and list each once more when it is complete")
        elif not path.exists():
            problems.append(f"listed {record['path']}, which does not exist after finalize")
        elif path.is_dir():
            if not any(path.iterdir()):
                problems.append(f"listed the directory {record['path']}, which is empty after finalize")
        elif path.stat().st_size == 0:
            problems.append(f"listed {record['path']}, which is empty (0 bytes) after finalize: was it written, flushed and closed?")
        else:
            broken = _unreadable(path)
            if broken:
                problems.append(f"listed {record['path']}, which is not a complete file: {broken}")
    return problems


def every_capture_written(run: BackendRun) -> list[str]:
    """A backend that writes per capture writes (or skips with a reason, ``ctx.skip``) every capture the
    core closed, the failing one included
    (and, once it raised and was released, every capture it had been told to open until then)."""
    written = {r["capture"] for r in run.artifacts + run.skipped if r.get("capture")}  # a skip says why
    if not written:
        return []  # it writes at finalize, or nothing here (e.g. no device): nothing to compare
    problems = []
    released = run.injected is not None and run.injected.raised
    for capture_id, info in sorted(run.recorder.captures.items()):
        if info["closed_by"] is None or capture_id in written:
            continue
        if released and capture_id not in run.injected.captures:
            continue  # opened after the backend was released: not its capture
        how = f"closed by {info['closed_by']}" + (f" after its region raised {info['error']}" if info["error"] else "")
        others = f"{len(written)} other captures of the run do" if len(written) > 1 else "another capture of the run does"
        problems.append(f"capture {capture_id} ({how}) has no artifact listed, while {others}: the backend did not close "
                        "or did not write it (does stop_role close the capture when ctx.error is set?)")
    return problems


def released_when_it_raised(run: BackendRun) -> list[str]:
    """A backend that raised is released: the core closes what it had open and calls its finalize,
    which must run without raising (and, by the other checks, leave nothing open)."""
    injected = run.injected
    if injected is None or injected.hook not in implemented(run.backend):
        return []
    if not injected.raised:
        return []  # the core never called the hook in this run (an optional hook no scripted run reaches)
    if injected.hook == "finalize":
        return []  # finalize raised: it was already called once, there is nothing left to release it with
    cleanups = run.cleanups
    if not cleanups:
        return [f"after the backend raised in {injected.hook}, the core wrote no cleanup record: it did not release "
                "the backend (a bug in rlprof's core, not in the backend)"]
    cleanup = cleanups[0]
    if not cleanup.get("finalized"):
        errors = "; ".join(cleanup.get("errors") or []) or "an error"
        return [f"after it raised in {injected.hook}, the core closed {', '.join(cleanup.get('closed') or []) or 'nothing'} "
                f"for it and called its finalize, which raised: {errors}. A backend's finalize must release its "
                "threads, profilers and files also after one of its hooks failed"]
    return []


def colocated_roles_share_captures(run: BackendRun) -> list[str]:
    """Two Profilers of one process share one capture per step (a check of the core, for every backend)."""
    scenario = run.scenario
    if not scenario.colocated or scenario.mode != "e2e":
        return []
    opened = [c for c in run.recorder.captures.values() if c["opened_by"] == "start_step"]
    steps = [s for s in scenario.steps if scenario.first_step <= s <= scenario.last_step]
    if len(opened) != len(steps):
        return [f"the core opened {len(opened)} step captures for {len(steps)} profiled steps of two colocated Profilers "
                "(it must share one per step; a bug in rlprof's core, not in the backend)"]
    regions = {f.get("region") for hook, f in run.recorder.calls if hook == "start_role"}
    missing = [role for role in scenario.roles if not any(str(r).startswith(role + "_") for r in regions)]
    if missing:
        return [f"the regions of {', '.join(missing)} never reached the shared capture (a bug in rlprof's core)"]
    return []


def nothing_left_open(run: BackendRun) -> list[str]:
    """No capture, file, thread or child process still open once the core has closed it."""
    problems = []
    moments: dict[str, list[str]] = {}
    for moment, (held, core) in run.open_after.items():
        for capture_id in sorted(set(held) - set(core)):
            moments.setdefault(capture_id, []).append(moment)
    for capture_id, seen in moments.items():
        problems.append(f"open_captures() still reports {capture_id}, which the core already closed ({'; '.join(seen)}): "
                        "the backend left a capture open")
    footprint = run.footprint
    for path in footprint.open_files:
        problems.append(f"still has {path} open after finalize; close every file before the hook returns")
    for what in footprint.live_threads + footprint.live_children:
        problems.append(f"{what} started during the run is still running after finalize; stop it in finalize")
    return problems


def finalize_is_idempotent(run: BackendRun) -> list[str]:
    """A second finalize raises nothing, returns nothing new and touches no file."""
    second = run.second_finalize
    if second is None:
        return []
    problems = []
    if second.error is not None:
        problems.append(f"calling finalize a second time raised {type(second.error).__name__}: {second.error}; finalize "
                        f"must be safe to call twice\n{_short_traceback(second.error)}")
    if second.new_paths:
        problems.append(f"a second finalize returned paths the first one had not: {', '.join(second.new_paths)}; a second "
                        "call must find nothing left to write")
    if second.changed:
        problems.append(f"a second finalize created, changed or removed files: {', '.join(second.changed)}")
    if second.profiler_repeat_differs:
        problems.append("Profiler.finalize() called twice returned different artifacts (a bug in rlprof's core)")
    return problems


RUN_CHECKS: tuple[Callable[[BackendRun], list[str]], ...] = (
    no_hook_errors,
    released_when_it_raised,
    colocated_roles_share_captures,
    region_error_passes_through,
    writes_only_under_output_dir,
    lists_what_it_wrote,
    artifacts_are_complete,
    every_capture_written,
    nothing_left_open,
    finalize_is_idempotent,
)
"""The checks applied to every scripted run, in the order their problems are reported."""


def _in_own_dir(relative: Path, name: str) -> bool:
    parts = relative.parts
    return len(parts) >= 4 and parts[1].startswith("rank") and parts[2] == name


def _unreadable(path: Path) -> str | None:
    """Why a ``.json``/``.gz`` file cannot be read to its end, or None."""
    name = path.name
    if not (name.endswith(".json") or name.endswith(".gz")) or path.stat().st_size > 512 * 2**20:
        return None
    try:
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                data = handle.read()
            if name.endswith(".json.gz"):
                json.loads(data)
        else:
            with open(path, "rb") as handle:
                json.load(handle)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _logged_traceback(run: BackendRun, hook: str) -> str:
    """The tail of the traceback the core logged for ``hook`` of this backend, or empty."""
    for record in run.log:
        args = record.args if isinstance(record.args, tuple) else ()
        if len(args) >= 4 and args[0] == run.name and args[1] == hook:
            tail = str(args[3]).rstrip().splitlines()[-8:]
            return ":\n" + "\n".join(tail)
    return ""
