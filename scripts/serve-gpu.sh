#!/usr/bin/env bash
# The server on the GPU under the recorded serving workload (scripts/serve_load.py: unique 400-word
# prompts, 128 tokens, streamed /v1/completions) at 1 / 32 / 128 / 256 clients, with the engine's
# step overlap on and off (KILN_OVERLAP=0), then 128 clients at other --max-batched-tokens values.
# Before the loads, `kiln bench` decode at batch 1 and 128 for the ratios, and the one-client
# workload's own work (a 512-token prompt, then its tokens from depth 512: what a server adding
# nothing would give one client); with each server, an
# exactness check (overlap on and off give the same output; concurrent requests what they give
# alone). For each load, the engine's per-step split from /metrics: device busy and idle (CUDA
# events) against the host's phases (admit, schedule, launch, sample, output) and the time it
# waited for the device. About 5 minutes (under 6); logs, serve-results.json and summary.txt under
# $OUT, the summary printed last. In one GPU call: scripts/gpu-run.sh serve:360.
#
# Usage: scripts/serve-gpu.sh [MODEL]   (a .gguf path or HF folder; default the random Llama-3-8B GGUF
#   that `scripts/gpu-prepare.sh llama3` writes. Not a dummy: its byte tokens stream as few text
#   chunks, so serve_load.py counts almost no tokens)
# Needs the binary scripts/build-gpu-carry.sh leaves in .carry/ (unpacked here if compressed),
# python3 with aiohttp.
# Environment: OUT (./serve-gpu-out), KILN_BIN (.carry/bin/kiln), PORT (8012), MAX_SEQS (256),
#   LEVELS ("1:4 32:64 128:256 256:512", clients:requests), BUDGETS ("1024 4096 8192", the sweep at
#   SWEEP_CLIENTS=128; "" for none), PROMPT_WORDS (400), MAX_TOKENS (128), BENCH (1; 0 skips it),
#   BUDGET_S (330: sweep servers that would start later are skipped), SEQS (--max-num-seqs values
#   also run at SWEEP_CLIENTS; "" by default), OVERLAP_OFF (1; 0 runs the levels with overlap on only),
#   SERVE_ARGS (arguments every server gets, e.g. "--decode-gemm prefill-order"; none by default),
#   BENCH_ARGS (what `kiln bench` gets; SERVE_ARGS by default, so the ratios compare one mode).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT="${OUT:-$PWD/serve-gpu-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
[ -f .carry/bin/kiln.xz ] && [ ! -f .carry/bin/kiln ] && xz -dk .carry/bin/kiln.xz
python3 -c "import aiohttp" 2>/dev/null || { echo "serve_load.py needs aiohttp (pip install aiohttp)" >&2; exit 1; }
MODEL=${1:-/tmp/kiln-bench/llama3-8b-f16.gguf}
case $MODEL in dummy:*) echo "serve-gpu: $MODEL streams byte tokens that serve_load.py cannot count; give a model with a real vocabulary" >&2; exit 2 ;; esac
[ -e "$MODEL" ] || { echo "serve-gpu: no $MODEL (scripts/gpu-prepare.sh llama3 writes it)" >&2; exit 2; }
timeout 350 python3 scripts/serve_gpu.py "$MODEL" 2>&1 | tee "$OUT/serve-gpu.log"
exit "${PIPESTATUS[0]}"
