"""The engine contract: how rlprof drives an inference engine's own profiler (agent-loop rollout).

In agent-loop mode rollout runs inside inference-engine replicas (vLLM, SGLang), each its own process.
rlprof does not run a profiler of its own there: the engine's profiler captures, triggered from
outside, the way verl triggers it. The core still decides everything (which replicas, which steps,
discrete only, the token window) and afterwards moves what the engine wrote into rlprof's layout and
manifest. What differs between engines — how settings are spelled, how a capture is started and
stopped, which files a capture wrote, which exception means the engine is gone — is an **engine
adapter**, found like a backend: by name, in the entry-point group :data:`GROUP`::

    [project.entry-points."rlprof.engines"]
    myengine = "my_package.engine:MyEngine"

An adapter is a class (instantiated without arguments) or an object with the attributes and methods
of :class:`EngineAdapter`. It declares the contract it was written for (``rlprof_contract = 1``); it is
loaded by the same loader and rule as a backend (:mod:`rlprof.plugins`): a contract the core no longer
speaks is refused when the adapter loads, none declared is taken as the current one and said once
(docs/migration.md). Adapters must import their engine lazily: ``settings`` is called where the
engine may not be installed (``rlprof check``).

The core calls an adapter in this order, for one replica:

1. ``settings(request)`` once, before the engine is built: what to merge into the engine's
   constructor arguments, and warnings for the seed guide's per-engine limits (each names the key);
2. per selected generate call: ``start(engine, capture)``, the engine generates, ``stop(engine,
   capture)``; both may return an awaitable (an async engine), which the caller awaits;
3. after ``stop``: ``written(capture)``, the files this capture produced, which the core moves into the
   run's layout and lists in the manifest with the replica rank;
4. on any exception from ``start``/``stop``: ``lost(exc)`` says whether the engine is gone (the capture
   is lost, an error record says so, no further capture is attempted on this replica) or the call
   merely failed (an error record; the next step tries again). Training goes on either way.

**Request records, optional** (:class:`RequestSource`; no contract bump: an adapter without them works as
before, and its replica has no request records). An adapter that has both methods supplies a record of every
request its engine served, on every step whose rollout is timed, profiled or not (issue 48):

5. ``request_kwargs()`` once, before the engine is built, wherever the rollout is timed: what to merge into the
   engine's constructor arguments so that it keeps per-request stats (vLLM: ``disable_log_stats=False``);
   ``request_engine(engine)``, optional within the optional part, once the engine is built (the first time the
   replica is handed it: ``start``/``start_async``): what the constructor cannot say (vLLM: the stat loggers that
   log stats also start are dropped, the stats kept);
6. ``requests(outputs, context)`` after each generate call (or each finished request of an async engine), with
   the engine's outputs as its caller got them: one :class:`~rlprof.request_records.RequestRecord` per finished
   request, its times mapped with ``context.clock`` (:class:`~rlprof.request_records.EngineClock`); the core
   fills in the replica and step, checks the clock mapping and hands the records on to the run's driver. Pure:
   no I/O, about a microsecond or two a request (bench/bench_request_records.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Awaitable, Iterable, Mapping, Protocol, runtime_checkable

from rlprof import installed, plugins
from rlprof.errors import BackendError
from rlprof.request_records import EngineClock, RequestRecord

GROUP = "rlprof.engines"
"""The entry-point group engine adapters are found in."""

CONTRACT = 1
"""The engine contract this core speaks. A change that breaks adapters bumps it (docs/migration.md)."""
SUPPORTED_CONTRACTS = (1,)

PREFIX_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""What a capture prefix looks like: safe as a file name part on every engine (vLLM validates the same
alphabet for ``profile_prefix``)."""


@dataclass(frozen=True)
class EngineRequest:
    """What the core decided for one replica, before its engine is built.

    ``tool`` is the backend the user selected for rollout (``"torch"`` or ``"npu"``): the engine's own
    profiler stands in for it, configured from that backend's validated ``tool_config`` section
    (``contents``: torch ``cpu``/``cuda``/``shapes``/``stack``/``memory``/``module``; npu adds ``npu``,
    and ``level``/``analysis``). ``directory`` is absolute, created and checked writable by the core;
    the engine writes every capture of this replica there. ``window`` is the token window
    (``profile_token_start``/``profile_token_end``) as the engine's ``(delay_iterations,
    max_iterations)``, counted in engine steps, or None: the whole generate call."""

    tool: str
    contents: tuple[str, ...]
    tool_config: Mapping[str, Any]
    directory: str
    window: tuple[int, int] | None = None
    config_key: str = "actor_rollout_ref.rollout.profiler"
    """Where the rollout's profiler section lives; warnings name keys under it."""


@dataclass(frozen=True)
class EngineSettings:
    """An adapter's answer to :meth:`EngineAdapter.settings`."""

    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Merged into the engine's constructor arguments (vLLM: ``{"profiler_config": {...}}``)."""
    warnings: tuple[tuple[str, str], ...] = ()
    """``(config key, message)`` for each setting the engine cannot honour (the seed guide's limits:
    vLLM ignores ``analysis`` and the level; SGLang has no ``memory`` content)."""


@dataclass(frozen=True)
class EngineCapture:
    """One capture: handed to ``start``, ``stop`` and ``written``. ``prefix`` is unique within the
    run's replica (e.g. ``step3_replica1``) and matches :data:`PREFIX_PATTERN`."""

    prefix: str
    directory: str
    request: EngineRequest
    window: tuple[int, int] | None = None


@runtime_checkable
class EngineAdapter(Protocol):
    """What an engine adapter provides (see the module doc for when each is called)."""

    name: str
    rlprof_contract: int

    def settings(self, request: EngineRequest) -> EngineSettings:
        """Construction-time settings for ``request``. Pure: no engine import, no files."""

    def start(self, engine: Any, capture: EngineCapture) -> Awaitable[None] | None:
        """Start the engine's profiler for ``capture`` (its prefix, its window)."""

    def stop(self, engine: Any, capture: EngineCapture) -> Awaitable[None] | None:
        """Stop it. When this returns (or its awaitable completes) the engine has written, or never will."""

    def written(self, capture: EngineCapture) -> list[Path]:
        """The files in ``capture.directory`` (or below it) that ``capture`` produced, oldest first."""

    def lost(self, exc: BaseException) -> bool:
        """True when ``exc`` (raised by ``start`` or ``stop``) means the engine is dead."""


@dataclass(frozen=True)
class RequestContext:
    """What the core hands an adapter's ``requests``: whose requests they are and the clock to map them with."""

    replica: int
    """The replica's rank: every record's ``replica``."""
    step: int | None
    """The step (an async run's version) the replica is in, or None (the driver gives each its step by its arrival)."""
    clock: EngineClock
    """The engine's monotonic clock mapped to the run's (``clock.monotonic(ts)``; ``clock.wall(ts)`` for a
    wall-clock time)."""


@runtime_checkable
class RequestSource(Protocol):
    """The optional part of an adapter that supplies request records (see the module doc, steps 5 and 6)."""

    def request_kwargs(self) -> Mapping[str, Any]:
        """Engine constructor arguments that make the engine keep per-request stats. Pure."""

    def requests(self, outputs: Any, context: RequestContext) -> Iterable[RequestRecord]:
        """A record per finished request in ``outputs`` (what the engine's generate call returned)."""


REQUEST_METHODS = ("request_kwargs", "requests")
"""The optional methods of :class:`RequestSource`: an adapter has both, or supplies no records (``request_engine``,
once the engine is built, is optional besides)."""


def request_source(adapter: Any) -> RequestSource | None:
    """``adapter`` when it supplies request records (both :data:`REQUEST_METHODS` callable), else None."""
    return adapter if all(callable(getattr(adapter, name, None)) for name in REQUEST_METHODS) else None


def discover() -> dict[str, metadata.EntryPoint]:
    """Installed engine adapters by name; reads metadata only, imports nothing."""
    return installed.discover(GROUP)


KIND = plugins.Kind("engine adapter", GROUP, "rollout engine", CONTRACT, SUPPORTED_CONTRACTS, "engine contract",
                    required=("settings", "start", "stop", "written", "lost"))
"""How the one plugin loader (:mod:`rlprof.plugins`) loads an adapter: its own contract number, the
methods of :class:`EngineAdapter` required."""


def load_engine(name: str, eps: Mapping[str, metadata.EntryPoint] | None = None) -> Any:
    """The adapter ``name``, loaded by the one plugin loader (guarded import, the contract rule, the
    required methods, one message shape naming the distribution and version) and instantiated.

    :raises BackendError: not installed, the import failed, a method is missing, or a contract this
        core does not speak (:class:`rlprof.plugins.ContractRefused`)."""
    eps = discover() if eps is None else eps
    if name not in eps:
        raise BackendError(f"rollout engine: got {name!r}, but no installed engine adapter has that name. "
                           f"Installed: {', '.join(sorted(eps)) or '(none)'} (entry-point group {GROUP})",
                           key="rollout engine")
    return plugins.load(KIND, name, eps[name]).obj
