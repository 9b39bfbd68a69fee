#!/usr/bin/env bash
# Attention on the GPU machine in one call, under 4 minutes: the attention contract (every
# prefill and decode kernel against float64, the bit-for-bit identities, and the planted bugs
# it must catch), the kernels' speed (`cuda_bench llama3-8b attn`), torch SDPA on the same
# shapes, the invariance suites with the new kernels switched on, and the backend figures
# attention moves (`cuda_bench llama3-8b deep`) with the new kernels and without.
# Needs the executables from scripts/build-gpu-carry.sh in .carry/. Logs under $OUT (default
# ./attn-gpu-out); the summary comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/attn-gpu-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_REQUIRE_GPU=1
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
export RUST_BACKTRACE=0
manifest=.carry/manifest.txt
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
[ -f "$manifest" ] || { echo "FAIL: $manifest missing (run scripts/build-gpu-carry.sh first)"; exit 1; }
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
exe() { awk -v k="$1" -v n="$2" '$1==k && $2==n {print ".carry/"$3}' "$manifest"; }
start=$(date +%s)
left() { echo $(( 235 - ($(date +%s) - start) )); }
# Runs "$@" for at most min($1, time left) seconds.
budget() { local t=$1; shift; local l; l=$(left); [ "$l" -lt "$t" ] && t=$l; [ "$t" -lt 5 ] && return 124; timeout "$t" "$@"; }
checks() { echo "$(grep -c '\] PASS ' "$1") pass, $(grep -c '\] FAIL \|panicked' "$1") fail"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1 | tee -a "$summary"

# 1. The contract, each family in a process of its own (a kernel that faults takes its
# process's CUDA context with it; a hang costs only its own time). The first run compiles the
# kernels into the cache.
contract=$(exe test contract_attention)
# SKIP_CONTRACT=1: the contract ran already in this call (scripts/gpu-check.sh runs it among the tests).
families="attention_contract attention_contract_decode_mma attention_contract_flash_sm90 planted_bugs_fail"
[ "${SKIP_CONTRACT:-0}" = 1 ] && families=""
for t in $families; do
    budget 75 "$contract" --include-ignored --exact "$t" --test-threads=1 --nocapture > "$OUT/contract-$t.log" 2>&1
    say "$t: rc=$?, $(checks "$OUT/contract-$t.log")"
    grep -E "\] FAIL |panicked|^SKIP" "$OUT/contract-$t.log" | head -8 | cut -c1-220 | sed 's/^/    /' | tee -a "$summary"
done

# 2. Kernel speed (decode and prefill in processes of their own), then torch SDPA on the same
# shapes.
bench=$(exe bench cuda_bench)
for part in decode prefill; do
    budget 45 "$bench" llama3-8b attn $part > "$OUT/attn-$part.json" 2> "$OUT/attn-$part.log"
    say "cuda_bench attn $part: rc=$?"
done
budget 45 python3 scripts/bench/sdpa_bench.py > "$OUT/sdpa.json" 2> "$OUT/sdpa.log"
say "sdpa_bench: rc=$? (torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))"

# 3. The backend with the new kernels: invariance (alone == batched == chunked) and verify rows.
for t in backend_invariance verify_rows; do
    KILN_FLASH_ATTN=sm90 KILN_DECODE_ATTN=mma budget 40 "$(exe test $t)" --include-ignored --test-threads=1 --nocapture > "$OUT/new-$t.log" 2>&1
    say "$t (KILN_FLASH_ATTN=sm90 KILN_DECODE_ATTN=mma): rc=$?, $(checks "$OUT/new-$t.log")"
done

# 4. Backend figures: new kernels, the defaults (sm80 and simt), then the new kernels with
# prefill chunks of 8192 (the GEMMs at a larger m), while time remains.
runs="new old new-chunk8192"
for run in $runs; do
    flash=sm80 decode=simt chunk=2048
    case $run in new*) flash=sm90 decode=mma ;; esac
    case $run in *chunk8192) chunk=8192 ;; esac
    KILN_FLASH_ATTN=$flash KILN_DECODE_ATTN=$decode budget 45 "$bench" llama3-8b deep chunk=$chunk > "$OUT/deep-$run.json" 2> "$OUT/deep-$run.log"
    say "cuda_bench deep ($run: KILN_FLASH_ATTN=$flash KILN_DECODE_ATTN=$decode chunk=$chunk): rc=$?"
done

# Summary: the figures side by side.
say ""
say "SUMMARY ($(( $(date +%s) - start )) s)"
grep -h "^BENCH flash" "$OUT/attn-prefill.log" 2>/dev/null | sed 's/^BENCH //' | tee -a "$summary"
grep -h "^SDPA .*causal" "$OUT/sdpa.log" 2>/dev/null | grep -v unsupported | tee -a "$summary"
grep -h "^BENCH decode_attn" "$OUT/attn-decode.log" 2>/dev/null | sed 's/^BENCH //' | tee -a "$summary"
grep -h "^SDPA decode" "$OUT/sdpa.log" 2>/dev/null | tee -a "$summary"
for run in $runs; do grep -h "^BENCH" "$OUT/deep-$run.log" 2>/dev/null | sed "s/^BENCH /$run: /" | tee -a "$summary"; done
if grep -q "\] FAIL \|panicked" "$OUT"/contract-*.log "$OUT"/new-*.log; then
    say "RESULT: failures (see above and $OUT)"
    exit 1
fi
say "RESULT: contract and invariance passed"
