#!/usr/bin/env bash
# Install Debian's Nsight Systems CLI (package nsight-systems, 2022.4.2 in bookworm's non-free) so the
# nsys backend's tests run against a real `nsys`. For CI machines and throw-away containers only: it
# changes the system's apt sources, so the README's own setup never calls it.
#
# What it does, each step logged:
#   1. adds "contrib non-free" to the Components: line of /etc/apt/sources.list.d/debian.sources
#      (or of the deb lines of /etc/apt/sources.list), once;
#   2. apt-get update; apt-get install --no-install-recommends nsight-systems;
#   3. links the host directory (which holds QdstrmImporter) beside the CLI's target directory:
#      Debian splits nsight-systems-target (…/target-linux-x64, where `nsys` lives) and
#      nsight-systems-host (…/host-linux-x64 under a different lib directory), but `nsys` looks for
#      host-linux-x64 next to its own directory, and without it cannot turn a capture into a
#      .nsys-rep ("QdstrmImporter not found").
# Safe to run again. Exits 0 with a message and changes nothing when not root or without apt-get
# (the tests that need nsys then skip); exits 1 when a step fails.
set -uo pipefail

log() { echo "install-nsys: $*" >&2; }

if command -v nsys >/dev/null 2>&1 && nsys --version >/dev/null 2>&1 && [ -z "${FORCE:-}" ]; then
  existing=$(command -v nsys)
else
  existing=""
fi

if [ "$(id -u)" != 0 ]; then
  log "not root: nothing installed (nsys tests will skip unless nsys is on PATH)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  log "apt-get/dpkg not found: nothing installed (nsys tests will skip unless nsys is on PATH)"
  exit 0
fi

apt_retry() {
  # another process may hold the dpkg lock for a while
  local tries=0
  until "$@"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 30 ]; then
      log "gave up after $tries attempts: $*"
      return 1
    fi
    log "'$*' failed (dpkg lock held?); retrying in 10 s"
    sleep 10
  done
}

if ! dpkg -s nsight-systems >/dev/null 2>&1; then
  sources=/etc/apt/sources.list.d/debian.sources
  if [ -f "$sources" ]; then
    if grep -E '^Components:' "$sources" | grep -qv 'non-free'; then
      log "adding 'contrib non-free' to the Components: lines of $sources (backup: $sources.rlprof-orig)"
      [ -f "$sources.rlprof-orig" ] || cp -p "$sources" "$sources.rlprof-orig"
      sed -i -E '/^Components:/{/non-free/!s/$/ contrib non-free/}' "$sources"
    else
      log "$sources already lists non-free"
    fi
  elif [ -f /etc/apt/sources.list ]; then
    if grep -E '^deb ' /etc/apt/sources.list | grep -qv 'non-free'; then
      log "adding 'contrib non-free' to the deb lines of /etc/apt/sources.list (backup: /etc/apt/sources.list.rlprof-orig)"
      [ -f /etc/apt/sources.list.rlprof-orig ] || cp -p /etc/apt/sources.list /etc/apt/sources.list.rlprof-orig
      sed -i -E '/^deb /{/non-free/!s/$/ contrib non-free/}' /etc/apt/sources.list
    fi
  else
    log "no Debian apt source found; trying to install anyway"
  fi
  log "apt-get update"
  apt_retry apt-get update -q || exit 1
  log "apt-get install --no-install-recommends nsight-systems"
  DEBIAN_FRONTEND=noninteractive apt_retry apt-get install -y -q --no-install-recommends nsight-systems || exit 1
else
  log "nsight-systems $(dpkg-query -W -f='${Version}' nsight-systems) is already installed"
fi

# The link: find target-linux-x64 (holds the real nsys) and host-linux-x64 (holds QdstrmImporter).
target_dir=$(dpkg -L nsight-systems-target 2>/dev/null | grep -E '/target-linux-x64$' | head -n1)
host_dir=$(dpkg -L nsight-systems-host 2>/dev/null | grep -E '/host-linux-x64$' | head -n1)
if [ -z "$target_dir" ] || [ -z "$host_dir" ]; then
  # fall back to locating the files themselves
  target_dir=${target_dir:-$(dirname "$(dpkg -L nsight-systems-target nsight-systems 2>/dev/null | grep -E '/target-linux-x64/nsys$' | head -n1)" 2>/dev/null)}
  host_dir=${host_dir:-$(dirname "$(dpkg -L nsight-systems-host nsight-systems 2>/dev/null | grep -E '/QdstrmImporter$' | head -n1)" 2>/dev/null)}
fi
if [ -z "$target_dir" ] || [ -z "$host_dir" ] || [ ! -d "$target_dir" ] || [ ! -d "$host_dir" ]; then
  log "could not find target-linux-x64 ('$target_dir') and host-linux-x64 ('$host_dir') with dpkg -L"
  exit 1
fi
link="$(dirname "$target_dir")/host-linux-x64"
if [ "$(readlink -f "$link")" = "$(readlink -f "$host_dir")" ]; then
  log "$link already leads to $host_dir"
elif [ -e "$link" ] || [ -L "$link" ]; then
  log "$link exists and is not a link to $host_dir; left as it is"
else
  log "linking $link -> $host_dir (the CLI looks for QdstrmImporter there)"
  ln -s "$host_dir" "$link" || exit 1
fi

if ! command -v nsys >/dev/null 2>&1; then
  log "nsys is not on PATH after the install"
  exit 1
fi
log "ready: $(command -v nsys) ($(nsys --version 2>&1 | head -n1))${existing:+; was already on PATH before}"
