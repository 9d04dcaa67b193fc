"""Seconds read from an environment variable: the one parser of the time limits rlprof takes from the environment.

Four limits are set that way (``RLPROF_HOOK_TIMEOUT_S``, the hook watchdog's; ``RLPROF_FINISH_HOOK_TIMEOUT``,
how long ``finalize`` waits for the finish hook; ``RLPROF_TORCH_WRITE_TIMEOUT_S``, how long the torch backend's
``finalize`` waits for traces still being written; ``RLPROF_TRACKER_WAIT_S``, how long verl's logger waits for a
step's timings). Each owner keeps what its value means (its default, what ``0`` does); reading the text is here,
so all read alike: unset or blank is the default, anything but a
finite number (at least ``minimum`` where one is given) is refused with the one message every config error
has, naming the variable, the value and what is allowed (:func:`rlprof.errors.fail`). Where a refusal must
not raise (``finalize`` runs at exit), :func:`seconds_or_default` says it once and uses the default.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Mapping

from rlprof.errors import ConfigError, fail
from rlprof.notices import say_once

log = logging.getLogger("rlprof")


def seconds_from_env(name: str, default: float, allowed: str, *, minimum: float | None = None,
                     environ: Mapping[str, str] | None = None) -> float:
    """The number of seconds in ``name`` (``default`` when unset or blank).

    :param allowed: what the variable may hold, for the error (e.g. ``"a number of seconds >= 0"``).
    :raises ConfigError: not a finite number, or below ``minimum``; ``key`` is ``name``."""
    text = (os.environ if environ is None else environ).get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        raise fail(name, text, allowed)
    return value


def seconds_or_default(name: str, default: float, allowed: str, *, minimum: float | None = None,
                       environ: Mapping[str, str] | None = None, logger: logging.Logger = log) -> float:
    """:func:`seconds_from_env`, where a refused value is said once on ``logger`` and ``default`` used instead."""
    try:
        return seconds_from_env(name, default, allowed, minimum=minimum, environ=environ)
    except ConfigError as exc:
        say_once(f"env seconds: {exc}", logger, "rlprof: %s; using the default %g s", exc, default)
        return default
