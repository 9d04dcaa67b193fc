#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for the HTML report tests (tests/analysis/test_html_report.py).
# Those tests skip with a reason when no chromium is on PATH; this makes them run.
# Needs root (apt-get). Retries while another apt/dpkg holds the lock.
set -euo pipefail

log() { echo "install-chromium: $*" >&2; }

if command -v chromium >/dev/null 2>&1; then
    log "already installed: $(chromium --version 2>/dev/null || echo chromium)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    log "needs root to apt-get install chromium; run: sudo bash $0"
    exit 1
fi

for attempt in 1 2 3 4 5 6 7 8 9 10; do
    log "apt-get install --no-install-recommends chromium (attempt $attempt)"
    if DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; then
        log "installed: $(chromium --version 2>/dev/null || echo chromium)"
        exit 0
    fi
    if [ "$attempt" = 1 ]; then
        log "install failed; refreshing the package lists (apt-get update) and retrying"
        apt-get update || true
    else
        log "install failed (dpkg lock held by another apt?); waiting 15 s"
        sleep 15
    fi
done
log "giving up: chromium could not be installed"
exit 1
