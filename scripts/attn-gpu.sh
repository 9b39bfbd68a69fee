#!/usr/bin/env bash
# Attention on the GPU machine in one call, under 3 minutes: the attention contract (every
# prefill and decode kernel against float64, the bit-for-bit identities, and the planted bugs
# it must catch; SKIP_CONTRACT=1 leaves it to scripts/gpu-check.sh), the kernels' speed
# (`cuda_bench llama3-8b attn`), an Nsight Compute profile of one launch of each prefill
# family, torch SDPA on the same shapes, prefill end to end with flash_sm90, the defaults'
# `cuda_bench llama3-8b deep`, decode_mma with fewer splits (KILN_DECODE_SPLITS), and the
# invariance suite with flash_sm90, while time remains.
# Needs the executables from scripts/build-gpu-carry.sh in .carry/. Logs under $OUT (default
# ./attn-gpu-out); the summary comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/attn-gpu-out}"
mkdir -p "$OUT"
source scripts/carry-run-env.sh

# 1. The contract, each family in a process of its own (a kernel that faults takes its
# process's CUDA context with it; a hang costs only its own time). The first run compiles the
# kernels into the cache.
contract=$(exe test contract_attention)
families="attention_contract attention_contract_decode_mma attention_contract_flash_sm90 planted::planted_bugs_fail"
[ "${SKIP_CONTRACT:-0}" = 1 ] && families=""
[ -n "$families" ] && TOTAL_S=$((TOTAL_S + 180))
for t in $families; do
    log="$OUT/contract-${t##*::}.log"
    budget 75 "$contract" --include-ignored --exact "$t" --test-threads=1 --nocapture > "$log" 2>&1
    say "$t: rc=$?, $(checks "$log")"
    grep -E "\] FAIL |panicked|^SKIP" "$log" | head -8 | cut -c1-220 | sed 's/^/    /' | tee -a "$summary"
done

# 2. Kernel speed: prefill first (flash_sm90 is the question), then torch SDPA on the same
# shapes, then decode.
budget 40 "$bench" llama3-8b attn prefill > "$OUT/attn-prefill.json" 2> "$OUT/attn-prefill.log"
say "cuda_bench attn prefill: rc=$?"

# 3. Nsight Compute: one launch of each prefill family (hd 128, the last 2048 rows of an 8k
# prompt): speed of light, warp states, schedulers, memory, pipes.
ncu=/usr/local/cuda/bin/ncu
[ -x "$ncu" ] || ncu=$(command -v ncu || true)
if [ -n "$ncu" ]; then
    sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats
              --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis)
    tensor=(--metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active)
    prof() { budget 45 "$ncu" --clock-control none -k regex:flash -c 4 "${sections[@]}" "$@" \
                 -o "$OUT/flash-profile" -f "$bench" llama3-8b attn profile > "$OUT/ncu.log" 2>&1; }
    # The tensor-pipe metrics by name; again without them if this ncu does not know a name.
    prof "${tensor[@]}"; rc=$?
    if [ $rc != 0 ] && grep -qi "metric" "$OUT/ncu.log"; then prof; rc=$?; fi
    say "ncu flash profile: rc=$rc"
    "$ncu" -i "$OUT/flash-profile.ncu-rep" --page details > "$OUT/ncu-details.txt" 2>&1
    "$ncu" -i "$OUT/flash-profile.ncu-rep" --page raw --csv > "$OUT/ncu-raw.csv" 2>> "$OUT/ncu.log"
    python3 scripts/bench/ncu_summary.py "$OUT/ncu-raw.csv" > "$OUT/ncu-summary.txt" 2>&1
    grep -h "ERROR\|WARN" "$OUT/ncu.log" | head -4 | cut -c1-200 | sed 's/^/    /' | tee -a "$summary"
else
    say "ncu: not found"
fi

budget 35 python3 scripts/bench/sdpa_bench.py > "$OUT/sdpa.json" 2> "$OUT/sdpa.log"
say "sdpa_bench: rc=$? (torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))"

# 4. End to end: prefill with flash_sm90 (overlapped, then taking turns); the decode kernels;
# then the defaults' deep run (sm80 prefill, decode_mma at depth 8k, batch 1/8/32, a verify
# step).
e2e() { # RUN MODE SECONDS [VAR=VALUE...]
    local run=$1 mode=$2 secs=$3; shift 3
    budget "$secs" env "$@" "$bench" llama3-8b "$mode" > "$OUT/e2e-$run.json" 2> "$OUT/e2e-$run.log"
    say "cuda_bench $mode ($run${*:+: $*}): rc=$?"
}
e2e sm90o-prefill prefill 30 KILN_FLASH_ATTN=sm90
e2e sm90p-prefill prefill 30 KILN_FLASH_ATTN=sm90 KILN_FLASH_PINGPONG=1
budget 30 "$bench" llama3-8b attn decode > "$OUT/attn-decode.json" 2> "$OUT/attn-decode.log"
say "cuda_bench attn decode: rc=$?"
e2e default-deep deep 45
runs="sm90o-prefill sm90p-prefill default-deep"
# decode_mma with at most 16 or 32 splits a row instead of 64: fewer, longer CTAs.
for n in 16 32; do
    KILN_DECODE_SPLITS=$n budget 25 "$bench" llama3-8b attn decode-mma > "$OUT/attn-decode-splits$n.json" 2> "$OUT/attn-decode-splits$n.log"
    say "cuda_bench attn decode-mma (KILN_DECODE_SPLITS=$n): rc=$?"
done

# 5. The backend with flash_sm90: invariance (alone == batched == chunked), if time remains.
t=backend_invariance
KILN_FLASH_ATTN=sm90 budget 40 "$(exe test $t)" --include-ignored --test-threads=1 --nocapture > "$OUT/sm90-$t.log" 2>&1
say "$t (KILN_FLASH_ATTN=sm90): rc=$?, $(checks "$OUT/sm90-$t.log")"

# Summary: the figures side by side.
say ""
say "SUMMARY ($(( $(date +%s) - start )) s)"
grep -h "^BENCH flash" "$OUT/attn-prefill.log" 2>/dev/null | sed 's/^BENCH //' | tee -a "$summary"
grep -h "^SDPA .*causal" "$OUT/sdpa.log" 2>/dev/null | grep -v unsupported | tee -a "$summary"
cat "$OUT/ncu-summary.txt" 2>/dev/null | cut -c1-400 | tee -a "$summary"
grep -h "^BENCH decode_attn" "$OUT/attn-decode.log" 2>/dev/null | sed 's/^BENCH //' | tee -a "$summary"
for n in 16 32; do grep -h "^BENCH decode_attn" "$OUT/attn-decode-splits$n.log" 2>/dev/null | sed "s/^BENCH /splits $n: /" | tee -a "$summary"; done
grep -h "^SDPA decode" "$OUT/sdpa.log" 2>/dev/null | tee -a "$summary"
for run in $runs; do grep -h "^BENCH" "$OUT/e2e-$run.log" 2>/dev/null | sed "s/^BENCH /$run: /" | tee -a "$summary"; done
if grep -q "\] FAIL \|panicked" "$OUT"/contract-*.log "$OUT"/sm90-*.log 2>/dev/null; then
    say "RESULT: failures (see above and $OUT)"
    exit 1
fi
say "RESULT: no failures"
