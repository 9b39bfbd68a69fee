#!/usr/bin/env bash
# Runs a plan of GPU checks, most important first, within one time budget, on the GPU machine:
# one line per check, `SECONDS LABEL COMMAND...`, read from the plan file named (or stdin).
# COMMAND may be `test NAME [FILTER...]` (the tests of module NAME of the carried kiln-cuda
# test executable, run alone, with --include-ignored), `kiln ARGS...` (the carried binary) or
# any command, with VAR=VALUE prefixes. Each check gets min(SECONDS, what is left of TOTAL_S);
# what does not fit is skipped and named. Logs under $OUT/verify; the summary (one line per
# check, with the first failing lines) last. Needs .carry/ from scripts/build-gpu-carry.sh.
# Usage: TOTAL_S=360 OUT=... scripts/gpu-verify.sh PLAN
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-verify-out}
LOGS=$OUT/verify
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_REQUIRE_GPU=1 RUST_BACKTRACE=0
export KILN_FIXTURES="${KILN_FIXTURES:-$PWD/tests/fixtures}"
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
[ -z "${KILN_COMMIT:-}" ] && [ -f .carry/commit.txt ] && export KILN_COMMIT="$(cat .carry/commit.txt)"
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
if [ -f .carry/kernel-cache.tar.xz ] && [ ! -d "$KILN_KERNEL_CACHE" ]; then
    mkdir -p "$KILN_KERNEL_CACHE"
    tar -C "$KILN_KERNEL_CACHE" --strip-components=1 -xJf .carry/kernel-cache.tar.xz
fi
test() { # NAME [FILTER...]
    local name=$1; shift
    local path
    path=$(awk -v n="$name" '$1=="test" && $2==n {print $3}' .carry/manifest.txt)
    [ -n "$path" ] || { echo "no carried test module $name"; return 127; }
    ".carry/$path" --include-ignored --test-threads=1 --nocapture "$@"
}
kiln() { .carry/bin/kiln "$@"; }
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
say "gpu-verify $(date -u +%H:%M:%SZ) commit ${KILN_COMMIT:-unknown}"
TOTAL_S=${TOTAL_S:-360}
start=$SECONDS
n=0
while read -r limit label cmd; do
    case "$limit" in ''|'#'*) continue ;; esac
    n=$((n + 1))
    left=$(( TOTAL_S - (SECONDS - start) ))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 8 ]; then say "$(printf '%-28s skipped: out of time' "$label")"; continue; fi
    log="$LOGS/$(printf '%02d' $n)-$label.log"
    t0=$SECONDS
    # The check runs in a process group of its own (set -m) under a timer of its own, so a
    # hang costs only its share and nothing it started (ncu's child, a server) outlives it
    # holding GPU memory.
    set -m
    ( eval "$cmd" ) > "$log" 2>&1 &
    pid=$!
    set +m
    ( sleep "$limit"; kill -TERM -- "-$pid" 2>/dev/null; sleep 5; kill -KILL -- "-$pid" 2>/dev/null ) &
    timer=$!
    wait "$pid"; rc=$?
    kill "$timer" 2>/dev/null; wait "$timer" 2>/dev/null
    pass=$(grep -c '\] PASS \|^PASS \|^test .* ok$' "$log")
    fail=$(grep -c '\] FAIL \|^FAIL \|panicked' "$log")
    say "$(printf '%-28s rc %3s %4ss  %4s pass %3s fail' "$label" "$rc" $((SECONDS - t0)) "$pass" "$fail")"
    grep -E '\] FAIL |^FAIL |panicked' "$log" | head -4 | cut -c1-240 | sed 's/^/    /' | tee -a "$summary"
    [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ] && tail -3 "$log" | cut -c1-240 | sed 's/^/    /' | tee -a "$summary"
done < "${1:-/dev/stdin}"
tar czf "$OUT/verify-logs.tgz" -C "$LOGS" . 2>/dev/null
say "done in $((SECONDS - start)) s"
