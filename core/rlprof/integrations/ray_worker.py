"""In the worker: the mixin a Ray actor class inherits to own its rank's Profiler.

The actor's own training methods wrap work in ``self.profiler.role(role, stage)`` and
``self.profiler.iteration()``; the controller (:class:`~rlprof.integrations.ray.ProfilingController`)
calls the ``rlprof_*`` methods. Every reply the controller asks for with ``send_manifest`` carries
the manifest lines written since the last one (:mod:`rlprof.integrations.nodes`), and the gathering
methods of :class:`~rlprof.integrations.gather.RunFiles` serve this worker's run files.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from rlprof.config.schema import load_config
from rlprof.integrations.gather import RunFiles
from rlprof.integrations.nodes import ManifestCursor, Sent, batch_of, current_node, node_save_path
from rlprof.integrations.ray_options import ProfilerArgs


class ProfiledWorker(RunFiles):
    """Mixin for a Ray actor class hosting roles on one rank: it owns that rank's Profiler.

    The controller calls the ``rlprof_*`` methods (through :class:`~rlprof.ray.ProfilingController`);
    the worker's own methods use ``self.profiler.role(role, stage)`` and ``self.profiler.iteration()``.
    Before :meth:`rlprof_setup` ``self.profiler`` is a Profiler that profiles nothing, so the
    training code runs the same with profiling off.
    """

    _rlprof_profiler = None
    _rlprof_cursor = None
    _rlprof_node_hook = None

    @property
    def profiler(self):
        if self._rlprof_profiler is None:
            from rlprof.runtime.profiler import Profiler

            self._rlprof_profiler = Profiler(None)
        return self._rlprof_profiler

    def rlprof_setup(
        self,
        config: Any,
        *,
        run_id: str | None = None,
        overrides: Iterable[str] = (),
        backends: Mapping[str, Any] | None = None,
        send_manifest: bool = False,
        **place: Any,
    ) -> Any:
        """Build this rank's Profiler where ``place`` (:class:`ProfilerArgs`: rank, world_size, roles,
        ...) puts it; returns :meth:`rlprof_info`. ``backends`` maps names to backend instances or
        classes (instantiated here), replacing entry points (tests). ``send_manifest`` (the
        controller sets it on every call): the reply is a :class:`~rlprof.integrations.nodes.Sent`
        carrying the manifest lines written since the last reply, so the controller's run directory
        holds every node's records."""
        from rlprof.runtime.profiler import Profiler

        args = ProfilerArgs(**place)
        if self._rlprof_profiler is not None:
            self._rlprof_profiler.finalize(reason="replaced")
        loaded = load_config(config, overrides)  # the one reading of the config in this process; all else reads this
        here = node_save_path()
        if here is not None:  # this node writes under its own root (rlprof.integrations.nodes)
            loaded = loaded.with_overrides(save_path=here)
        instances = None if backends is None else {n: b() if isinstance(b, type) else b for n, b in backends.items()}
        self._rlprof_profiler = Profiler(loaded, **args.profiler_kwargs(), run_id=run_id, backends=instances)
        from rlprof.integrations.step_mailbox import send_to_driver

        send_to_driver(self._rlprof_profiler)  # its timings of every step: to the controller's step metrics
        self._rlprof_profiler.driven = True  # the controller decides unplanned captures and says so at start_step
        self._rlprof_cursor = None
        return self._rlprof_reply(self.rlprof_info(), send_manifest)

    def rlprof_info(self) -> dict[str, Any]:
        """Where this worker runs and what it profiles (for the controller's reports)."""
        prof = self.profiler
        return {
            "rank": prof.run.rank,
            "host": prof.run.host,
            "pid": prof.run.pid,
            "active": prof.active,
            "selected_roles": list(prof.plan.selected_roles),
            "run_dir": str(prof.run.run_dir),
            "node": current_node(),
            "manifest": str(prof.manifest_path) if prof.manifest_path is not None else None,
        }

    def rlprof_start_step(self, step: int, reason: str | None = None) -> None:
        """Step ``step`` begins; ``reason``: the controller captures it though no plan named it, and why."""
        if reason is not None:
            self.profiler.capture((step,), reason)
        self.profiler.start_step(step)

    def rlprof_step_boundary(self, send_manifest: bool = False) -> Any:
        self.profiler.step_boundary()
        return self._rlprof_reply(None, send_manifest)

    def rlprof_finalize(self, reason: str = "end", send_manifest: bool = False) -> Any:
        """Finalize this rank's Profiler; returns its artifact records."""
        # a Ray actor ends when its owner does: it never waits for its last traces' analysis, which may outlive it
        return self._rlprof_reply(self.profiler.finalize(reason, wait_for_analysis=False), send_manifest)

    def _rlprof_run_dir(self):
        return self.profiler.run.run_dir

    def rlprof_exit(self) -> None:
        """End this worker's process (after ``finalize``): tools that write at exit (nsys) write now."""
        import ray

        ray.actor.exit_actor()

    def rlprof_start_finish_hook(self, command: str, node_env: Mapping[str, str]) -> None:
        """Start ``finish_hook_cmd`` for this worker's whole node (the controller picked this worker:
        :func:`~rlprof.integrations.nodes.finish_hook_runners`), in a background thread, with this
        rank's usual environment plus ``node_env``; returns at once, so training calls are not held up."""
        from rlprof.runtime.finish_hook import FinishHook

        prof = self.profiler
        config = prof.config.with_overrides(finish_hook_cmd=command, finish_hook_all_ranks=True)
        hook = FinishHook.for_process(config, prof.plan, prof.run)
        if hook is None:
            return
        hook.env.update(node_env)
        hook.synchronous = False
        self._rlprof_node_hook = hook
        hook.start()

    def rlprof_wait_finish_hook(self) -> int | None:
        """Wait for the node's finish hook (at most :func:`~rlprof.runtime.finish_hook.wait_limit_s`);
        its exit status."""
        hook = self._rlprof_node_hook
        if hook is None:
            return None
        hook.wait()
        return hook.returncode

    def _rlprof_reply(self, value: Any, send_manifest: bool) -> Any:
        if not send_manifest:
            return value
        path = self.profiler.manifest_path
        if path is None:
            return Sent(value, None)
        if self._rlprof_cursor is None or self._rlprof_cursor.path != path:
            self._rlprof_cursor = ManifestCursor(path)
        return Sent(value, batch_of(self.profiler, self._rlprof_cursor))
