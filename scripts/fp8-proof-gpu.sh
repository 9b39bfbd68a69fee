#!/usr/bin/env bash
# Issue 18's goals in one configuration and one call: `--quantize fp8` with its decode rows in
# the fp8 skinny and wide kernels (KILN_FP8_SKINNY=1; fp8_skinny.rs) beside llama.cpp on the
# Q8_0 file (prefill 2k / 8k, batch 1 at depth 0 and 8k, 8 / 32 / 128 streams after a 512-token
# prompt), then served at 1 and 128 clients (scripts/serve-gpu.sh, the F16 file quantised at
# load). Needs the products of `scripts/gpu-prepare.sh llama llama3 quant` on the machine (start
# it in the call before: the build and the files take 400-550 s) and the carried kiln binary.
# With KILN_FP8_WG=1 set, the decode rows take the fp8 wgmma kernels instead (wg_rows.rs; they
# take precedence over the skinny ones).
# Usage: OUT=... [WAIT_S=300] [KILN_FP8_WG=1] scripts/fp8-proof-gpu.sh   (about 480 s; results under $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder the results go to}
export KILN_FP8_SKINNY=${KILN_FP8_SKINNY:-1}
[ -f .carry/bin/kiln ] || xz -dk .carry/bin/kiln.xz
WAIT_S=${WAIT_S:-300} scripts/gpu-wait.sh llama llama3 quant || exit 1
OUT=$OUT/bench GGUF=/tmp/kiln-bench/llama3-8b-q8_0.gguf KILN_ARGS="--quantize fp8" \
    PREFILL=2048,8192 DEPTHS=0,8192 STREAMS=1,8,32,128 REPEATS=2 SKIP_GGUF=1 SKIP_BUILD=1 SKIP_HF=1 \
    timeout 330 scripts/bench-gpu.sh /tmp/llamacpp-src/llama.cpp
LEVELS="1:4 128:256" SERVE_ARGS="--quantize fp8" BUDGETS="" OVERLAP_OFF=0 BUDGET_S=120 \
    OUT=$OUT/serve timeout 150 scripts/serve-gpu.sh
