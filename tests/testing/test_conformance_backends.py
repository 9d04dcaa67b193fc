"""Every backend installed here passes the conformance suite third-party backends are held to.

One test per backend and part of the suite, so a failure names both. rlprof's own backends are
always listed and skipped, with the package to install, only when they are not installed; any other
installed backend (a third-party plugin in this environment) is checked too.
"""

from __future__ import annotations

import pytest

from rlprof.installed import OUR_PACKAGES, discover
from rlprof.testing.conformance import SUITE_PARTS, Conformance

INSTALLED = discover()
BACKENDS = sorted(set(OUR_PACKAGES) | set(INSTALLED))


def small_torch_work():
    """What each iteration of the scripted trainer does: real operators for the profilers to record."""
    import torch

    torch.ones(64, 64) @ torch.ones(64, 64)


@pytest.mark.parametrize("part", SUITE_PARTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_keeps_the_contract(backend, part, tmp_path):
    if backend not in INSTALLED:
        pytest.skip(f"backend {backend!r} is not installed (pip install {OUR_PACKAGES[backend]})")
    Conformance(backend, work=small_torch_work).check(part, tmp_path).raise_if_failed()
