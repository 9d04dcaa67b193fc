"""Fixtures of the nsys backend's tests (helpers live in nsys_harness.py)."""

from __future__ import annotations

import pytest

import nsys_harness
from rlprof import notices


@pytest.fixture(autouse=True)
def nothing_said_yet():
    """Each test starts as a fresh process would: :mod:`rlprof.notices` remembers per process what
    was said once, and a test that checks a warning must not find it said by an earlier test."""
    notices.forget()


@pytest.fixture(autouse=True)
def windows_counted_anew():
    """Each test stands for a fresh worker process to nsys too: its capture windows are numbered from 1."""
    from rlprof_nsys.windows import PROCESS_WINDOWS

    PROCESS_WINDOWS.reset()


@pytest.fixture(scope="session")
def nvtx_recorder(tmp_path_factory):
    """The NVTX recorder tool, built once per session (skips when no compiler or headers can be had)."""
    try:
        return nsys_harness.build_recorder(tmp_path_factory.mktemp("nvtx-recorder"))
    except nsys_harness.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def profiled(nvtx_recorder, tmp_path):
    """``profiled(spec, ...) -> [Loop]``: run profiled loops, one process per spec, under the recorder."""
    counter = iter(range(1000))

    def run(*specs, env=None):
        return nsys_harness.run_loops(specs, tmp_path / f"loops{next(counter)}", nvtx_recorder, env=env)

    return run

