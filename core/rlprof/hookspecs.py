"""What a backend can do: the hook specification (hook contract 1, :data:`CONTRACT`).

A backend is a class found through the ``rlprof.backends`` entry-point group; the core
instantiates it once per process session (no arguments; colocated Profilers of one process share
it) and calls the methods it marks with :data:`rlprof.hookimpl`. A backend implements only the
hooks it needs, and each hookimpl names only the arguments it uses (pluggy passes no defaults).
A plain ``@rlprof.hookimpl`` only: the core calls each backend on its own, in ``global_profiler.tool``
order, so ``tryfirst``/``trylast``/``hookwrapper``/``wrapper`` are refused when the backend loads.

Lifecycle
---------

The core decides *what* is profiled and *when* a capture opens and closes (the capture state machine,
:mod:`rlprof.runtime.capture_machine`); a backend decides only *how* to capture. For one process, on a rank where at
least one hosted role is selected, the calls are::

    validate_tool_config          once per section that names this backend (global_tool_config.<name>,
                                  then each enabled role), at Profiler creation
    check_environment             once, at Profiler creation
    for each profiled step:
        start_step                opens_capture=True: end-to-end, first step seen of a run of steps
        for each region (role + stage) of a selected role, as the trainer enters it:
            start_role            opens_capture=True: discrete, and no capture open (else a range inside it)
            [iteration_boundary]  between sampled iterations inside an open window (profiler.schedule)
            stop_role             closes_capture=True: the region that opened the capture; also when it raised
        step_boundary             closes_capture=True: end-to-end, last step of a run (ends_step=False: a
                                  run left early, closed after its last step seen already ended)
    finalize                      once: end of run, interpreter exit or SIGTERM

``stop_role`` calls are last-in-first-out: the region that ends is the innermost one still open (the
core closes inner regions first, also when a step or the run ends inside them), so a backend may keep
a plain stack of its ranges.

Groups of steps: on the calls that close a capture, and on ``finalize``, ``ctx.ends_group`` names the
step numbers of the group of captures that call completes ("write what covers these steps now"). The
core groups a backend's captures when its validated tool_config carries ``memory_snapshot_num_steps:
N`` (:mod:`rlprof.runtime.groups`); otherwise every close ends its own group.

Unselected ranks, steps and roles make no calls at all. With a ``profiler.schedule`` a region is
cut into active windows of iterations: ``start_role``/``stop_role`` bracket each window instead
of the whole region (see docs/sampling.md).

What the core guarantees (docs/captures.md): never a capture inside a capture (a nested region is a
named range in the open one); a close only for a capture that was opened, and every opened capture
is closed; so a backend obeys ``ctx.opens_capture``/``ctx.closes_capture`` and never guards against
nesting or resumed runs.

Isolation: every hookimpl is called on its own, under the hook watchdog. If it raises, the core
logs it once (backend, hook, rank, traceback), records it in the manifest, skips that backend for
new work, and still *releases* it: it sends the closing calls for the ranges and capture the backend
had open (``stop_role``/``step_boundary`` with ``closes_capture``), then ``finalize`` once, and records
a ``cleanup`` record; training goes on (``RLPROF_STRICT=1`` re-raises instead, for tests).

Contract versions: the spec carries a version (:data:`CONTRACT`); a backend declares the one it was
written for as a class attribute of its entry point's object, ``rlprof_contract = 1``. At load, a
declared version the core no longer speaks (not in :data:`SUPPORTED_CONTRACTS`) is refused in one
message (backend, distribution, versions, docs/migration.md); no declaration is taken as the current
contract, said once; a context attribute a later contract removed (:data:`rlprof.context.REMOVED_ATTRIBUTES`) raises an
``AttributeError`` naming its replacement, once: the backend is then released like any that raised.

A backend that reads the region's model (``RoleContext.module``) declares ``reads_module = True``
as a class attribute, next to ``rlprof_contract``: integrations that must look the model up (the verl
drop-in, from verl's worker) do so only then. Optional within contract 1; without it ``ctx.module`` is
still whatever the trainer passed to ``prof.role(..., module=...)``.

A backend's voice: ``ctx.warn(message)`` (something the user should know; logged once per process on
the ``rlprof`` logger and recorded) and ``ctx.skip(reason)`` (this capture writes nothing, and why); both
become manifest records that ``rlprof report`` and the verdict show. A capture skipped with a reason
counts as explained, not missing.

Order and time: with several backends selected, each hook runs them one after another in
``global_profiler.tool`` order (closing calls too). The core stamps a region's start after every
``start_role`` returned and its end before the first ``stop_role`` runs, so time spent in hooks shows
as "(outside regions)" in the report. Log with ``logging.getLogger("rlprof.<backend>")``.

Outside a profiling process: five hooks are not part of a capture's life. The core calls them in a
fresh instance of the backend class, often in another process and on another day: ``report_details``
(``rlprof report``, for each file the backend wrote that is still on disk), ``after_exit`` (on each
node of a Ray run, once the workers there have exited), ``cli_commands`` (``rlprof --help`` and
``rlprof <command>``), ``trace_reader`` (``rlprof breakdown`` and ``rlprof report``: how the analysis
reads the backend's trace files) and ``step_metrics`` (where the run's steps meet, each step's metrics). So a distribution registers one object, its backend class, and everything it
adds to rlprof arrives through hooks of this spec (:data:`OUTSIDE_A_RUN`). The first three replace the
entry-point groups ``rlprof.report_details``, ``rlprof.after_exit`` and ``rlprof.commands``, which still
work, with a deprecation message (docs/migration.md); ``trace_reader`` replaces no group.

Artifacts: any lifecycle hook may return paths (``str``/``os.PathLike``, or a list of them) or call
``ctx.add_artifact(path)``; the core lists each in the manifest with the call's run, step,
role, rank, host and pid. Write only under ``ctx.output_dir()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pluggy

from rlprof.hook_values import CHROME_VIEWER, CliCommand, TraceReader  # noqa: F401  (what a backend imports from here)

if TYPE_CHECKING:  # the context classes, for readers and type checkers (no import cost at run time)
    from rlprof.context import FinalizeContext, IterationContext, RoleContext, RuntimeEnvContext, StepContext

PROJECT = "rlprof"

CONTRACT = 1
"""The hook contract this core speaks. 1: ``iteration_boundary`` exists and ``StepContext.iteration``
is gone (docs/migration.md). A change that breaks backends bumps it and adds migration notes."""
SUPPORTED_CONTRACTS: tuple[int, ...] = (1,)
"""Declared contracts the core still loads; any other is refused at load."""

_hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marker for backend methods that implement a hook: ``@rlprof.hookimpl``."""


@_hookspec
def validate_tool_config(tool_config: Mapping[str, Any], key_path: str) -> Mapping[str, Any]:
    """Check and normalise this backend's ``tool_config`` section; return the result.

    Called by the core for ``global_tool_config.<name>`` on its own (``key_path`` is
    ``global_profiler.global_tool_config.<name>``) and for every enabled role's section, when a
    :class:`~rlprof.Profiler` is created and by ``rlprof check``; before any capture.
    ``rlprof.tool_config.check_keys(tool_config, key_path, used=..., ignored=...)`` and
    ``rlprof.errors.fail(key, value, allowed)`` word the errors for you; keys verl defines for your tool
    but you do not use go in ``ignored`` (accepted, not used).

    :param tool_config: the section as the user wrote it, with ``global_tool_config.<name>``
        merged under it and the core's keys (``discrete``, ``schedule``, ``profile_token_*``,
        ``_target_``) removed.
    :param key_path: where the section lives, e.g. ``actor_rollout_ref.actor.profiler.tool_config.torch``;
        use it in error messages.
    :returns: the normalised config; the backend receives it later as ``ctx.tool_config``. The core
        reads one key of it: ``memory_snapshot_num_steps`` (a positive int), which asks the core to
        group this backend's captures by that many step numbers (``ctx.ends_group``).
    :raises rlprof.ConfigError: for unknown keys or bad values; name the key path, the bad value
        and what is allowed (:func:`rlprof.errors.fail` builds that message). Keys that verl
        defines for this tool but the backend does not use must be accepted (ignored), not rejected.
    """


@_hookspec
def check_environment() -> list[str]:
    """Report what is missing for this backend to capture on this machine.

    Called by ``rlprof check`` and ``rlprof backends``, and once when a Profiler first needs the
    backend. Must not raise and must not start anything.

    :returns: human-readable problems (e.g. ``"torch_npu cannot be imported: ..."``); empty when
        everything needed is there. A problem here is a warning in the log and in the ``process``
        record, never a failure of the run (a check that raises anyway is recorded as an ``error`` of
        kind ``environment`` and counted as one problem).
    """


@_hookspec
def start_step(ctx: StepContext) -> Any:
    """A profiled training step begins on this rank.

    Called by :meth:`Profiler.start_step` only for steps in ``global_profiler.steps`` on a process
    where at least one hosted role is selected.

    :param ctx: a :class:`~rlprof.context.StepContext`. ``ctx.opens_capture`` is True when this
        call must open a capture window (end-to-end mode; with ``profile_continuous_steps`` only
        the first step seen of a run of consecutive steps: a run entered in the middle, as when
        training resumed from a checkpoint, opens at the first step seen). ``ctx.capture`` then
        describes the window; in a run that goes on, it is the window already open.
    :returns: optionally, paths of artifacts written.
    """


@_hookspec
def start_role(ctx: RoleContext) -> Any:
    """A region of a selected role begins (e.g. actor update, ref log-prob, rollout generate).

    Called when the trainer enters ``with prof.role(role, stage)`` (or a decorated function) inside
    a profiled step, for roles selected on this rank. Mark a named range ``ctx.region`` in every case.

    :param ctx: a :class:`~rlprof.context.RoleContext`. ``ctx.opens_capture`` is True when this call
        must open a capture window for the region (discrete mode, and no capture is open: a region
        nested in an open capture is only a named range in it, in either mode). ``ctx.capture`` is the
        capture the range belongs to. ``ctx.iterations`` is set when the role is sampled and this
        call starts an active window of iterations.
    :returns: optionally, paths of artifacts written.
    """


@_hookspec
def iteration_boundary(ctx: IterationContext) -> Any:
    """An iteration ends inside an open window of a sampled region, and the window goes on.

    Called between the iterations (``with prof.iteration()`` blocks, or ``Profiler.next_iteration()``
    calls) of a region whose role has a ``profiler.schedule``, only while a window of it is open; the
    last iteration of a window is ended by ``stop_role`` instead. Mark it (a ``ProfilerStep#n``-style
    range or an instant event) or ignore it.

    :param ctx: an :class:`~rlprof.context.IterationContext`: ``ctx.iteration`` (the index that
        ended), ``ctx.region``, ``ctx.role``, ``ctx.step``, ``ctx.capture``.
    :returns: optionally, paths of artifacts written.
    """


@_hookspec
def stop_role(ctx: RoleContext) -> Any:
    """The region started by the matching :func:`start_role` ends: also when its code raised.

    Close the range; close the capture window if ``ctx.closes_capture`` and return what you wrote.
    ``ctx.error`` holds the exception the region raised (also when it raised in the last iteration of
    a sampled window); the core re-raises it unchanged after every backend ran. Do not skip the close
    because of ``ctx.error``: the capture of a failing region is often the one the user needs.

    Calls are last-in-first-out: the region that ends is always the innermost one still open (inner
    regions are closed first, also when a step or the run ends inside them), so a backend may keep a
    plain stack of its ranges and pop it. ``ctx.ends_group`` is set when ``ctx.closes_capture``
    completes a group of captures (see the module docstring).

    :param ctx: a :class:`~rlprof.context.RoleContext` with the same ``region`` and ``capture`` as at start.
    :returns: optionally, paths of artifacts written (e.g. the trace of a discrete capture).
    """


@_hookspec
def step_boundary(ctx: StepContext) -> Any:
    """The profiled step ends (only the end of a training step; iterations have their own hook).

    Called by :meth:`Profiler.step_boundary` after every profiled step (with colocated Profilers:
    after the last one that started the step). Close the step's capture window if
    ``ctx.closes_capture``. ``ctx.ends_step`` is False for a close sent after the step already ended
    (a merged run of steps left before its last step): then only close the window.

    :param ctx: a :class:`~rlprof.context.StepContext`.
    :returns: optionally, paths of artifacts written (e.g. the trace of an end-to-end capture).
    """


@_hookspec
def finalize(ctx: FinalizeContext) -> Any:
    """The run ends for this process: write out anything pending and release resources.

    Called once per backend instance: when the last Profiler of the process session finalizes
    (:meth:`Profiler.finalize`), at interpreter exit (before Python waits for non-daemon threads),
    or on SIGTERM — whichever comes first; or, for a backend that raised, right after the core
    closed what it had open. If a capture window is still open (the process is ending in the middle
    of a step), the core first calls :func:`stop_role`/:func:`step_boundary` with closes_capture=True
    so the window is closed the ordinary way. Make it **idempotent**: a second call must raise
    nothing, write nothing and return nothing new. Running before Python waits for non-daemon
    threads, it can stop a thread of the backend's that would otherwise block the exit.

    :param ctx: a :class:`~rlprof.context.FinalizeContext` (``ctx.reason``: ``end``, ``exit``,
        ``signal``, or ``released`` when this backend raised earlier and the core releases it). ``ctx.tool_config`` is the config of
        the process's first selected role. ``ctx.ends_group`` names the steps of the group of captures
        left over (closed since the last group ended), to write now; ``()`` when there is none. ``ctx.relocate_results`` asks to move files the tool wrote
        to fixed places (e.g. Ray's nsight directory) into ``ctx.output_dir()``.
    :returns: optionally, paths of artifacts written or relocated.
    """


@_hookspec
def worker_runtime_env(ctx: RuntimeEnvContext) -> Mapping[str, Any] | None:
    """Contribute to a Ray worker's ``runtime_env`` before the actor is created.

    Called by :func:`rlprof.ray.worker_options` on the controller, once per worker to be created,
    for every selected backend. Only backends that must start *with* the process (nsys) need it.

    :param ctx: a :class:`~rlprof.context.RuntimeEnvContext`: the worker's rank and roles, whether
        it will capture at all, and ``expected_captures`` (how many capture windows it will open
        under the plan, None when the plan cannot know).
    :returns: a JSON-serialisable runtime_env fragment such as ``{"nsight": {...}}``, or None.
    """


@_hookspec
def report_details(path: Path) -> Sequence[str] | None:
    """Lines to print under one file this backend wrote, in ``rlprof report``.

    Called by ``rlprof report`` (not with ``--no-details``) once per file of the run whose backend is
    this one and that is still on disk, in a fresh instance of the backend class (the report may run
    on any machine, long after the run). rlprof-nsys summarises the NVTX ranges of a report here.

    :param path: the file, absolute.
    :returns: lines to print under the file (shown as given, one per line), or None for none. Raising
        shows one "details unavailable: ..." line for the file; the report goes on.
    """


@_hookspec
def after_exit(run_dirs: Sequence[Path]) -> int:
    """Move what the tool wrote at process exit into the run, on one node, after the workers exited.

    For a tool that writes its output only when the profiled process exits (nsys with
    ``capture-range-end=repeat``), after ``finalize``: list those files with kind ``pending``. Called by
    the Ray controller's ``after_exit()`` on each node that has pending files, once the workers there
    have exited, in a fresh instance of the backend class; called again every half second until it
    returns 0 or the time is up (docs/ray.md, "Many nodes").

    :param run_dirs: the run's directories on this node.
    :returns: how many files the tool is still writing (0: done). Move what is complete into the
        layout and record it with :func:`rlprof.manifest.record_relocation`. Raising leaves the
        files where the tool wrote them, logged once; nothing else fails.
    """


@_hookspec
def cli_commands() -> Mapping[str, CliCommand]:
    """Commands this backend adds to the ``rlprof`` command line.

    Called by ``rlprof`` when it lists its commands (``rlprof``, ``rlprof --help``) or runs one that is
    not built in, in a fresh instance of the backend class; never for ``rlprof report`` and the other
    built-in commands. Keep it cheap: import what a command needs inside its ``run``.

    :returns: command name -> :class:`CliCommand` (``summary``: the line ``rlprof --help`` shows beside
        the name; ``run(argv) -> int`` runs the command with the arguments after its name, parsing them,
        ``--help`` included, and returns the exit status; ``usage``: the synopsis). A built-in command's
        name is never replaced. Raising (or a backend that fails to import) drops its commands with one
        line naming the distribution and version; every other command still works.

    rlprof-nsys adds ``rlprof relocate``, rlprof-npu ``rlprof npu-analyse``::

        from rlprof.hookspecs import CliCommand

        class NsysBackend:
            @rlprof.hookimpl
            def cli_commands(self):
                return {"relocate": CliCommand("move pending nsys reports into the run layout", _relocate,
                                               "PATH... [--wait S]")}
    """


@_hookspec
def trace_reader() -> TraceReader | None:
    """How the breakdown analysis reads the trace files this backend writes.

    Called by ``rlprof breakdown`` (every installed backend: it may be handed any file) and by ``rlprof
    report`` (only the backends whose files the run holds), in a fresh instance of the backend class,
    before any file is read. Keep it cheap: return names, import nothing heavy; the reader itself runs in
    other processes (docs/analysis.md, "Inside a region").

    ``TraceReader(patterns, target, format="", not_traces=(), chrome=False, viewer="")``: ``target`` is a function taking a
    file's path and returning :class:`rlprof.analysis.breakdown.TraceEvents` (its device events, host
    ops, regions and collective calls; docs/analysis.md, "Inside a region", says what each class
    means). ``rlprof breakdown DIR`` walks a folder with the patterns, asking every installed reader
    (as pytest's collector asks each plugin), so a file kind a plugin adds is found there too; among
    patterns that match one file, the one with more literal characters wins (``trace_view.json`` over
    ``*.json``). ``not_traces`` names, the same way, what the backend writes beside its traces that is
    not one (rlprof-npu: ``profiler_info*.json``): a folder walk passes such a file over, saying whose
    it is, rather than handing it to a reader with a broader pattern (rlprof-torch's ``*.json``). A
    reader raising on a file costs one line naming the file and the message; the other files are
    still read. These patterns are the only list of trace file names: ``rlprof timeline --with-traces``
    merges the files a backend's own reader claims where it says ``chrome=True`` (Chrome trace-event JSON),
    and the demo's hints name where to open them (``viewer``).

    :returns: a :class:`TraceReader`, or None when this backend's files cannot be split into compute,
        communication, copies and idle. Raising, or a target that fails to import, costs one line naming
        the distribution; the other backends' files are still read.

    rlprof-torch reads Kineto JSON (its own traces, vLLM's and SGLang's)::

        from rlprof.hookspecs import TraceReader

        class TorchBackend:
            @rlprof.hookimpl
            def trace_reader(self):
                return TraceReader(("*.json", "*.json.gz"), "rlprof_torch.kineto_reader:read_trace", "Kineto JSON",
                                   chrome=True)
    """


@_hookspec
def step_metrics(step: int, metrics: Mapping[str, Any], run_id: str) -> None:
    """A step's metrics, for a tracker rlprof does not already feed (a Prometheus exporter, a plain wandb run).

    Called where a run's steps meet (verl's trainer process, the Ray controller, a plain Profiler's
    process), on a thread of rlprof's, never the training thread, in a fresh instance of each selected
    backend that implements it (``global_profiler.tool`` lists it: a sink may implement this hook
    alone). Once per step, in step order, as the step's figures are complete (every process that reports
    has sent its timings past the step's end); and once more for each profiled step whose traces were
    analysed, steps later, with the split of its regions. A backend that raises is logged once and
    skipped from then on; training goes on. Keep it short: the next step's figures wait for it.

    :param step: the training step the figures describe (a split's: the profiled step it was measured on,
        lower than steps already sent).
    :param metrics: tracker name -> value, the names of docs/analysis.md, "Step metrics":
        ``rlprof/<role>/<region>/<figure>`` (``slowest_s``, ``slowest_rank``, ``median_s``, ``spread_s``,
        ``late_rank``, ``late_by_s``; a split's ``compute_frac``, ``exposed_comm_frac``,
        ``exposed_memory_frac``, ``idle_frac``, ``peak_allocated_bytes``) and ``rlprof/step/<figure>``
        (``time_s``, ``outside_regions_s``); a split carries ``rlprof/split/step``. Only
        ``[A-Za-z0-9_./-]``, units in the name, none a prefix of another. A tracker that refuses a step
        lower than one it has (wandb) logs a split against ``rlprof/split/step``.
    :param run_id: the run's id (the run directory's name).
    :returns: nothing (a value is ignored).

    A Prometheus exporter, in full::

        from prometheus_client import Gauge

        class PrometheusSink:
            def __init__(self):
                self.gauges = {}

            @rlprof.hookimpl
            def step_metrics(self, metrics):
                for name, value in metrics.items():
                    key = name.replace("/", "_").replace(".", "_").replace("-", "_")
                    if key not in self.gauges:
                        self.gauges[key] = Gauge(key, name)
                    self.gauges[key].set(value)
    """


OUTSIDE_A_RUN: tuple[str, ...] = ("report_details", "after_exit", "cli_commands", "trace_reader", "step_metrics")
"""The hooks called outside a profiling process, each in a fresh instance of the backend class
(see the module doc); the others belong to a process session."""

HOOKS: tuple[str, ...] = tuple(name for name, spec in list(globals().items()) if hasattr(spec, f"{PROJECT}_spec"))
"""Every hook of this spec, in the order written above (the lifecycle's order): the one list the
registry, the testing kit and the docs test read."""
