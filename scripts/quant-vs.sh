#!/usr/bin/env bash
# Issue 16's proof in one GPU call: kiln at its defaults beside llama.cpp on the llama-quantize'd
# Q4_K_M and Q8_0 files of the random Llama-3-8B F16 GGUF (kiln bench --vs llama.cpp: decode at
# depth 0 and 8k, batch 1/8/32, prefill 2k/8k), kiln's F16 prefill on the same shape (the
# quantised files' prefill is judged against it), and the weights' GPU memory of both engines
# (kiln's load line; llama-server's `CUDA0 model buffer size`, printed at -lv 4).
# Needs .carry/ (scripts/build-gpu-carry.sh) and the products of scripts/gpu-prepare.sh
# (llama llama3 quant), which take about 8 minutes on a fresh machine: start that in the
# background in the call before (setsid scripts/gpu-prepare.sh llama llama3 quant &).
# About 3 minutes. JSON and logs under $OUT/vs; the rows (scripts/bench-rows.py) last.
# Usage: OUT=... scripts/quant-vs.sh   Environment: WAIT_S (200), FILES ("q4_k_m q8_0").
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_KERNEL_CACHE=${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache} RUST_LOG=info RUST_BACKTRACE=0
export KILN_COMMIT="${KILN_COMMIT:-$(cat .carry/commit.txt 2>/dev/null || echo unknown)}"
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
B=/tmp/llamacpp-build/bin D=/tmp/kiln-bench K=.carry/bin/kiln L=${OUT:-$PWD/quant-vs-out}/vs
mkdir -p "$L"
WAIT_S=${WAIT_S:-200} scripts/gpu-wait.sh quant || { tail -5 $D/prepare.log; exit 1; }
run() { # NAME LIMIT_S COMMAND...: one run, its weights line
    local name=$1 lim=$2 t0=$SECONDS
    shift 2
    timeout "$lim" "$@" > "$L/$name.txt" 2> "$L/$name.log"
    echo "$name rc $? $((SECONDS - t0)) s; $(grep -o 'weights [0-9.]* GiB[^;]*' "$L/$name.log" | head -1)"
}
for w in ${FILES:-q4_k_m q8_0}; do
    run "$w-vs" 260 $K bench --model "$D/llama3-8b-$w.gguf" --device cuda --prefill 2048,8192 \
        --decode 128 --depth 0,8192 --concurrency 1,8,32 --repeats 2 \
        --vs "llama.cpp=$B/llama-bench" --json "$L/$w-vs.json"
done
run f16 60 $K bench --model $D/llama3-8b-f16.gguf --device cuda --prefill 2048,8192 --decode 0 \
    --repeats 2 --json "$L/f16.json"
for w in ${FILES:-q4_k_m q8_0}; do
    log=$L/llama-server-$w.log
    ( timeout 60 $B/llama-server -m "$D/llama3-8b-$w.gguf" -ngl 99 --port 8091 -np 1 -c 4096 -lv 4 > "$log" 2>&1 & )
    for _ in $(seq 60); do curl -sf http://127.0.0.1:8091/health > /dev/null && break; sleep 0.5; done
    pkill -f "llama-server -m $D/llama3-8b-$w.gguf"
    sleep 1
    echo "llama.cpp $w: $(grep -E 'model buffer size' "$log" | sed 's/.*load_tensors: *//' | tr -s ' ' | tr '\n' ';')"
done
python3 scripts/bench-rows.py "$L"/*.json 2>&1 | tail -60
