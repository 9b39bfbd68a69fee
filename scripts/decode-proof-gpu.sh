#!/usr/bin/env bash
# Issue 18's goals in one configuration and one call, beside llama.cpp on the file of the same
# weights (prefill 2k, batch 1 at depth 0 and 512, 32 / 128 streams after a 512-token prompt;
# scripts/bench-gpu.sh), then served at 1, 32, 128 and 256 clients (scripts/serve-gpu.sh), then
# llama-server at the same levels:
# - WEIGHTS=fp8 (default): `--quantize fp8` (the F16 file quantised at load for serving) beside
#   llama.cpp on the Q8_0 file, decode rows in the fp8 wgmma row order on sm_90 (wg_rows.rs; with
#   KILN_FP8_WG=0 in the fp8 skinny and wide kernels, KILN_FP8_SKINNY=1 here). Needs
#   `scripts/gpu-prepare.sh llama llama3 q8` (or `quant`) done.
# - WEIGHTS=bf16: the F16 file as kiln stores it (bf16) beside llama.cpp on the same file; set
#   KILN_BF16_WG=1 for the bf16 wgmma row order. Needs `scripts/gpu-prepare.sh llama llama3`.
# Start the preparation in the call before (the build and the files take 400-550 s); the carried
# kiln binary is used.
# Usage: OUT=... [WEIGHTS=fp8|bf16] [WAIT_S=300] scripts/decode-proof-gpu.sh   (about 260 s once
#   the preparation is done: 238 s on the H200 on 2026-12-05)
#   PREFILL, DEPTHS, STREAMS and REPEATS pass to bench-gpu.sh (defaults 2048 / 0,512 / 1,32,128 /
#   2); PREFILL=2048,8192 DEPTHS=0,8192 STREAMS=1,8,32,128 adds issue 17's lengths (with
#   LLAMA_LEVELS="" to fit one call).
#   LEVELS (clients:requests, "1:4 32:64 128:256 256:512"), SERVE_EXTRA (more server arguments, e.g.
#   "--max-batched-tokens 4096") and SERVE_S (120, the serving's seconds) pass to serve-gpu.sh;
#   LLAMA_LEVELS ("1:4 32:64 128:256 256:512"; "" for none) and LLAMA_SERVE_S (230) to
#   llama-server's run after it (scripts/serve-vs.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder the results go to}
WEIGHTS=${WEIGHTS:-fp8}
[ -f .carry/bin/kiln ] || xz -dk .carry/bin/kiln.xz
case "$WEIGHTS" in
    fp8)
        export KILN_FP8_SKINNY=${KILN_FP8_SKINNY:-1}
        parts="llama llama3 q8"
        gguf=/tmp/kiln-bench/llama3-8b-q8_0.gguf
        args="--quantize fp8"
        ;;
    bf16)
        parts="llama llama3"
        gguf=/tmp/kiln-bench/llama3-8b-f16.gguf
        args=""
        ;;
    *) echo "decode-proof-gpu: WEIGHTS fp8 or bf16, not $WEIGHTS"; exit 2 ;;
esac
# shellcheck disable=SC2086 # the parts are words
WAIT_S=${WAIT_S:-300} scripts/gpu-wait.sh $parts || exit 1
OUT=$OUT/bench GGUF=$gguf KILN_ARGS="$args" \
    PREFILL=${PREFILL:-2048} DEPTHS=${DEPTHS:-0,512} STREAMS=${STREAMS:-1,32,128} \
    REPEATS=${REPEATS:-2} SKIP_GGUF=1 SKIP_BUILD=1 SKIP_HF=1 \
    timeout 330 scripts/bench-gpu.sh /tmp/llamacpp-src/llama.cpp
# shellcheck disable=SC2086 # the arguments are words
LEVELS=${LEVELS:-1:4 32:64 128:256 256:512} SERVE_ARGS="$args ${SERVE_EXTRA:-}" BENCH_ARGS="$args" BUDGETS="" OVERLAP_OFF=0 \
    BUDGET_S=${SERVE_S:-120} OUT=$OUT/serve timeout $(( ${SERVE_S:-120} + 30 )) scripts/serve-gpu.sh
# llama-server on llama.cpp's file under the same load (LLAMA_LEVELS; "" skips it).
LLAMA_LEVELS=${LLAMA_LEVELS-"1:4 32:64 128:256 256:512"}
if [ -n "$LLAMA_LEVELS" ]; then
    KILN_LEVELS="" LEVELS="$LLAMA_LEVELS" OUT=$OUT/llama-serve timeout "${LLAMA_SERVE_S:-230}" \
        scripts/serve-vs.sh "$gguf" /tmp/llamacpp-build/bin/llama-server
fi
