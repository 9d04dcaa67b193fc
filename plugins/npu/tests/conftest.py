"""Fixtures of rlprof-npu's tests.

* ``torch_npu_standin`` — the stand-in torch_npu (``standin_torch_npu/``, see its docstring) under
  the real module names, for one test; returns its call log.
* ``nothing_said_yet`` (every test) — forgets what :mod:`rlprof.notices` said once, as a fresh process would.
* ``torch_npu_wheel`` — the real torch-npu wheel matching the installed torch, downloaded once into
  ``~/.cache/rlprof-tests`` (``RLPROF_TEST_CACHE``); the test skips only when it cannot be had.

The tiny training loop the behaviour tests run lives in ``npu_tiny_training.py``.
"""

from __future__ import annotations

import importlib
import sys
from importlib import metadata
from pathlib import Path

import pytest

from rlprof import notices


@pytest.fixture(autouse=True)
def nothing_said_yet():
    """Each test starts as a fresh process would: :mod:`rlprof.notices` remembers per process what
    was said once, and a test that checks a warning must not find it said by an earlier test."""
    notices.forget()


@pytest.fixture
def torch_npu_standin(monkeypatch):
    import standin_torch_npu
    from standin_torch_npu.recording import LOG

    for standin_name, real_name in standin_torch_npu.MIRRORS.items():
        monkeypatch.setitem(sys.modules, real_name, importlib.import_module(standin_name))
    LOG.reset()
    yield LOG
    LOG.reset()


@pytest.fixture(scope="session")
def torch_npu_wheel() -> Path:
    version = metadata.version("torch").split("+")[0]
    from rlprof.testing.downloads import cached_wheel

    return cached_wheel(f"torch-npu=={version}", f"torch_npu-{version}-")
