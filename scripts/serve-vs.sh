#!/usr/bin/env bash
# `kiln serve` and llama-server on the same GGUF, one after the other in one GPU call, under the
# recorded serving workload (scripts/serve_load.py: unique 400-word prompts, 128 tokens, streamed
# /v1/completions). llama-server runs as the recorded figures ran it (-np 128 -c 131072 -fa on -cb);
# kiln serve with --max-num-seqs 256. One JSON line per engine and level in $OUT/serve-vs.jsonl,
# the servers' logs beside it. Also the GPU memory each engine's weights take on QUANT_GGUF (kiln's
# "weights" line, llama.cpp's "CUDA0 model buffer size"), when that file is given.
#
# Usage: scripts/serve-vs.sh GGUF LLAMA_SERVER
# Environment: OUT (./serve-vs-out), KILN_BIN (.carry/bin/kiln), LEVELS ("1:4 32:64 128:256",
#   clients:requests; "" for none), KILN_LEVELS (LEVELS plus 256:512 by default; "": no kiln
#   server, llama-server alone), PORT (8013),
#   QUANT_GGUF (measured first, so a time limit cuts the loads rather than it).
set -uo pipefail
cd "$(dirname "$0")/.."
GGUF=$1
LLAMA_SERVER=$2
OUT=${OUT:-$PWD/serve-vs-out}
BIN=${KILN_BIN:-.carry/bin/kiln}
PORT=${PORT:-8013}
LEVELS=${LEVELS-"1:4 32:64 128:256"}
KILN_LEVELS=${KILN_LEVELS-"$LEVELS 256:512"}
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
results=$OUT/serve-vs.jsonl
: > "$results"

up() { # PID LOG: wait for /health, at most 300 s
    local i
    for i in $(seq 600); do
        kill -0 "$1" 2>/dev/null || { echo "server exited:"; tail -20 "$2"; return 1; }
        curl -sf "$URL/health" > /dev/null && return 0
        sleep 0.5
    done
    echo "no answer after 300 s"; return 1
}

loads() { # ENGINE MODEL_NAME LEVELS
    # Each level's prompts numbered after the last level's, so no level finds another's prompts
    # in the server's prompt cache; both engines get the same prompts in the same order.
    local engine=$1 name=$2 level first=0
    for level in $3; do
        SERVE_LOAD_FIRST=$first python3 scripts/serve_load.py "$URL" "$name" "${level%%:*}" "${level#*:}" 400 128 "$engine" \
            | tail -1 | python3 -c "import json,sys; r=json.load(sys.stdin); r['engine']='$engine'; print(json.dumps(r))" \
            | tee -a "$results"
        first=$((first + ${level#*:}))
    done
}

stop() { kill "$1" 2>/dev/null; for _ in $(seq 80); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done; kill -9 "$1"; }

if [ -n "${QUANT_GGUF:-}" ]; then
    # The weights' GPU memory on a quantised file: llama.cpp's model buffer, kiln's load line.
    "$LLAMA_SERVER" -m "$QUANT_GGUF" --port "$PORT" -ngl 99 -np 1 -c 4096 > "$OUT/llama-server-quant.log" 2>&1 &
    pid=$!
    up "$pid" "$OUT/llama-server-quant.log"
    stop "$pid"
    grep -E "model buffer size|KV buffer size|compute buffer size" "$OUT/llama-server-quant.log" | tee "$OUT/memory.txt"
    for q4k in 128 256; do
        KILN_QUANT_Q4K=$q4k RUST_LOG=info "$BIN" bench --model "$QUANT_GGUF" --device cuda --prefill none \
            --decode 16 --depth 0 --concurrency 1 --repeats 1 > "$OUT/kiln-quant-$q4k.log" 2>&1
        echo "kiln KILN_QUANT_Q4K=$q4k: $(grep -iE 'weights' "$OUT/kiln-quant-$q4k.log" | head -3 | tr '\n' ' ')" | tee -a "$OUT/memory.txt"
    done
fi

if [ -n "$KILN_LEVELS" ]; then
    "$BIN" serve --model "$GGUF" --device cuda --port "$PORT" --served-model-name kiln --max-num-seqs 256 \
        > "$OUT/kiln-serve.log" 2>&1 &
    pid=$!
    up "$pid" "$OUT/kiln-serve.log" && loads kiln kiln "$KILN_LEVELS"
    stop "$pid"
fi

"$LLAMA_SERVER" -m "$GGUF" --port "$PORT" -ngl 99 -np 128 -c 131072 -fa on -cb > "$OUT/llama-server.log" 2>&1 &
pid=$!
up "$pid" "$OUT/llama-server.log" && loads llama.cpp "$(basename "$GGUF")" "$LEVELS"
stop "$pid"
