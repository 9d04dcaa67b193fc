"""Real packages for tests, downloaded once: the wheel a stand-in is checked against, verl's config...

A backend whose library cannot run here (torch_npu without CANN) is tested against a stand-in, and the
stand-in against the real package's source. This module fetches such packages with ``pip download``
into one cache shared by every test: ``$RLPROF_TEST_CACHE``, default ``~/.cache/rlprof-tests``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cache_dir() -> Path:
    """Where downloaded test inputs are kept (created on demand by the callers)."""
    return Path(os.environ.get("RLPROF_TEST_CACHE") or Path.home() / ".cache" / "rlprof-tests")


def cached_wheel(requirement: str, filename_prefix: str) -> Path:
    """The wheel for ``requirement`` (``pip download --no-deps``), from the cache or the index.

    ``filename_prefix`` identifies it in the cache (``"torch_npu-2.13.0-"``). When it cannot be had
    (no index reachable), the calling test is skipped with pip's reason.
    """
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"{filename_prefix}*.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", requirement, "-d", str(cache)],
                              capture_output=True, text=True)
        found = sorted(cache.glob(f"{filename_prefix}*.whl"))
        if not found:
            import pytest

            pytest.skip(f"cannot download {requirement}: {proc.stderr.strip()[-300:]}")
    return found[-1]
