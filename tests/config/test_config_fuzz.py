"""Property: any configuration built from the real key space either loads or is refused with a
ConfigError that names a key path (or the input it came from), quickly — through the loader,
``rlprof check``'s code path and ``Profiler()`` (with do-nothing backends).

A fixed budget for CI (``RLPROF_FUZZ_EXAMPLES``, default 200, 20-35 s here; derandomized so a failure repeats);
``scripts/fuzz_config.py`` runs thousands of cases in child processes and counts hangs and crashes.
"""

import os
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_configs import bases, cases, run_case

EXAMPLES = int(os.environ.get("RLPROF_FUZZ_EXAMPLES", "200"))
STAGE_LIMIT_S = 10.0


@pytest.fixture(scope="module")
def base_docs(verl_generated_config):
    return bases(yaml.safe_load(verl_generated_config.read_text()))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    home, cwd = os.environ.get("HOME"), os.getcwd()
    yield tmp_path_factory.mktemp("fuzz")
    os.chdir(cwd)
    if home is not None:
        os.environ["HOME"] = home


@pytest.mark.timing
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_generated_configs_load_or_fail_with_a_named_config_error(data, base_docs, scratch):
    case = data.draw(cases(base_docs))
    workdir = Path(tempfile.mkdtemp(dir=scratch))
    started = time.perf_counter()
    outcome = run_case(case, workdir)
    for stage in ("load", "check", "profiler"):
        assert outcome[stage] in ("ok", "rejected"), (
            f"{stage}: {outcome[stage]}\nbase: {case.base}; mutations: {case.mutations}; form: {case.form}; "
            f"overrides: {case.overrides}")
        assert float(outcome[stage + "_s"]) < STAGE_LIMIT_S, f"{stage} took {outcome[stage + '_s']} s"
    assert time.perf_counter() - started < 3 * STAGE_LIMIT_S
