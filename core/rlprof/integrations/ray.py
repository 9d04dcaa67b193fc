"""Ray glue: one controller, many worker actors, one run directory. This module is the controller.

verl runs a single controller process that drives worker actors (each hosting roles on one rank).
rlprof follows that shape, one module per part (users import them all from :mod:`rlprof.ray`, and
this module re-exports them too):

* :mod:`~rlprof.integrations.ray_options`: who a worker is (:class:`WorkerSpec`, its
  :class:`ProfilerArgs`) and the ``.options(...)`` it is created with (:func:`worker_options`);
* :mod:`~rlprof.integrations.ray_worker`: the worker mixin (:class:`ProfiledWorker`);
* :mod:`~rlprof.integrations.ray_fanout`: one call to every worker with a bounded wait, and the
  table of what became of each worker (live, stuck, dead, finished);
* :mod:`~rlprof.integrations.ray_run_end`: the finish hook once per node, gathering, after-exit;
* here: :class:`ProfilingController`, which composes them step by step.

The whole story:

* **Before a worker exists** the controller asks :func:`worker_options` for its ``.options(...)``:
  the plan of that worker is resolved on the controller, so a backend that must start *with* the
  process (nsys) can add to its ``runtime_env``, and the run id reaches the worker's environment.
* **In the worker** the actor class inherits :class:`ProfiledWorker`; its training methods wrap
  work in ``self.profiler.role(...)`` and ``self.profiler.iteration()``.
* **Around every step** the controller's :class:`ProfilingController` fans ``start_step`` /
  ``step_boundary`` out to the workers (only on profiled steps: other steps cost nothing), and
  ``finalize`` at the end. Every fan-out waits at most ``timeout_s``: a dead or hung worker is
  reported, recorded in the run's manifest, and never hangs the controller; the other ranks carry
  on and keep their artifacts, and a hung rank costs the timeout once per run, not once per step
  (:mod:`~rlprof.integrations.ray_fanout` says how).
* **Many nodes** (:mod:`rlprof.integrations.nodes`): every reply a worker sends at ``setup``, a
  profiled step's end and ``finalize`` carries the lines its manifest gained since, which the
  controller appends in its own run directory, so one ``rlprof report`` sees every node; a dead
  node is recorded as lost; ``gather: traces`` streams the files too (:mod:`rlprof.integrations.gather`);
  ``finish_hook_cmd`` runs once per node; each node analyses the traces that stay there and only
  their breakdown rows come here (:mod:`~rlprof.integrations.node_rows`).

A run, end to end::

    controller = ProfilingController(config)                  # makes the run id all ranks share
    for spec in (WorkerSpec(rank=r, world_size=2, roles=("actor", "rollout", "ref")) for r in range(2)):
        controller.add(spec, Worker.options(**controller.worker_options(spec)).remote())
    controller.setup()                                          # each worker builds its Profiler
    for step in range(1, steps + 1):
        controller.start_step(step)
        ray.get([w.train_step.remote() for w in controller.handles])
        controller.step_boundary()
    controller.finalize()                                       # artifact records per worker

Workers should be ordinary (synchronous) actors: Ray runs the calls one caller submits to such an
actor in order, so ``start_step`` lands before the step's training calls. Ray is imported only
when the controller fans out (``import rlprof`` never imports it; :func:`worker_options`,
:class:`ProfiledWorker` and ``rlprof report`` work without it).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from rlprof.config.schema import ProfilerConfig, load_config
from rlprof.integrations.gather import Destination, Gathered, gather_traces
from rlprof.integrations.node_rows import NodeRows
from rlprof.integrations.nodes import RunCollector, Sent, current_node
from rlprof.integrations.ray_fanout import (DEFAULT_TIMEOUT_S, Dead, FanOut, Finished, Stuck, WorkerFailure, Workers,
                                            describe_error)
from rlprof.integrations.ray_options import HYBRID_ENGINE_STAGES, ProfilerArgs, WorkerSpec, worker_options
from rlprof.integrations.ray_run_end import NodeFinishHooks, move_after_exit, worker_sources
from rlprof.integrations.ray_worker import ProfiledWorker
from rlprof.layout import hostname
from rlprof.manifest import (FAILURE_RECORD, NODE_LOST_RECORD, PHASE_RECORD, NodeLostRecord, phase_record, plain_steps_record,
                             record_fields, short_node)
from rlprof.runtime.plan import armed
from rlprof.runtime.run_id import run_id_for
from rlprof.runtime.session import PLAIN_STEPS_BUFFERED
from rlprof.runtime.step_book import StepBook, timed
from rlprof.step_metrics import FILE as STEP_METRICS_FILE

__all__ = ["DEFAULT_TIMEOUT_S", "HYBRID_ENGINE_STAGES", "FanOut", "ProfiledWorker", "ProfilerArgs",
           "ProfilingController", "WorkerFailure", "WorkerSpec", "describe_error", "worker_options"]

log = logging.getLogger("rlprof")

STEP_METRICS_WAIT_S = 10.0
"""The longest ``finalize`` waits for the last steps' timings (the workers sent them as they finalized)."""
CONTROLLER_PHASES = "rlprof's Ray controller"
"""The ``source`` of the controller's ``phase`` records (the report names who timed a phase)."""


class ProfilingController:
    """The controller's side of profiling: decides per step, fans out, survives dead workers.

    :param config: the profiler configuration (YAML path, mapping, DictConfig, ProfilerConfig);
        loaded and checked once here, then shipped to the workers already parsed.
    :param workers: ``(WorkerSpec, actor handle)`` pairs; more can be added with :meth:`add`.
    :param run_id: shared by every rank; default: env ``RLPROF_RUN_ID`` or a new one
        (:func:`rlprof.runtime.run_id.run_id_for`).
    :param timeout_s: the longest any fan-out waits for a worker (``setup`` included, which also
        waits for the actors to start); may be changed between calls.
    """

    clock_ns: Callable[[], int] = time.time_ns
    """The clock unprofiled steps are timed with (the workers' records use the same one)."""

    def __init__(
        self,
        config: Any,
        workers: Iterable[tuple[WorkerSpec, Any]] = (),
        *,
        run_id: str | None = None,
        overrides: Iterable[str] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        self.config: ProfilerConfig = load_config(config, overrides)
        self.run_id = run_id_for(run_id)  # decided as the workers' Profilers decide it
        self.timeout_s = timeout_s
        self._workers = Workers()
        """Every worker and what became of it: the one owner (``dead``, ``unresponsive``, ``handles``,
        ``pending`` are read from it)."""
        self.failures: list[WorkerFailure] = []
        """Every failure of every fan-out, in order."""
        self._step: int | None = None
        """The profiled step begun by :meth:`start_step` and not ended yet (None: none is open)."""
        self._unprofiled: tuple[int, int] | None = None
        """The unprofiled step begun by :meth:`start_step` and when (None: none is open). The workers
        hear nothing of it, so the controller times it: two clock reads a step."""
        self._unprofiled_steps: list[tuple[int, int, int]] = []
        """Unprofiled steps not written yet, ``(step, start_ns, end_ns)``: one ``unprofiled_steps`` record
        at the next profiled step, at ``finalize``, or every :data:`PLAIN_STEPS_BUFFERED` steps."""
        self._manifest = None
        self._lost_nodes: set[str] = set()
        """Ray nodes found gone (said once each); which workers ran where is in :attr:`infos`."""
        self.collector: RunCollector | None = None
        """Where the workers' manifest batches go (the controller's run directory); built at ``setup``."""
        self.node_rows: NodeRows | None = None
        """Each node's analysis of its own traces, and the rows it shipped here; built at ``setup``."""
        self.gathered: Gathered | None = None
        """What ``finalize`` gathered (``global_profiler.gather: traces``)."""
        self.infos: dict[str, dict[str, Any]] = {}
        """Each worker's :meth:`ProfiledWorker.rlprof_info` from ``setup``."""
        self._hooks = NodeFinishHooks(self.config)
        self._profiled_steps = frozenset(self.config.global_.steps or ()) if self.config.enabled else frozenset()
        self.step_metrics: StepBook | None = None
        """The run's step metrics (:class:`~rlprof.runtime.step_book.StepBook`: the latest steps' figures, what
        triggers read), fed by every worker through the run's mailbox; built at ``setup`` when some enabled
        role is timed (a tool set, ``global_profiler.step_metrics`` on), else None."""
        self._collector = None
        self._on = self.config.enabled or armed(self.config)
        """Profiling is on: steps are planned, or the run is armed (captures may be asked for mid-run)."""
        self.decider = None
        """The run's :class:`~rlprof.runtime.unplanned.Decider` (an armed run), made at :meth:`setup`: asked at
        every :meth:`start_step` whether the step is captured though no plan named it."""
        self._began_ns = 0
        """When the step in progress began (profiled or not), for the triggers."""
        self.unplanned: str | None = None
        """Why the step in progress is captured though no plan named it (its decider's reason), else None: what a
        driver tells processes the fan-out does not reach (the demo's vLLM replicas)."""
        for spec, handle in workers:
            self.add(spec, handle)

    # ---------------------------------------------------------------- workers

    def add(self, spec: WorkerSpec, handle: Any) -> None:
        self._workers.add(spec, handle)

    def worker_options(self, spec: WorkerSpec, *, runtime_env: Mapping[str, Any] | None = None,
                       backends: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """:func:`worker_options` for ``spec`` with this controller's config and run id."""
        return worker_options(self.config, **spec.profiler_kwargs(), run_id=self.run_id,
                              runtime_env=runtime_env, backends=backends)

    @property
    def workers(self) -> dict[str, tuple[WorkerSpec, Any]]:
        """Every worker added, dead or not: label -> ``(spec, handle)``."""
        return {label: (worker.spec, worker.handle) for label, worker in self._workers}

    @property
    def handles(self) -> list[Any]:
        """Handles of the workers still alive, in the order they were added."""
        return [worker.handle for _, worker in self._workers if not isinstance(worker.state, Dead)]

    @property
    def dead(self) -> frozenset[str]:
        """Workers whose actor is gone: never called again."""
        return frozenset(self._workers.in_state(Dead))

    @property
    def unresponsive(self) -> dict[str, Stuck]:
        """Workers that did not answer within the timeout: not waited for until their stuck call ends."""
        return self._workers.in_state(Stuck)

    @property
    def finish_hooks(self) -> dict[str, int | None]:
        """After :meth:`finalize`: each node's finish hook exit status, by the worker that ran it."""
        return self._hooks.statuses

    # ---------------------------------------------------------------- the fan-outs

    def profiles(self, step: int) -> bool:
        """Whether ``step`` is profiled anywhere (a set lookup: call it every step)."""
        return step in self._profiled_steps

    def setup(self, *, backends: Mapping[str, Any] | None = None) -> FanOut:
        """Have every worker build its Profiler (:meth:`ProfiledWorker.rlprof_setup`)."""
        if self._collector is None and timed(self.config):  # before the workers: their timings come here
            from rlprof.integrations.step_mailbox import Collector, open_mailbox

            try:
                mailbox = open_mailbox(self.run_id)
            except Exception as exc:  # never the run's failure: it goes on without step metrics
                log.warning("rlprof: no step metrics for this run: the run's mailbox actor could not be made (%s: %s)",
                            type(exc).__name__, exc)
            else:
                self.step_metrics = StepBook(self.run_dir / STEP_METRICS_FILE, self.run_id, self.config.global_.tools,
                                             root=self.run_dir, records_mb=self.config.global_.request_records_mb)
                self._collector = Collector(self.step_metrics, mailbox)
        if self.collector is None and self._on:
            self.collector = RunCollector(self.run_dir, current_node())
            if self.config.global_.gather != "traces":  # else the traces themselves come here
                self.node_rows = NodeRows(self.run_dir, list(self.config.global_.tools))
        shipped = self.config.with_overrides(finish_hook_cmd=None) if self._hooks.command else self.config
        result = self._fan_out("setup", None, lambda spec, handle: handle.rlprof_setup.remote(
            shipped, run_id=self.run_id, backends=backends, send_manifest=True, **spec.profiler_kwargs()))
        for label, info in result.results.items():
            if isinstance(info, Mapping):
                self.infos[label] = dict(info)
        self._hooks.choose(self.config, self._workers, self.infos)
        if self.step_metrics is not None:  # every worker with an enabled role sends its timings
            roles = self.config.roles
            self.step_metrics.expect(sum(1 for _, worker in self._workers
                                         if any(getattr(roles.get(r), "enable", False) for r in worker.spec.roles)))
        if self.decider is None and self._on and armed(self.config):
            from rlprof.runtime.plan import armed_mode
            from rlprof.runtime.unplanned import Decider, refusal

            self.decider = Decider(self.run_dir, self.config.global_.trigger,
                                   refuse=refusal(self.config, launched=bool(self._profiled_steps)),
                                   tools=self.config.global_.tools, mode=armed_mode(self.config),
                                   planned=self.config.global_.steps or ())
            self.decider.book = self.step_metrics  # the late_rank trigger reads each step's figures
        return result

    @property
    def run_dir(self):
        """The controller's run directory: every node's manifest records end up here."""
        return Path(self.config.global_.save_path).absolute() / self.run_id

    def start_step(self, step: int) -> FanOut:
        """Step ``step`` begins; no remote call unless it is profiled (an unprofiled step is only timed,
        so the report can put the profiled steps beside it)."""
        if self._step is not None or self._unprofiled is not None:
            self.step_boundary()
        reason = self.decider.decide(step) if self.decider is not None else None
        self.unplanned = reason
        if self.step_metrics is not None:
            self.step_metrics.began(step, self.clock_ns(), reason is not None or self.profiles(step))
        if reason is None and not self.profiles(step):
            if self._profiled_steps or self.decider is not None:  # profiling is on (not re-read each step)
                self._unprofiled = (step, self.clock_ns())
                self._began_ns = self._unprofiled[1]
            return FanOut("start_step", step)
        self._write_unprofiled_steps()
        self._step = step
        began = self._began_ns = self.clock_ns()
        if reason is None:
            submit = lambda spec, handle: handle.rlprof_start_step.remote(step)  # noqa: E731
        else:
            submit = lambda spec, handle: handle.rlprof_start_step.remote(step, reason)  # noqa: E731
        result = self._fan_out("start_step", step, submit)
        self._phase(step, "rlprof start_step", began)
        return result

    def step_boundary(self) -> FanOut:
        """The step begun by :meth:`start_step` ends (captures close, traces are written)."""
        step, self._step = self._step, None
        if self.step_metrics is not None:
            ending = step if step is not None else self._unprofiled[0] if self._unprofiled is not None else None
            if ending is not None:
                self.step_metrics.ended(ending, self.clock_ns())  # the step's work, before captures close
        if self.decider is not None and (step is not None or self._unprofiled is not None):
            self.decider.step_ended(step if step is not None else self._unprofiled[0],
                                    (self.clock_ns() - self._began_ns) / 1e9, captured=step is not None)
        if step is None:
            self._end_unprofiled_step()
            return FanOut("step_boundary", None)
        began = self.clock_ns()
        result = self._fan_out("step_boundary", step,
                               lambda spec, handle: handle.rlprof_step_boundary.remote(send_manifest=True))
        self._phase(step, "rlprof step_boundary", began)
        if step == self._hooks.last_step:
            self._hooks.start(self._workers)
        if self.node_rows is not None:
            self.node_rows.submit()
            self.node_rows.collect()
        return result

    def finalize(self, reason: str = "end") -> FanOut:
        """End the run on every live worker; ``results`` holds each worker's artifact records."""
        began = time.monotonic()
        if self._step is not None or self._unprofiled is not None:
            self.step_boundary()
        if self.decider is not None:
            self.decider.stop()
        self._write_unprofiled_steps()
        result = self._fan_out("finalize", None,
                               lambda spec, handle: handle.rlprof_finalize.remote(reason, send_manifest=True))
        if self._collector is not None:  # the workers sent their last timings as they finalized
            self._collector.finish(min(self.timeout_s, STEP_METRICS_WAIT_S))
            self._collector = None
        self._hooks.wait(self._workers, self.timeout_s)
        if self.node_rows is not None:  # within the finalize's own limit: what is not done by then is left out
            self.node_rows.finish(max(0.0, self.timeout_s - (time.monotonic() - began)))
        if self._on and self.config.global_.gather == "traces":
            self.gathered = gather_traces(self.destination(),
                                          worker_sources(result.results, self._workers, self.infos, self.collector))
        return result

    @property
    def pending(self) -> dict[str, list[dict[str, Any]]]:
        """After :meth:`finalize`: the artifacts each worker listed as ``pending`` (a tool writes them
        when the process exits, e.g. nsys with ``capture-range-end=repeat``), by worker label."""
        found = {label: [r for r in state.records if isinstance(r, dict) and r.get("kind") == "pending"]
                 for label, state in self._workers.in_state(Finished).items()}
        return {label: records for label, records in found.items() if records}

    def exit_workers(self, timeout_s: float | None = None) -> None:
        """Ask every live worker's process to exit (:meth:`ProfiledWorker.rlprof_exit`) and wait, at most
        ``timeout_s``, for them to be gone: what tools write at exit is then written."""
        import ray

        refs = []
        for handle in self.handles:
            try:
                refs.append(handle.rlprof_exit.remote())
            except Exception:
                pass
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s if timeout_s is None else timeout_s)

    def after_exit(self, timeout_s: float = 120.0) -> None:
        """Once the workers have exited (:meth:`exit_workers`, or the trainer ended them): move what
        tools wrote at exit into the run on each node, add those records to the controller's run
        directory, and with ``gather: traces`` stream those files too
        (:func:`rlprof.integrations.ray_run_end.move_after_exit`). Does nothing when no worker listed a
        pending file."""
        import ray

        g = self.config.global_
        sources, agents = move_after_exit(self.pending, self.infos, self.collector, tools=list(g.tools),
                                          run_id=self.run_id, gather=g.gather == "traces", timeout_s=timeout_s,
                                          reply_s=self.timeout_s)
        if sources:
            self.gathered = gather_traces(self.destination(), sources, self.gathered)
        for agent in agents:
            ray.kill(agent)

    def destination(self) -> Destination:
        """What gathering needs of this controller (:mod:`rlprof.integrations.gather`)."""
        g = self.config.global_
        return Destination(run_dir=self.run_dir, timeout_s=self.timeout_s, budget_gb=g.gather_budget_gb,
                           delete_local=g.gather_delete_local, write=self.write)

    def _end_unprofiled_step(self) -> None:
        """The unprofiled step in progress (if any) ended now."""
        if self._unprofiled is None:
            return
        (step, start_ns), self._unprofiled = self._unprofiled, None
        self._unprofiled_steps.append((step, start_ns, self.clock_ns()))
        if len(self._unprofiled_steps) >= PLAIN_STEPS_BUFFERED:
            self._write_unprofiled_steps()

    def _phase(self, step: int, name: str, began: int) -> None:
        """One of the controller's own calls in profiled step ``step``, as a ``phase`` record: the workers
        started (or ended) the step one after the other while it waited, so the report can say which part
        of "(outside regions)" was rlprof's own fan-out rather than the trainer's."""
        self.write(PHASE_RECORD, **phase_record(step, name, began, self.clock_ns(), CONTROLLER_PHASES))

    def _write_unprofiled_steps(self) -> None:
        """The unprofiled steps timed so far, as one ``unprofiled_steps`` record of the controller's manifest."""
        plain, self._unprofiled_steps = self._unprofiled_steps, []
        if plain:
            self.write("unprofiled_steps", **plain_steps_record(plain))

    def _fan_out(self, call: str, step: int | None, submit) -> FanOut:
        result = self._workers.fan_out(call, step, submit, self._received, self.timeout_s)
        for failure in result.failures:
            if failure.kind == "died":
                self._check_node(failure.worker)
            self._record(failure)
        self.failures.extend(result.failures)
        return result

    def _received(self, value: Any) -> Any:
        """A worker's reply without the manifest batch riding on it (handed to the collector)."""
        if not isinstance(value, Sent):
            return value
        if value.batch is not None and self.collector is not None:
            self.collector.receive(value.batch)
            if self.node_rows is not None and value.batch.path not in self.collector.visible:
                self.node_rows.see(value.batch)  # its traces stay on their node: rows travel instead
        return value.value

    # ---------------------------------------------------------------- failures

    def _check_node(self, label: str) -> None:
        """A worker died: if its Ray node is gone, say once that the node was lost (and which workers
        it took), in the log and the run's manifest. Its records up to its workers' last step are here."""
        info = self.infos.get(label) or {}
        node = info.get("node")
        if not node or node in self._lost_nodes or _node_alive(node):
            return
        self._lost_nodes.add(node)
        on_node = [other for other, its in self.infos.items() if its.get("node") == node]
        last = max((s for s in (self._workers[w].last_step for w in on_node) if s is not None), default=None)
        log.error("rlprof: node %s (%s) was lost with workers %s; its records up to step %s are in %s",
                  short_node(node), info.get("host"), ", ".join(on_node), last if last is not None else 0, self.run_dir)
        self.write(NODE_LOST_RECORD, **record_fields(NodeLostRecord(node=node, node_host=str(info.get("host")), workers=on_node,
                                                                    step=last)))

    def _record(self, failure: WorkerFailure) -> None:
        """Append the failure to the run's manifest so ``rlprof report`` shows it next to the artifacts."""
        self.write(FAILURE_RECORD, worker=failure.worker, worker_rank=failure.rank, call=failure.call,
                   step=failure.step, kind=failure.kind, error=failure.error)

    def write(self, record_type: str, **fields: Any) -> None:
        """Append one record to the controller's own manifest (``manifest/controller-<host>-<pid>.jsonl``)."""
        if not self._on:
            return
        if self._manifest is None:
            from rlprof.manifest import ManifestWriter

            host, pid, run_dir = hostname(), os.getpid(), self.run_dir
            self._manifest = ManifestWriter(run_dir / "manifest" / f"controller-{host}-{pid}.jsonl",
                                            {"run": self.run_id, "rank": None, "host": host, "pid": pid},
                                            root=run_dir)  # no link followed from the run directory down
        self._manifest.write(record_type, **fields)


def _node_alive(node: str) -> bool:
    """Whether Ray still lists ``node`` as alive (asked only when a worker died)."""
    try:
        import ray

        return any(n.get("NodeID") == node and n.get("Alive") for n in ray.nodes())
    except Exception:  # cannot tell: do not claim a loss
        return True
