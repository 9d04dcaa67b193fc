"""The plugin API (issue 47): ``rlprof.backend_api`` names what a backend may use, each name resolving where the core
keeps it, and importing it costs nothing until a name is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlprof import backend_api


@pytest.mark.parametrize("name", backend_api.__all__)
def test_every_name_resolves_to_the_core_s_own(name):
    import importlib

    assert getattr(backend_api, name) is getattr(importlib.import_module(backend_api._WHERE[name]), name)


def test_a_name_it_does_not_offer_is_refused_naming_what_it_does():
    with pytest.raises(AttributeError, match="a backend may use: BoundedTokens, .*TraceReader"):
        backend_api.split  # noqa: B018  (the breakdown's split is the core's, not a backend's)


def test_importing_it_or_a_backend_s_writer_loads_no_analysis():
    code = ("import sys; from rlprof.backend_api import Export, TraceReader, TraceWriter, check_keys, say_once; "
            "print(sorted(m for m in sys.modules if m.startswith(('rlprof.analysis', 'torch', 'ray'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
