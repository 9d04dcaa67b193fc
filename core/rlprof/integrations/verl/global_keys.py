"""rlprof's own ``global_profiler`` keys, from verl's trainer to every profiling process of the run.

Why: verl hands a worker (and a rollout replica's server) its role's ``profiler`` section only. verl's
config interpolates into it the ``global_profiler`` keys verl knows (``tool``, ``save_path``,
``relocate_results``, ``finish_hook_*``: the keys :mod:`rlprof.config.sections` declares ``mirrored``),
so those reach every worker. The keys rlprof adds to ``global_profiler`` (``capture_budget_mb``,
``run_budget_gb``, ``discrete``, ...) reach none that way: written on verl's command line
(``+global_profiler.capture_budget_mb=1``) they were dropped, and the run captured every step at full
size, without a word.

So, wherever verl's trainer is built (the classes of :data:`TRAINERS`, whose ``__init__`` runs in verl's
``TaskRunner`` actor before any worker or replica exists), :func:`hand_on` reads :func:`carried_keys` from
the trainer's config, checks them with rlprof's own readers (a bad value stops the run there, before
training, naming the key, the value and what is allowed) and puts them in Ray's key-value store under
the run (``<run>/global``, :mod:`rlprof.integrations.verl.run_signals`), which every node reads. Every
``DistProfiler`` built afterwards, rollout replicas included, reads them (:func:`received`) into its
``global_profiler`` section (:func:`rlprof.integrations.verl.sections.rlprof_source`). A key that cannot
reach the workers (the trainer's process is not connected to Ray), or that the drop-in cannot honour
(``gather: traces``: nothing gathers under verl), refuses the run the same way.

Which keys: every key :class:`~rlprof.config.sections.GlobalConfig` declares, but those verl hands each
worker itself (the mirrored ones) and those verl's trainer acts on itself (:data:`TRAINER_ACTS_ON`). A key
rlprof declares later is carried with no change here.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from rlprof.config.fields import VERL_MARKER, keys_of, mirrored_keys
from rlprof.config.sections import GlobalConfig
from rlprof.errors import ConfigError, fail
from rlprof.integrations.verl import on_import, run_signals
from rlprof.integrations.verl.run_id import shared_run_id
from rlprof.integrations.verl.sections import field, plain
from rlprof.integrations.verl.trainer_steps import TRAINERS

log = logging.getLogger("rlprof")

TRAINER_ACTS_ON = ("steps", "profile_continuous_steps", "global_tool_config")
"""``global_profiler`` keys of verl's own that its trainer acts on itself, so no worker reads them: it
decides the profiled steps and when a run of continuous steps starts and stops (a worker's Profiler takes
every ``start`` as a profiled step, ``caller_steps``), and its config interpolates the ``global_tool_config``
settings it knows into each role's ``tool_config`` (docs/verl.md, "Nsight Systems on the CPU", says what
that leaves out)."""


def carried_keys() -> frozenset[str]:
    """The ``global_profiler`` keys the trainer hands on to every worker (see the module doc)."""
    return keys_of(GlobalConfig) - mirrored_keys(GlobalConfig) - set(TRAINER_ACTS_ON) - {VERL_MARKER}


def hand_on(config: Any) -> dict[str, Any]:
    """In the process that builds verl's trainer, before any worker exists: the :func:`carried_keys` set in
    the trainer's ``global_profiler`` (``config`` is the trainer's whole config), checked, and put in Ray's
    key-value store for every profiling process of the run; returns them. Always writes, an empty section
    included, so a run id reused on a long-lived cluster never hands on an earlier run's keys.

    :raises ConfigError: a bad value, a value the drop-in cannot honour, or keys set where they cannot
        reach the workers; each names the key.
    """
    section = field(config, "global_profiler")
    keys = {}
    for key in sorted(carried_keys()):
        value = field(section, key)
        if value is not None:
            keys[key] = plain(value)
    if keys:
        from rlprof.config.schema import load_config

        loaded = load_config({"global_profiler": keys})  # a bad value: the run stops here, naming it
        if loaded.global_.gather != "none":
            raise fail("global_profiler.gather", keys["gather"],
                       "none under verl's trainer (nothing gathers there: each node keeps its files, and the manifest "
                       "names the node and path of each)")
    shared = shared_run_id()
    published = shared is not None and run_signals.publish_global(_run_id(shared), keys)
    if keys and not published:
        key = next(iter(keys))
        raise ConfigError(
            f"global_profiler.{key}: got {keys[key]!r}, but rlprof cannot hand it to verl's workers: the process "
            "building verl's trainer is not connected to Ray; allowed: build the trainer inside Ray (as verl's main_ppo "
            "does, in its TaskRunner), or leave the key out", key=f"global_profiler.{key}", value=keys[key])
    return keys


def received() -> dict[str, Any] | None:
    """In a profiling process: the keys the trainer handed on for this process's run, or None (outside
    Ray; a run whose trainer is not one of :data:`TRAINERS`)."""
    shared = shared_run_id()
    if shared is None:
        return None
    keys = run_signals.global_section(_run_id(shared))
    if keys is None:
        return None
    carried = carried_keys()
    return {k: v for k, v in keys.items() if k in carried}


def _run_id(shared: str) -> str:
    from rlprof.runtime.run_id import run_id_for

    return run_id_for(shared)


# ------------------------------------------------------------------ where the trainer is built


def watch() -> None:
    """Hand on the keys from each trainer class's ``__init__`` once its module is imported (never imported here)."""
    on_import.patch_classes(TRAINERS, wrap)


def forget() -> None:
    """Leave the trainers' ``__init__`` as verl wrote them (``rlprof.verl.uninstall``)."""
    on_import.unpatch_classes(TRAINERS, unwrap)


def wrap(trainer: Any) -> None:
    """``trainer`` (a class) hands on the keys at the end of its own ``__init__`` (wrapped once). A
    subclass's ``__init__`` that calls its base's hands them on there, before it builds any worker."""
    init = vars(trainer).get("__init__") if trainer is not None else None
    if init is None or getattr(init, "rlprof_wrapped", False):
        return

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            hand_on(getattr(self, "config", None))
        except ConfigError:
            raise  # the run is refused before training, naming the key
        except Exception as exc:  # anything else is rlprof's own failure: never the trainer's
            log.error("rlprof: global_profiler keys not handed on to verl's workers: %s: %s", type(exc).__name__, exc)

    __init__.rlprof_wrapped = True
    trainer.__init__ = __init__


def unwrap(trainer: Any) -> None:
    """Put ``trainer``'s own ``__init__`` back."""
    init = vars(trainer).get("__init__") if trainer is not None else None
    if getattr(init, "rlprof_wrapped", False):
        trainer.__init__ = init.__wrapped__
