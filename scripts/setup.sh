#!/usr/bin/env bash
# Set up everything rlprof needs in ./.venv: the core, the four backend plugins (editable, so their
# entry points are real), torch 2.13 (CPU), ray, pytest (with pytest-xdist) and Hypothesis, and verl 0.9.1 (its worker
# classes, for the drop-in's tests), and vLLM's CPU build (scripts/install-vllm.sh: the rollout-engine tests
# and `rlprof demo --rollout vllm`; about 2.2 GB more).
#
# Quiet: each step prints one line; pip's output is shown only for a step that fails (scripts/lib/steps.sh).
# Safe and fast to run again: a step whose command and input files are unchanged, in a venv nobody changed
# since the last full run, is skipped, so a second run changes no installed version and takes seconds.
# Measured times: README.md ("Setup").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
start=$(date +%s)
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
STEPS_DIR=.venv/.rlprof-setup STEPS_PREFIX=setup
# shellcheck source=scripts/lib/steps.sh
. scripts/lib/steps.sh
pip() { .venv/bin/python -m pip "$@"; }
steps_begin

step "pip" "" -- pip install --upgrade pip
# torch first, pinned: a bare "torch" requirement would pull the newest CUDA build (several GB).
step "torch 2.13.0 (CPU)" "" -- pip install "torch==2.13.0"
step "ray, pytest, pytest-xdist, hypothesis, py-spy" "" -- \
  pip install "ray>=2.9" "omegaconf>=2.3" "pluggy>=1.3" "PyYAML>=6" "pytest>=7" "pytest-xdist>=3.8" "hypothesis>=6" "py-spy>=0.3"   # py-spy: the rlprof-pyspy example backend's tool; pytest-xdist: the suite's two workers (tests/sharing.py)
# rlprof-torch builds its optional C++ extension rlprof_torch._nogil here (captures end without the GIL;
# docs/torch-nogil.md): its sources are inputs, so a change to them builds it again.
step "rlprof and its plugins (editable)" "pyproject.toml plugins/torch/pyproject.toml plugins/torch/setup.py plugins/torch/rlprof_torch/_nogil.cpp plugins/nsys/pyproject.toml plugins/npu/pyproject.toml" -- \
  pip install -e . -e plugins/torch -e plugins/nsys -e plugins/npu
step "mindstudio-probe 26.2.0 and rlprof-msprobe (precision_debugger)" "plugins/msprobe/pyproject.toml" -- \
  pip install "mindstudio-probe==26.2.0" -e plugins/msprobe
# Holistic Trace Analysis, to check that rlprof's traces load as one multi-rank job. Its metadata asks
# for jupyterlab and an unpinned torch; install it alone, then only what it imports.
step "HolisticTraceAnalysis" "" -- pip install --no-deps "HolisticTraceAnalysis==0.5.0"
step "HolisticTraceAnalysis's imports" "" -- pip install numpy pandas plotly pydot psutil networkx
# verl 0.9.1 (the drop-in's tests build its real worker classes on CPU). Its metadata asks for vllm-era
# GPU packages and an unpinned torch; install the wheel alone, then only what its worker, profiler and
# Ray dispatch modules import (docs/verl.md). pip lists the optional ones it leaves out; that is expected.
step "verl 0.9.1" "" -- pip install --no-deps "verl==0.9.1" "tensordict==0.10.0"
step "verl's imports" "" -- pip install cloudpickle importlib_metadata orjson "pyvers>=0.1.0,<0.2.0" codetiming \
  pillow hydra-core fastapi uvicorn datasets "transformers>=5.5.3,<5.11,!=5.6.0"
# What verl's real trainer needs on top of that (examples/verl-cpu, tests/integrations/test_verl_trainer.py),
# with the pinned torch alongside so pip never replaces it.
step "verl's trainer (examples/verl-cpu/requirements.txt)" "examples/verl-cpu/requirements.txt" -- \
  pip install -r examples/verl-cpu/requirements.txt "torch==2.13.0"
# vLLM's CPU build last: it needs transformers>=5.16.1, which the "verl's imports" step above undoes whenever it runs,
# so it runs (FORCE=1) whenever any step above ran. It prints its own lines, the known conflict among them.
step_loud "vLLM's CPU build" "scripts/install-vllm.sh" -- env FORCE=1 scripts/install-vllm.sh

steps_end
if steps_ran_any; then
  done_what="set up in $(( $(date +%s) - start )) s"
else
  done_what="already set up, nothing changed ($(( $(date +%s) - start )) s; rm -r .venv/.rlprof-setup to redo every step)"
fi
echo "rlprof: environment ready in .venv, $done_what ($(.venv/bin/python -c 'import torch, ray; print("torch", torch.__version__, "ray", ray.__version__)'))"
# the optional extension fails to build quietly (no compiler): say what that means once
.venv/bin/python -c 'from rlprof_torch import nogil; r = nogil.unavailable(); print("rlprof: torch captures end without the GIL" if r is None else f"rlprof: torch captures end with the GIL held (torch'"'"'s own calls): {r}")' || true
