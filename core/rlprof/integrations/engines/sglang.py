"""The SGLang engine adapter: drives SGLang's own torch profiler for rlprof (agent-loop rollout).

Written against the sglang 0.5.23 wheel's source and checked against it by
``tests/integrations/test_engine_sglang.py`` (``ast``; SGLang has no CPU build, so it never runs here).
The facts it relies on (docs/engines-sglang-notes.md has the details and where each was read):

- SGLang takes its profiler settings per session, not at start: ``Engine.start_profile(**kwargs)``
  (sync, offline engine) builds a ``ProfileReq`` from the keywords; ``TokenizerManager.start_profile``
  (async, what verl's ``SGLangHttpServer`` holds) takes a ``ProfileReq`` in 0.5.23 and the same keywords
  in 0.5.12 (verl 0.9.1's pin). ``stop_profile()`` takes nothing. So ``settings`` has no engine arguments.
- Keywords used, valid in both releases: ``output_dir``, ``activities`` (``"CPU"``, ``"GPU"``; on Ascend
  ``"GPU"`` is patched to the NPU activity), ``with_stack``, ``record_shapes`` (both default to *on* in
  SGLang, so they are always passed explicitly), ``profile_prefix``, ``start_step``, ``num_steps``.
  ``profile_id`` is not passed: 0.5.12's tokenizer manager does not accept it.
- Each capture gets its own ``output_dir`` (``capture.directory/<prefix>``): on Ascend SGLang writes
  through ``tensorboard_trace_handler``, which ignores the prefix.
- The scheduler writes ``[<profile_prefix>-]<profile_id>-TP-<tp>[-DP-<dp>][-PP-<pp>][-EP-<ep>][-<STAGE>]
  .trace.json.gz`` at stop (or when ``num_steps`` forwards have run); ``profile_id`` is ``str(time.time())``.
- ``start_step`` is the scheduler's forward count *since the engine started*, and the capture begins at
  ``max(start_step, count + 1)``; it then lasts exactly ``num_steps`` forwards. The token window is
  therefore exact on a fresh engine only; later captures start at the first forward (a warning says so).
  A window that closed by itself makes the later ``stop_profile`` raise "not in progress": that means done.
- ``memory`` has no counterpart (SGLang's ``MEM`` activity is a CUDA allocator snapshot, not torch's
  ``profile_memory``; the seed guide and verl both drop it): a warning naming the key.

Request records (the contract's optional part, :meth:`SglangEngine.requests`), from each response's ``meta_info``
(the tokenizer manager's ``_handle_batch_output``, both releases): ``id``, ``prompt_tokens``, ``completion_tokens``,
``finish_reason`` (``{"type": "length", ...}``), ``num_retractions`` (a retracted request is SGLang's preemption)
always; the times only with ``enable_metrics`` on (``ServerArgs.enable_metrics``, what :meth:`SglangEngine.request_kwargs`
asks for), every one already wall-clock (SGLang converts its ``perf_counter`` stamps with ``convert_time_to_realtime``):
``request_received_ts`` (arrival), the scheduler's ``forward_entry_time`` (first scheduled) and ``queue_time``
(its wait queue, so queued = scheduled - queue_time), ``prefill_finished_time`` (first token; 0.5.23 also gives
``first_token_latency`` after arrival, preferred), ``request_finished_ts`` (last token).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any, Awaitable, Iterable, Mapping

from rlprof.integrations.engines.contract import EngineCapture, EngineRequest, EngineSettings, RequestContext
from rlprof.request_records import RequestRecord

TRACE_SUFFIX = ".trace.json.gz"
PARALLEL_PARTS = ("DP", "PP", "EP")
"""The rank parts SGLang appends after ``TP-<n>``, in this order, only when that parallel size is > 1."""
STAGES = ("EXTEND", "DECODE")
"""``ForwardMode`` names SGLang appends with ``profile_by_stage`` (not used by rlprof, still recognised)."""

NPU_LEVEL = "level1"
"""SGLang 0.5.23 starts torch_npu's profiler with ``ProfilerLevel.Level1`` and an analysing
``tensorboard_trace_handler``, whatever the user's npu section says."""

NOT_IN_PROGRESS = "Profiling is not in progress"
"""How the scheduler's answer to ``stop_profile`` begins when no session runs; the tokenizer manager
raises it as a ``RuntimeError``. After a window of ``num_steps`` closed by itself (the trace is already
written) that is the expected answer, not a failure."""

STOP_TIMEOUT_S = 600.0
"""How long an awaited ``stop_profile`` may take before the engine counts as gone: SGLang's own gRPC
front end gives the same call 600 s; its tokenizer manager waits forever on a dead scheduler."""


def trace_name_pattern(prefix: str) -> re.Pattern[str]:
    """The names SGLang gives the torch traces of a session started with ``profile_prefix=prefix``."""
    ranks = "".join(f"(?:-{part}-\\d+)?" for part in PARALLEL_PARTS)
    stage = "(?:-(?:" + "|".join(STAGES) + "))?"
    return re.compile(f"^{re.escape(prefix)}-(?P<profile_id>.+?)-TP-(?P<tp>\\d+){ranks}{stage}"
                      f"{re.escape(TRACE_SUFFIX)}$")


class SglangEngine:
    """rlprof's adapter for SGLang (``Engine`` offline, or the ``TokenizerManager`` verl's server holds)."""

    name = "sglang"
    rlprof_contract = 1

    def settings(self, request: EngineRequest) -> EngineSettings:
        """No engine arguments (SGLang's profiler is configured per session); warnings for what SGLang
        cannot honour, each naming its key."""
        section = f"{request.config_key}.tool_config.{request.tool}"
        warnings: list[tuple[str, str]] = []
        if "memory" in request.contents:
            warnings.append((f"{section}.contents",
                             "SGLang's profiler has no 'memory' content; the engine traces hold no memory events"))
        if request.tool == "npu":
            level = request.tool_config.get("level")
            if level is not None and level != NPU_LEVEL:
                warnings.append((f"{section}.level", f"SGLang records at {NPU_LEVEL} whatever the level; "
                                                     f"{level!r} applies to the training roles only"))
            if request.tool_config.get("analysis") is False:
                warnings.append((f"{section}.analysis", "SGLang parses each engine capture when it ends "
                                                        "(analysis on); analysis: false applies to the training roles only"))
        if request.window is not None:
            warnings.append((f"{section}.profile_token_start",
                             "SGLang counts start_step from the engine's start: the token window starts where "
                             "asked on the engine's first capture only; later captures start at their first "
                             "engine step and still last profile_token_end - profile_token_start steps"))
        return EngineSettings(warnings=tuple(warnings))

    def start(self, engine: Any, capture: EngineCapture) -> Awaitable[Any] | None:
        """``start_profile`` with this capture's directory, prefix, contents and window."""
        kwargs = self.profile_arguments(capture)
        method = engine.start_profile
        if not inspect.iscoroutinefunction(method):
            method(**kwargs)
            return None
        if "req" in inspect.signature(method).parameters:
            return method(_profile_request(kwargs))
        return method(**kwargs)

    def stop(self, engine: Any, capture: EngineCapture) -> Awaitable[Any] | None:
        """``stop_profile()``; an awaited one is bounded by :data:`STOP_TIMEOUT_S`. With a window, the
        scheduler may have closed the session itself: its "not in progress" answer then means done."""
        method = engine.stop_profile
        if inspect.iscoroutinefunction(method):
            return self._stopped_async(method, capture)
        try:
            method()
        except RuntimeError as exc:
            if not self._closed_by_window(exc, capture):
                raise
        return None

    async def _stopped_async(self, method: Any, capture: EngineCapture) -> None:
        try:
            await asyncio.wait_for(method(), STOP_TIMEOUT_S)
        except RuntimeError as exc:
            if not self._closed_by_window(exc, capture):
                raise

    @staticmethod
    def _closed_by_window(exc: RuntimeError, capture: EngineCapture) -> bool:
        return capture.window is not None and str(exc).startswith(NOT_IN_PROGRESS)

    def written(self, capture: EngineCapture) -> list[Path]:
        """The traces SGLang wrote for ``capture`` (its own output directory), oldest first; on Ascend
        also the files of the ``*_ascend_pt`` folders torch_npu's handler wrote there."""
        directory = self.output_dir(capture)
        if not directory.is_dir():
            return []
        pattern = trace_name_pattern(capture.prefix)
        found = [p for p in directory.iterdir() if p.is_file() and pattern.match(p.name)]
        if capture.request.tool == "npu":
            found += [p for d in directory.glob("*_ascend_pt") if d.is_dir() for p in d.rglob("*") if p.is_file()]
        return sorted(found, key=lambda p: (p.stat().st_mtime_ns, str(p)))

    def lost(self, exc: BaseException) -> bool:
        """Gone: the connection to the scheduler broke (zmq, OS pipes), the engine's event loop was
        closed by ``shutdown``, or an awaited stop timed out. A ``RuntimeError`` carrying the scheduler's
        answer ("Profiling is already in progress", "… not in progress") is a failed call, not a dead engine."""
        if isinstance(exc, (ConnectionError, EOFError, TimeoutError, asyncio.TimeoutError)):
            return True
        if type(exc).__module__.split(".")[0] == "zmq":
            return True
        return isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc)

    @staticmethod
    def output_dir(capture: EngineCapture) -> Path:
        """Where SGLang writes ``capture``: a folder of its own under the replica's directory."""
        return Path(capture.directory) / capture.prefix

    @classmethod
    def profile_arguments(cls, capture: EngineCapture) -> dict[str, Any]:
        """The keywords of ``start_profile`` for ``capture`` (all of them ``ProfileReq`` fields)."""
        contents = capture.request.contents
        device = "npu" if capture.request.tool == "npu" else "cuda"
        activities = ["CPU"]
        if not contents or device in contents:
            activities.append("GPU")
        kwargs: dict[str, Any] = {
            "output_dir": str(cls.output_dir(capture)),
            "activities": activities,
            "with_stack": "stack" in contents or "module" in contents,
            "record_shapes": "shapes" in contents,
            "profile_prefix": capture.prefix,
        }
        if capture.window is not None:
            delay, steps = capture.window
            # start_step 0 means "not set" to SGLang (and starts at once without the +1 that makes
            # num_steps exact in 0.5.12); 1 starts at the next forward in both releases, as vLLM's delay 0/1.
            kwargs["start_step"] = max(delay, 1)
            kwargs["num_steps"] = steps
        return kwargs

    # ------------------------------------------------------------------ request records (optional)

    def request_kwargs(self) -> Mapping[str, Any]:
        """SGLang puts its requests' times into ``meta_info`` only with ``enable_metrics`` on."""
        return {"enable_metrics": True}

    def requests(self, outputs: Any, context: RequestContext) -> list[RequestRecord]:
        """A record per finished response of ``outputs`` (``Engine.generate``'s dict or list of dicts, or the
        tokenizer manager's last dict per request), from its ``meta_info`` (see the module doc)."""
        wall = context.clock.wall
        out = []
        for response in [outputs] if isinstance(outputs, Mapping) else outputs:
            meta = response.get("meta_info") or {}
            reason = meta.get("finish_reason")
            if reason is None:
                continue  # not finished (a streamed chunk)
            arrival = meta.get("request_received_ts")
            scheduled = meta.get("forward_entry_time")
            queue = meta.get("queue_time")
            latency = meta.get("first_token_latency")
            first = arrival + latency if arrival and latency is not None else meta.get("prefill_finished_time")
            out.append(RequestRecord(
                str(meta.get("id")), context.replica, context.step, wall(arrival),
                wall(scheduled - queue) if scheduled and queue is not None else None, wall(scheduled), wall(first),
                wall(meta.get("request_finished_ts")), meta.get("prompt_tokens"), meta.get("completion_tokens"),
                reason.get("type") if isinstance(reason, Mapping) else str(reason), meta.get("num_retractions")))
        return out


def _profile_request(kwargs: dict[str, Any]) -> Any:
    """0.5.23's ``TokenizerManager.start_profile`` takes a request object; it lives in the engine's
    process, so sglang is importable wherever this is called."""
    from sglang.srt.managers.io_struct import ProfileReq, ProfileReqType

    return ProfileReq(req_type=ProfileReqType.START_PROFILE, **kwargs)
