# Quiet, skippable setup steps, sourced by scripts/setup.sh and scripts/install-vllm.sh.
#
# Why: pip's output on a good run is noise to a new user (file:// index warnings, build warnings, and its
# resolver's complaint about the one conflict we know of and accept), and it reads like failure. A step's
# output is kept in a log and shown whole only when the step fails, so a failure still shows every line.
#
# Why the stamps: the second run of setup.sh must change nothing and take seconds. A step is skipped when
#   - its stamp holds the same key (the step's command plus the files it reads), and
#   - the venv's `pip freeze` is the one recorded when the last full run finished (nobody changed it since),
#   - and no earlier step ran in this run (an earlier step may have changed what this one fixes up).
# Callers set STEPS_DIR (where stamps and the recorded freeze live) and STEPS_PREFIX (how lines start).

STEPS_PREFIX=${STEPS_PREFIX:-setup}
_steps_ran_any=
_steps_freeze_ok=

# steps_log MESSAGE: one line of our own.
steps_log() { echo "$STEPS_PREFIX: $*"; }

# steps_freeze: the venv's installed distributions, one per line (what the stamps are checked against).
steps_freeze() { .venv/bin/python -m pip freeze --all 2>/dev/null; }

# steps_begin: decide once whether the recorded freeze still describes the venv.
steps_begin() {
  mkdir -p "$STEPS_DIR"
  if [ -f "$STEPS_DIR/freeze.txt" ] && [ -x .venv/bin/python ] && steps_freeze | cmp -s - "$STEPS_DIR/freeze.txt"; then
    _steps_freeze_ok=1
  fi
}

# steps_end: record the freeze a full, successful run left, for the next run's steps_begin.
steps_end() { steps_freeze > "$STEPS_DIR/freeze.txt"; }

# run_quiet NAME CMD...: run CMD with its output kept aside. On success print one line; on failure print
# that the step failed, then its whole output, and return CMD's exit status.
run_quiet() {
  local name=$1; shift
  local log start rc
  log=$(mktemp)
  start=$(date +%s)
  if "$@" >"$log" 2>&1; then
    steps_log "$name ($(( $(date +%s) - start )) s)"
    rm -f "$log"
    return 0
  else
    rc=$?
  fi
  steps_log "$name FAILED (exit $rc); its output follows:"
  cat "$log"
  rm -f "$log"
  return "$rc"
}

# run_loud NAME CMD...: run CMD with its output shown (for a script that is quiet by itself).
run_loud() { shift; "$@"; }

# step NAME INPUT_FILES -- CMD...: run_quiet CMD unless its stamp says it already ran on these inputs
# (INPUT_FILES: space-separated paths whose contents are part of the key, or "" for none).
# step_loud: the same, with run_loud.
step() { _step run_quiet "$@"; }
step_loud() { _step run_loud "$@"; }

_step() {
  local runner=$1 name=$2 inputs=$3; shift 4
  local key stamp
  stamp="$STEPS_DIR/$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '_').stamp"
  # shellcheck disable=SC2086
  key=$( { printf '%s\0' "$@"; [ -z "$inputs" ] || cat $inputs; } | sha256sum | cut -d' ' -f1)
  if [ -n "$_steps_freeze_ok" ] && [ -z "$_steps_ran_any" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi
  if [ -z "$_steps_ran_any" ]; then
    _steps_ran_any=1
    rm -f "$STEPS_DIR/freeze.txt"   # a run that stops half-way must not leave a freeze that vouches for it
  fi
  "$runner" "$name" "$@" || return $?
  echo "$key" > "$stamp"
}

# steps_ran_any: true when some step ran in this run (false: everything was already in place).
steps_ran_any() { [ -n "$_steps_ran_any" ]; }
