#!/usr/bin/env bash
# Run verl's own profiler unit tests against rlprof's drop-in (verl's profiler classes swapped for
# rlprof's by rlprof.verl.install()), with the verl 0.9.1 wheel installed in .venv.
#
#   scripts/verl_upstream_tests.sh <verl git dir or checkout> [--baseline] [pytest args...]
#
# The tests are extracted from the repository's HEAD into a temporary directory (never into this
# repository); a conftest.py there calls rlprof.verl.install() before the tests import verl's
# classes, and maps rlprof-npu's stand-in torch_npu under the real name so the mstx tests import.
# The tests run as verl's CI runs them: many DistProfilers per process, with different tools and save paths,
# most never finalized (rlprof ends a session once its Profilers are dropped). --baseline runs the same tests with verl's own classes, to tell environment failures (no vllm,
# HEAD-only config files) from differences of the drop-in. See docs/verl.md for the expected result.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${1:?usage: $0 <verl git dir or checkout> [--baseline] [pytest args...]}
shift
BASELINE=0
if [ "${1:-}" = "--baseline" ]; then BASELINE=1; shift; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rlprof-verl-tests.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
TESTS="tests/utils/test_torch_profile.py tests/utils/test_nvtx_profile.py tests/utils/test_special_mstx_profile.py
tests/utils/test_server_profiler.py tests/utils/test_precision_debugger_profile.py
tests/trainer/ppo/v1/test_rollout_profiling_on_cpu.py"
if [ -d "$SRC/.git" ] || [ -f "$SRC/HEAD" ]; then
  GITDIR=$SRC; [ -d "$SRC/.git" ] && GITDIR=$SRC/.git
  # shellcheck disable=SC2086
  git --git-dir="$GITDIR" archive HEAD $TESTS | tar -x -C "$WORK"
else
  (cd "$SRC" && tar -c $TESTS) | tar -x -C "$WORK"
fi
cat > "$WORK/conftest.py" <<PY
import importlib, os, sys
try:
    import torch_npu  # noqa: F401
except ImportError:  # the stand-in of rlprof-npu's tests, under the real module names
    sys.path.insert(0, "$ROOT/plugins/npu/tests")
    import standin_torch_npu
    for standin, real in standin_torch_npu.MIRRORS.items():
        sys.modules[real] = importlib.import_module(standin)
if os.environ.get("RLPROF_VERL_BASELINE") != "1":
    import rlprof.verl
    rlprof.verl.install()
PY
cd "$WORK"
RLPROF_VERL_BASELINE=$BASELINE exec "$ROOT/.venv/bin/python" -m pytest -p no:cacheprovider -q -rfE "$@" tests
