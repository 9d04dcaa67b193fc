#!/usr/bin/env bash
# Set up everything rlprof needs in ./.venv: the core, the four backend plugins (editable, so their
# entry points are real), torch 2.13 (CPU), ray, pytest and Hypothesis, and verl 0.9.1 (its worker
# classes, for the drop-in's tests), and vLLM's CPU build (scripts/install-vllm.sh: the rollout-engine tests
# and `rlprof demo --rollout vllm`; about 45-70 s and 2.2 GB more). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip
# torch first, pinned: a bare "torch" requirement would pull the newest CUDA build (several GB).
pip install -q "torch==2.13.0"
pip install -q "ray>=2.9" "omegaconf>=2.3" "pluggy>=1.3" "PyYAML>=6" "pytest>=7" "hypothesis>=6" "py-spy>=0.3"   # py-spy: the rlprof-pyspy example backend's tool
pip install -q -e . -e plugins/torch -e plugins/nsys -e plugins/npu
pip install -q "mindstudio-probe==26.2.0" && pip install -q --no-deps -e plugins/msprobe   # precision_debugger (msprobe dumps on CPU)
# Holistic Trace Analysis, to check that rlprof's traces load as one multi-rank job. Its metadata asks
# for jupyterlab and an unpinned torch; install it alone, then only what it imports.
pip install -q --no-deps "HolisticTraceAnalysis==0.5.0"
pip install -q numpy pandas plotly pydot psutil networkx
# verl 0.9.1 (the drop-in's tests build its real worker classes on CPU). Its metadata asks for vllm-era
# GPU packages and an unpinned torch; install the wheel alone, then only what its worker, profiler and
# Ray dispatch modules import (docs/verl.md). pip lists the optional ones it leaves out; that is expected.
pip install -q --no-deps "verl==0.9.1" "tensordict==0.10.0"
pip install -q cloudpickle importlib_metadata orjson "pyvers>=0.1.0,<0.2.0" codetiming pillow hydra-core \
    fastapi uvicorn datasets "transformers>=5.5.3,<5.11,!=5.6.0" 2>&1 | { grep -v "which is not installed\|dependency resolver" || true; }
# What verl's real trainer needs on top of that (examples/verl-cpu, tests/integrations/test_verl_trainer.py),
# with the pinned torch alongside so pip never replaces it.
pip install -q -r examples/verl-cpu/requirements.txt "torch==2.13.0" 2>&1 | { grep -v "which is not installed\|dependency resolver" || true; }
# vLLM's CPU build last: it needs transformers>=5.16.1, which the verl pins above would undo on a second
# run, so its pip step always runs here (a no-op when everything is in place).
FORCE=1 scripts/install-vllm.sh
echo "rlprof: environment ready in .venv ($(.venv/bin/python -c 'import torch, ray; print("torch", torch.__version__, "ray", ray.__version__)'))"
