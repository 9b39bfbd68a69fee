#!/usr/bin/env bash
# One GPU call's checks under one deadline: a bits plan (scripts/gpu-verify.sh's format) run
# as N groups side by side, then a speed plan alone, the speed half getting what the bits half
# left of DEADLINE_S. A call may run 600 s and its results come back only if the command ends
# in time, so the default deadline leaves room for the last check's kill and the archive; the
# archive ($OUT/results.tgz: both halves' logs and summaries) is written whatever happens,
# and the summaries are printed last.
# Usage: OUT=... [N=3] [BITS_S=200] [DEADLINE_S=560] scripts/gpu-call.sh BITS_PLAN [SPEED_PLAN]
#   (BITS_PLAN "-" for none)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder the results go to}
N=${N:-3}
BITS_S=${BITS_S:-200}
DEADLINE_S=${DEADLINE_S:-560}
mkdir -p "$OUT"
work=$(mktemp -d)
start=$SECONDS
summaries() {
    [ -f "$work/bits.log" ] && cat "$work/bits.log"
    [ -f "$work/speed/summary.txt" ] && cat "$work/speed/summary.txt"
}
trap 'tar czf "$OUT/results.tgz" -C "$work" . 2>/dev/null' EXIT
bits=${1:?a bits plan, or - for none}
if [ "$bits" != - ]; then
    b=$(( BITS_S < DEADLINE_S - 30 ? BITS_S : DEADLINE_S - 30 ))
    N=$N TOTAL_S=$b OUT="$work/bits" scripts/gpu-verify-parallel.sh "$bits" > "$work/bits.log" 2>&1
fi
if [ -n "${2:-}" ]; then
    # A check may overrun its share by the 5 s its kill waits: keep 10 s in hand.
    left=$(( DEADLINE_S - (SECONDS - start) - 10 ))
    if [ "$left" -ge 8 ]; then
        TOTAL_S=$left OUT="$work/speed" scripts/gpu-verify.sh "$2" > "$work/speed.log" 2>&1
    else
        echo "speed plan skipped: ${left}s left of DEADLINE_S=$DEADLINE_S" > "$work/speed.log"
        cat "$work/speed.log"
    fi
fi
summaries
echo "gpu-call: $((SECONDS - start)) s of DEADLINE_S=$DEADLINE_S"
