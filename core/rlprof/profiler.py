"""When the core calls the hooks: the worker-side :class:`Profiler`, one per process.

Use it the way a trainer's worker runs a step::

    prof = rlprof.Profiler(config, rank=rank, world_size=world, roles=("actor", "ref"))
    for step in range(1, n + 1):
        prof.start_step(step)
        with prof.role("ref", "compute_log_prob"):
            ...
        with prof.role("actor", "update"):
            for micro_batch in batches:
                with prof.iteration():          # only matters when the role has a schedule
                    ...
        prof.step_boundary()
    prof.finalize()

``role`` also decorates functions (``@prof.role("actor", "update")``). Everything about *what* is
captured was decided by :func:`rlprof.plan.resolve_plan`; this module only turns it into hook calls,
isolates backends from each other and from training, and keeps the manifest.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .config import ProfilerConfig, load_config
from .context import Capture, FinalizeContext, HookContext, RoleContext, RunInfo, StepContext
from .layout import capture_directory, hostname, new_run_id, process_tag, relative, safe_name, steps_label
from .manifest import ManifestWriter, path_size
from .plan import ProcessPlan, primary_role, resolve_plan

log = logging.getLogger("rlprof")
_NOTHING: frozenset = frozenset()


class _Region:
    """The result of ``prof.role(role, stage)`` while its role is profiled now: a context manager
    and a decorator. Cached per (role, stage); see :class:`_IdleRegion` for the other state."""

    __slots__ = ("_prof", "role", "region", "_open", "__weakref__")

    def __init__(self, prof: "Profiler", role: str, stage: str | None):
        self._prof = prof
        self.role = role
        self.region = safe_name(f"{role}_{stage}" if stage else role)
        self._open: list = []

    def __enter__(self):
        self._open.append(self._prof._enter_region(self))
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._open:
            self._prof._exit_region(self._open.pop(), exc)
        return False

    def __call__(self, fn: Callable) -> Callable:
        prof = self._prof
        role = self.role

        @functools.wraps(fn)
        def profiled(*args, **kwargs):
            if role not in prof._live:
                return fn(*args, **kwargs)
            with self:
                return fn(*args, **kwargs)

        return profiled


class _IdleRegion(_Region):
    """The same region object while its role is not profiled (unselected rank, step or role).

    The Profiler switches a region's class between :class:`_Region` and this one at step
    start and end, so the hot path of an idle ``with prof.role(...)`` runs no Python code:
    ``__enter__``/``__exit__`` are C callables that are not descriptors, so the with-statement
    calls them without ``self`` — ``NoneType()`` returns None, ``"".format(*exc_info)`` returns
    ``""`` (falsy: exceptions propagate). The ``as`` target of an idle region is None.
    """

    __slots__ = ()
    __enter__ = type(None)
    __exit__ = "".format


class _Iteration:
    """The result of ``prof.iteration()``: marks one iteration of the innermost open region."""

    __slots__ = ("_prof",)

    def __init__(self, prof: "Profiler"):
        self._prof = prof

    def __enter__(self):
        if self._prof._sampled:
            self._prof._iteration_enter()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._prof._sampled:
            self._prof._iteration_exit()
        return False


class _OpenRegion:
    __slots__ = ("spec", "schedule", "iteration", "window", "first", "in_iteration")

    def __init__(self, spec: _Region, schedule):
        self.spec = spec
        self.schedule = schedule
        self.iteration = 0
        self.window: Capture | None | bool = None
        self.first = 0
        self.in_iteration = False


class Profiler:
    """The profiler of one process (one rank, the roles it hosts).

    :param config: a YAML path, mapping, OmegaConf ``DictConfig`` or :class:`ProfilerConfig`.
    :param rank: global rank of this process; ``world_size`` the number of ranks.
    :param roles: the roles this process hosts, e.g. ``("actor", "rollout", "ref")``.
    :param stages: optional ``{role: [stage, ...]}`` run every step; lets the plan count capture
        windows exactly (nsys ``repeat-shutdown:N``).
    :param replica_rank: rollout replica index (agent-loop mode), with ``num_replicas``.
    :param run_id: shared by every rank of a run (the Ray controller passes one); default: env
        ``RLPROF_RUN_ID`` or a new id.
    :param overrides: dotted ``key=value`` overrides applied on top of ``config``.
    :param backends: ``{name: instance}`` to use instead of entry points (tests of the core only).
    """

    def __init__(
        self,
        config: Any = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        roles: Sequence[str] = ("actor",),
        stages: Mapping[str, Sequence[str]] | None = None,
        replica_rank: int | None = None,
        num_replicas: int | None = None,
        run_id: str | None = None,
        overrides: Iterable[str] = (),
        backends: Mapping[str, Any] | None = None,
    ):
        self.config: ProfilerConfig = load_config(config, overrides)
        self.plan: ProcessPlan = resolve_plan(
            self.config, rank=rank, world_size=world_size, roles=tuple(roles),
            replica_rank=replica_rank, num_replicas=num_replicas,
        )
        self.stages = stages
        self._live: frozenset = _NOTHING
        self._sampled = False
        self._specs: dict = {}
        self._iteration_cm = _Iteration(self)
        self._step: int | None = None
        self._step_capture: Capture | None = None
        self._stack: list[_OpenRegion] = []
        self._profiled_steps: list[int] = []
        self._capture_ids: dict[str, int] = {}
        self._unmarked: set[str] = set()
        self._finalized = False
        self._lock = threading.RLock()
        self.artifacts: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.environment: dict[str, list[str]] = {}
        """Backend -> what it reported missing on this machine (``check_environment``)."""
        g = self.config.global_
        run_id = safe_name(run_id or os.environ.get("RLPROF_RUN_ID") or new_run_id())
        self.run = RunInfo(
            run_id=run_id,
            rank=rank,
            world_size=world_size,
            host=hostname(),
            pid=os.getpid(),
            run_dir=Path(g.save_path).absolute() / run_id,
            roles=tuple(roles),
            replica_rank=replica_rank,
        )
        from .finish_hook import FinishHook

        self._finish = FinishHook.for_process(self.config, self.plan, self.run)
        self._primary_role = primary_role(self.plan)
        """Owner of step-level captures' tool_config: the first selected role (canonical order)."""
        self.backends = None
        self.tool_configs: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._manifest: ManifestWriter | None = None
        if not self.plan.active:
            if self._finish is not None:
                self._install_exit_handlers()
            return
        from .checking import require_usable_save_path
        from .registry import Backends

        require_usable_save_path(self.config)  # a ConfigError naming global_profiler.save_path, not a raw OSError later
        self.backends = Backends(self.plan.tools, rank=rank, on_error=self._record_error, instances=backends)
        self._validate_tool_configs()
        self._report_environment()
        self._manifest = ManifestWriter(
            self.run.run_dir / "manifest" / f"{process_tag(rank, self.run.host, self.run.pid)}.jsonl",
            {"run": self.run.run_id, "rank": rank, "host": self.run.host, "pid": self.run.pid},
        )
        self._manifest.write(
            "process",
            world_size=world_size,
            roles=list(self.run.roles),
            selected_roles=list(self.plan.selected_roles),
            steps=list(self.plan.steps),
            mode="discrete" if self.plan.discrete else "e2e",
            tools=list(self.plan.tools),
            save_path=str(Path(g.save_path).absolute()),
            replica_rank=replica_rank,
            expected_captures=self.plan.expected_captures(stages),
            schedules={n: _schedule_dict(p.schedule) for n, p in self.plan.roles.items() if p.schedule},
            environment=self.environment,
        )
        self._install_exit_handlers()

    # ------------------------------------------------------------------ public API

    @property
    def active(self) -> bool:
        """This process profiles at all (some hosted role selected, a tool and steps set)."""
        return self.plan.active

    def role(self, role: str, stage: str | None = None) -> _Region:
        """A region of ``role`` (``stage`` names what it does: ``update``, ``compute_log_prob``,
        ``generate``): use as ``with prof.role(...)`` or ``@prof.role(...)``. Costs a dict lookup
        when the role is not profiled now."""
        try:
            return self._specs[role, stage]
        except KeyError:
            spec = self._specs[role, stage] = _IdleRegion(self, role, stage)
            if role in self._live:
                spec.__class__ = _Region
            return spec

    def iteration(self) -> _Iteration:
        """Mark one iteration (micro-batch, forward pass, decode step) of the innermost region:
        ``with prof.iteration(): ...``. Drives the role's ``schedule``; free when there is none."""
        return self._iteration_cm

    def start_step(self, step: int) -> None:
        """A training step begins. Call on every step; only profiled ones make hook calls."""
        with self._lock:
            if self._step is not None:
                log.warning("rlprof: start_step(%s) before step_boundary() of step %s; closing step %s first", step, self._step, self._step)
                self.step_boundary()
            self._step = step
            if not self.plan.is_profiled(step) or self._finalized:
                return
            opens = self.plan.opens_step_capture(step)
            if opens:
                run = self.plan.run_of(step)
                self._step_capture = self._new_capture(steps_label(run), run, ())
            self._call("start_step", StepContext, None, capture=self._step_capture, step=step, opens_capture=opens)
            self._set_live(frozenset(self.plan.selected_roles))

    def step_boundary(self) -> None:
        """The current training step ends."""
        with self._lock:
            step, self._step = self._step, None
            if step is None:
                return
            self._set_live(_NOTHING)
            if self.plan.is_profiled(step) and not self._finalized:
                self._end_profiled_step(step)
            if self._finish is not None and not self._finalized:
                self._finish.step_done(step)  # after the backends wrote the step's captures

    def _end_profiled_step(self, step: int) -> None:
        while self._stack:
            open_region = self._stack[-1]
            log.warning("rlprof: step %s ended inside region %s; closing it", step, open_region.spec.region)
            self._exit_region(open_region, None)
        closes = self.plan.closes_step_capture(step)
        self._call("step_boundary", StepContext, None, capture=self._step_capture, step=step, closes_capture=closes)
        if closes:
            self._step_capture = None
        self._profiled_steps.append(step)

    def run_finish_hook(self) -> None:
        """Start ``finish_hook_cmd`` now (callers that decide the steps themselves, such as verl's
        trainer passing ``run_command=True`` on its last profiled step). Runs at most once."""
        if self._finish is not None:
            self._finish.start()

    def finalize(self, reason: str = "end") -> list[dict[str, Any]]:
        """End the run for this process: close what is open, let backends write, finish the manifest.
        Idempotent; also runs at interpreter exit and on SIGTERM. Returns the artifact records."""
        with self._lock:
            if self._finalized:
                return self.artifacts
            self._finalized = True
            self._uninstall_exit_handlers()
            if self.backends is not None:
                while self._stack:
                    self._exit_region(self._stack[-1], None)
                if self._step_capture is not None and self._step is not None:
                    self._call("step_boundary", StepContext, None, capture=self._step_capture, step=self._step,
                               closes_capture=True)
                    self._step_capture = None
                self._step = None
                self._set_live(_NOTHING)
                self._call("finalize", FinalizeContext, None, capture=None, reason=reason,
                           profiled_steps=tuple(self._profiled_steps), relocate_results=self.config.global_.relocate_results)
            if self._finish is not None:
                self._finish.wait()
            if self._manifest is not None:
                self._manifest.write("finalized", reason=reason, artifacts=len(self.artifacts), errors=len(self.errors))
                self._manifest.close()
            return self.artifacts

    # ------------------------------------------------------------------ regions and iterations

    def _set_live(self, roles: frozenset) -> None:
        """Switch every region object to the live or idle class for the roles profiled now."""
        self._live = roles
        for spec in self._specs.values():
            spec.__class__ = _Region if spec.role in roles else _IdleRegion
            if not roles:
                spec._open.clear()

    def _enter_region(self, spec: _Region) -> _OpenRegion:
        with self._lock:
            schedule = self.plan.roles[spec.role].schedule
            state = _OpenRegion(spec, schedule)
            self._stack.append(state)
            if schedule is None:
                self._open_window(state, None)
            else:
                self._sampled = True
            return state

    def _exit_region(self, state: _OpenRegion, error: BaseException | None) -> None:
        with self._lock:
            stack = self._stack
            if stack and stack[-1] is state:
                stack.pop()
            elif state in stack:
                stack.remove(state)
            if state.window is not None:
                last = state.iteration if state.in_iteration else state.iteration - 1
                self._close_window(state, last, error)
            if state.schedule is not None:
                self._sampled = any(s.schedule is not None for s in stack)
                if state.iteration == 0 and not state.in_iteration and state.spec.region not in self._unmarked:
                    self._unmarked.add(state.spec.region)
                    log.warning(
                        "rlprof: region %s has a sampling schedule but marked no iterations, so nothing of it was "
                        "captured; wrap each micro-batch/decode step in `with prof.iteration():`", state.spec.region)

    def _iteration_enter(self) -> None:
        state = self._innermost_sampled()
        if state is None:
            return
        state.in_iteration = True
        if state.window is None and state.schedule.is_active(state.iteration):
            self._open_window(state, state.iteration)

    def _iteration_exit(self) -> None:
        state = self._innermost_sampled()
        if state is None:
            return
        index = state.iteration
        state.iteration += 1
        state.in_iteration = False
        if state.window is None:
            return
        if state.schedule.is_active(index + 1):
            capture = state.window if isinstance(state.window, Capture) else None
            self._call("step_boundary", StepContext, state.spec.role, capture=capture, step=self._step,
                       iteration=index, region=state.spec.region)
        else:
            self._close_window(state, index, None)

    def _innermost_sampled(self) -> _OpenRegion | None:
        for state in reversed(self._stack):
            if state.schedule is not None:
                return state
        return None

    def _open_window(self, state: _OpenRegion, first: int | None) -> None:
        spec, step = state.spec, self._step
        if self.plan.discrete:
            capture = self._new_capture(f"{steps_label((step,))}.{spec.region}", (step,), (spec.region,))
        else:
            capture = self._step_capture
        state.window = capture if capture is not None else True
        state.first = first if first is not None else 0
        iterations = None if first is None else (first, first)
        self._call("start_role", RoleContext, spec.role, capture=capture, step=step, role=spec.role,
                   region=spec.region, opens_capture=self.plan.discrete, iterations=iterations)

    def _close_window(self, state: _OpenRegion, last: int, error: BaseException | None) -> None:
        spec, step = state.spec, self._step
        capture = state.window if isinstance(state.window, Capture) else None
        iterations = (state.first, max(state.first, last)) if state.schedule is not None else None
        state.window = None
        self._call("stop_role", RoleContext, spec.role, capture=capture, step=step, role=spec.role, region=spec.region,
                   closes_capture=self.plan.discrete, iterations=iterations, error=error)

    # ------------------------------------------------------------------ plumbing

    def _new_capture(self, base: str, steps: tuple[int, ...], regions: tuple[str, ...]) -> Capture:
        count = self._capture_ids.get(base, 0)
        self._capture_ids[base] = count + 1
        capture_id = base if count == 0 else f"{base}.{count}"
        return Capture(
            capture_id=capture_id, steps=steps, regions=regions,
            directory=capture_directory(self.run.run_dir, capture_id, self.run.rank, self.run.host, self.run.pid),
        )

    def _call(self, hook: str, context_class: type, config_role: str | None, /, **fields: Any) -> None:
        """Call ``hook`` on every live backend, isolated (see Backends), each with its own context:
        ``context_class(**fields)`` plus the run, the backend's name and its validated tool_config for
        ``config_role`` (None: the process's first selected role, the owner of step-level captures)."""
        backends = self.backends
        configs = self.tool_configs.get(config_role or self._primary_role, {})
        for impl in backends.impls[hook]:
            backend = impl.backend
            if backend in backends.failed:
                continue
            ctx = context_class(run=self.run, backend=backend, tool_config=configs.get(backend, {}), **fields)
            result = backends.invoke(impl, hook, ctx)
            if result is not None or ctx._artifacts:
                self._collect(backend, ctx, result)

    def _collect(self, backend: str, ctx: HookContext, result: Any) -> None:
        produced = list(ctx._artifacts or ())
        if result is not None:
            items = [result] if isinstance(result, (str, os.PathLike)) else list(result)
            produced.extend((Path(p), "file", {}) for p in items)
        for path, kind, extra in produced:
            self._record_artifact(backend, ctx, Path(path), kind, extra)

    def _record_artifact(self, backend: str, ctx: HookContext, path: Path, kind: str, extra: dict) -> None:
        """One manifest line; what the file belongs to comes from the call's context (its capture's
        steps, else its step; its role, else the process's selected roles)."""
        capture = ctx.capture
        step = getattr(ctx, "step", None)
        steps = list(capture.steps) if capture else ([step] if step is not None else [])
        role = getattr(ctx, "role", None)
        iterations = getattr(ctx, "iterations", None)
        path = path if path.is_absolute() else (Path.cwd() / path)
        entry = {
            "backend": backend,
            "step": steps[0] if steps else None,
            "steps": steps,
            "roles": [role] if role else list(self.plan.selected_roles),
            "region": getattr(ctx, "region", None),
            "capture": capture.capture_id if capture else None,
            "mode": "discrete" if self.plan.discrete else "e2e",
            "iterations": list(iterations) if iterations else None,
            "world_size": self.run.world_size,
            "path": relative(path, self.run.run_dir),
            "size": path_size(path),
            "kind": kind,
            "outside_output_dir": not _is_within(path, self.run.run_dir),
            **extra,
        }
        if "step" in extra and "steps" not in extra:
            entry["steps"] = [] if extra["step"] is None else [extra["step"]]  # a backend naming its own step
        self.artifacts.append(entry)
        if self._manifest is not None:
            self._manifest.write("artifact", **entry)

    def _record_error(self, backend: str, hook: str, exc: BaseException) -> None:
        entry = {"backend": backend, "hook": hook, "error": f"{type(exc).__name__}: {exc}"}
        self.errors.append(entry)
        if self._manifest is not None:
            self._manifest.write("error", **entry)

    def _validate_tool_configs(self) -> None:
        for name in self.plan.selected_roles:
            role_cfg = self.config.roles[name]
            self.tool_configs[name] = {b: self.backends.validated_tool_config(b, role_cfg) for b in self.plan.tools}

    def _report_environment(self) -> None:
        """Ask each backend what it lacks here (no CUDA, no CANN...): warn once, keep it for the manifest."""
        for backend in self.plan.tools:
            problems = list(self.backends.call_one(backend, "check_environment") or [])
            if problems:
                self.environment[backend] = problems
            for problem in problems:
                log.warning("rlprof: backend %r on rank %d: %s", backend, self.run.rank, problem)

    # ------------------------------------------------------------------ process exit

    def _install_exit_handlers(self) -> None:
        atexit.register(self._at_exit)
        self._previous_sigterm = None
        if threading.current_thread() is threading.main_thread():
            try:
                self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
            except (ValueError, OSError):  # not allowed here (embedded interpreters)
                self._previous_sigterm = None

    def _uninstall_exit_handlers(self) -> None:
        atexit.unregister(self._at_exit)
        previous = getattr(self, "_previous_sigterm", None)
        if previous is not None and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                    signal.signal(signal.SIGTERM, previous)
            except (ValueError, OSError):
                pass

    def _at_exit(self) -> None:
        self.finalize(reason="exit")

    def _on_sigterm(self, signum, frame) -> None:
        previous = self._previous_sigterm
        self.finalize(reason="signal")
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def _is_within(path: Path, root: Path) -> bool:
    """Lexically (no file-system calls: this runs for every artifact): is ``path`` under ``root``?"""
    path_text, root_text = os.path.normpath(path), os.path.normpath(root)
    return path_text == root_text or path_text.startswith(root_text + os.sep)


def _schedule_dict(schedule) -> dict[str, int]:
    from dataclasses import asdict

    return asdict(schedule)
