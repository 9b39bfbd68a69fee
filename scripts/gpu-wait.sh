#!/usr/bin/env bash
# Waits (at most $WAIT_S seconds, default 300) until each named product of scripts/gpu-prepare.sh is
# ready; exits 1 naming the first that failed or is not ready in time. Usage: scripts/gpu-wait.sh PRODUCT...
set -uo pipefail
DIR=/tmp/kiln-bench
deadline=$(( SECONDS + ${WAIT_S:-300} ))
for p in "$@"; do
    while [ ! -f "$DIR/$p.ready" ]; do
        if [ -f "$DIR/$p.failed" ]; then
            echo "gpu-wait: $p failed (see $DIR/prepare.log)" >&2
            tail -5 "$DIR/prepare.log" >&2
            exit 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "gpu-wait: $p not ready in time" >&2
            exit 1
        fi
        sleep 2
    done
done
