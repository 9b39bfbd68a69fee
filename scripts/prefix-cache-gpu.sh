#!/usr/bin/env bash
# Prefix cache figures on the GPU machine (needs .carry/ from scripts/build-gpu-carry.sh, with the
# kiln binary): time to first token cold vs resumed for 2k/8k/32k histories and a 100-token new
# turn (`kiln bench --resumed`), then `kiln serve` with the cache on and off under the multi-turn
# chat workload (scripts/chat_load.py: 32 clients, 8 turns) and under the same load with every
# request a new conversation (nothing to reuse: the cost of the cache when nothing hits).
# Writes $OUT/resumed.json, $OUT/serve-{on,off}.jsonl and the server logs; prints a summary.
# Usage: scripts/prefix-cache-gpu.sh [MODEL] (default dummy:llama3-8b); SKIP_BENCH=1 skips the
# TTFT bench.
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-dummy:llama3-8b}
OUT=${OUT:-$PWD/prefix-cache-out}
PORT=${PORT:-8013}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
BIN=.carry/bin/kiln
export KILN_COMMIT="${KILN_COMMIT:-$(cat .carry/commit.txt 2>/dev/null)}"
[ -x "$BIN" ] || { echo "no $BIN: build the carry with the kiln binary" >&2; exit 1; }

if [ "${SKIP_BENCH:-0}" != 1 ]; then
    echo "== kiln bench --resumed (TTFT cold vs history cached)"
    "$BIN" bench --model "$MODEL" --device cuda --prefill none --decode 0 \
        --resumed 2048,8192,32768 --new-turn 100 --repeats 3 --json "$OUT/resumed.json" \
        2> "$OUT/bench-resumed.log" | tail -8
fi

serve() { # on|off: runs both workloads against kiln serve with the cache on or off
    local mode=$1 flag=""
    [ "$mode" = off ] && flag=--no-prefix-cache
    "$BIN" serve --model "$MODEL" --device cuda --port "$PORT" --max-num-seqs 64 $flag \
        > "$OUT/serve-$mode.log" 2>&1 &
    local server=$!
    for _ in $(seq 300); do
        curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
        kill -0 $server 2>/dev/null || { echo "server exited:"; tail -5 "$OUT/serve-$mode.log"; return 1; }
        sleep 1
    done
    local url="http://127.0.0.1:$PORT"
    python3 scripts/chat_load.py "$url" "$MODEL" 32 8 300 16 128 "chat cache-$mode" shared >> "$OUT/serve-$mode.jsonl"
    python3 scripts/chat_load.py "$url" "$MODEL" 32 8 300 16 128 "unique cache-$mode" unique >> "$OUT/serve-$mode.jsonl"
    curl -s "$url/metrics" | grep -E "^kiln_(prefix|kv_blocks_cached)" > "$OUT/metrics-$mode.txt"
    kill $server; wait $server 2>/dev/null
}
for mode in on off; do
    echo "== kiln serve, prefix cache $mode"
    serve "$mode"
    cat "$OUT/serve-$mode.jsonl"
    cat "$OUT/metrics-$mode.txt"
done
