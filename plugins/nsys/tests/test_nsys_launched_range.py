"""A process's capture windows open the way the ``nsys profile`` around it waits for them.

verl launches its workers with ``global_tool_config.nsys.worker_nsight_options`` but hands each worker
only its role's section, so the backend's ``capture_range`` there is the default (cudaProfilerApi)
while nsys waits for NVTX windows: nothing would be captured. The command line of the nsys that
started the process decides (``rlprof_nsys.backend.capture_range``); the real-nsys run of this is
``test_nsys_real.py::test_windows_follow_the_capture_range_nsys_was_launched_with``.
"""

from __future__ import annotations

import logging

import pytest

from rlprof import notices
from rlprof_nsys import backend, reports

WORKER = [b"python", b"/ray/default_worker.py", b"--node-ip-address=10.0.0.1"]


def under(monkeypatch, *options: str, program=WORKER):
    words = (b"/usr/bin/nsys", b"profile", *(o.encode() for o in options), b"-o", b"/ray/worker_process_%p", *program)
    monkeypatch.setattr(reports, "nsys_ancestor", lambda: tuple(words))
    notices.forget()


@pytest.mark.parametrize("options", [
    ("--capture-range=nvtx", "--nvtx-capture=rlprof_capture@rlprof"),   # Ray's spelling of long options
    ("-c", "nvtx", "--nvtx-capture", "rlprof_capture@rlprof"),
    ("-cnvtx", "--nvtx-capture=rlprof_capture@rlprof"),
])
def test_nvtx_launch_wins_over_the_default_section(monkeypatch, options):
    under(monkeypatch, *options)
    assert backend.capture_range({"capture_range": "cudaProfilerApi"}) == "nvtx"
    assert backend.capture_range({}) == "nvtx"


def test_without_nsys_or_without_the_option_the_section_decides(monkeypatch):
    monkeypatch.setattr(reports, "nsys_ancestor", lambda: None)
    assert backend.capture_range({"capture_range": "nvtx"}) == "nvtx"
    assert backend.capture_range({}) == "cudaProfilerApi"
    under(monkeypatch, "--trace=nvtx")  # whole-process capture: no capture range given
    assert backend.capture_range({"capture_range": "nvtx"}) == "nvtx"


def test_cuda_launch_wins_over_an_nvtx_section(monkeypatch):
    under(monkeypatch, "--capture-range=cudaProfilerApi")
    assert backend.capture_range({"capture_range": "nvtx"}) == "cudaProfilerApi"


def test_the_profiled_programs_own_arguments_are_not_nsys_options(monkeypatch):
    under(monkeypatch, "--trace=nvtx", program=[b"/venv/bin/python3", b"-c", b"nvtx"])
    assert backend.capture_range({}) == "cudaProfilerApi"


def test_another_nvtx_capture_range_is_named(monkeypatch, caplog):
    under(monkeypatch, "--capture-range=nvtx", "--nvtx-capture=train@mydomain")
    with caplog.at_level(logging.INFO, logger="rlprof"):
        assert backend.capture_range({}) == "nvtx"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'train@mydomain'" in w and "nvtx-capture to rlprof_capture@rlprof" in w for w in warnings), warnings
