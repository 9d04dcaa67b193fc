"""pytest plugin for backend authors (registered through the ``pytest11`` entry point, so every
test session of an environment where rlprof is installed has these fixtures; nothing to import).

``rlprof_run``
    Run a backend through a real :class:`~rlprof.Profiler` over a scripted training loop and get
    back a :class:`~rlprof.testing.scenario.BackendRun` (the Profiler, the manifest records, the
    backend's artifacts and hook errors, the exception that reached the trainer)::

        def test_discrete_writes_one_trace_per_region(rlprof_run):
            run = rlprof_run("mybackend", mode="discrete", steps=(1,), roles=("actor", "ref"))
            assert not run.errors
            assert {a["region"] for a in run.artifacts} == {"actor_update", "ref_compute_log_prob"}

    Keyword arguments are the fields of :class:`~rlprof.testing.scenario.Scenario` (``mode``,
    ``steps``, ``roles``, ``schedule``, ``iterations``, ``continuous``, ``raise_in``,
    ``raise_at_iteration``, ``after_raise``, ``tool_config``), plus ``work`` (run in every
    iteration), ``name`` (for a class or instance) and ``strict`` (``RLPROF_STRICT`` for the run).
    Each call runs in its own fresh directory under ``tmp_path``.

``rlprof_recorder``
    A fresh :class:`~rlprof.testing.RecordingBackend`, for tests that want the hook sequence.

For the whole contract at once, subclass :class:`rlprof.testing.conformance.BackendConformance`.

Every session also keeps what the analysis derives from traces outside a run (``rlprof breakdown`` on a
file a test wrote: its rows, an nsys report's export) in a temporary folder of its own
(``RLPROF_CACHE_DIR``, :func:`rlprof.layout.rows_path`), never in the developer's ``~/.cache``.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _rlprof_analysis_cache(tmp_path_factory) -> Iterator[None]:
    from rlprof.layout import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("rlprof-cache"))
    yield
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture
def rlprof_run(tmp_path) -> Callable[..., Any]:
    from rlprof.testing.scenario import Scenario, run_scenario

    counter = itertools.count(1)

    def run(backend: Any, *, work: Callable[[], Any] | None = None, name: str | None = None,
            strict: bool | None = None, **scenario: Any):
        index = next(counter)
        scenario.setdefault("name", f"run{index}")
        return run_scenario(backend, Scenario(**scenario), tmp_path / f"rlprof-run-{index}", name=name, work=work, strict=strict)

    return run


@pytest.fixture
def rlprof_recorder():
    from rlprof.testing.recorder import RecordingBackend

    return RecordingBackend()
