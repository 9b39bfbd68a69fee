#!/usr/bin/env bash
# The Gemma 4 checks on the GPU machine: the kernel contracts Gemma 4 adds or widens (gemma.cu,
# the QKV kinds, head dim 512 in attn_wide.cu), footprint, and the backend tests (GPU vs CPU
# parity, batch and chunk invariance, graphs vs eager, device sampling, verify rows) on the
# Gemma 4 fixtures and dummies, all with KILN_REQUIRE_GPU=1; then `kiln bench` of
# dummy:gemma4-e4b (prefill 2k and 8k, decode at depth 0). Needs the executables of
# scripts/build-gpu-carry.sh in .carry/. Writes one log per part under $OUT (default
# ./gemma-gpu-out) and report.txt, and prints the summary last. Bounded to about 4 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gemma-gpu-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_REQUIRE_GPU=1
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
manifest=.carry/manifest.txt
report="$OUT/report.txt"
: > "$report"
say() { echo "$*" | tee -a "$report"; }

if [ ! -f "$manifest" ]; then
    say "FAIL: $manifest missing (run scripts/build-gpu-carry.sh on the build machine first)"
    exit 1
fi
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
commit=$(cat .carry/commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
say "kiln gemma-gpu $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $commit"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$report"
start=$(date +%s)

# Only the Gemma 4 fixtures, so the fixture-wide tests spend their time on them.
fixtures="$OUT/fixtures"
rm -rf "$fixtures"
mkdir -p "$fixtures"
for d in "$PWD"/tests/fixtures/gemma4*/; do ln -s "${d%/}" "$fixtures/$(basename "$d")"; done
export KILN_FIXTURES="$fixtures"
say "fixtures: $(ls "$fixtures" | tr '\n' ' ')"

results="$OUT/results.tsv"
: > "$results"
# name [test-name filters...]: the executable's log, its checks, and a line in the report.
run_test() {
    local name=$1
    shift
    local path
    path=$(awk -v n="$name" '$1=="test" && $2==n {print $3}' "$manifest")
    if [ -z "$path" ]; then
        say "$name: not in the carry"
        printf "%s\tMISSING\n" "$name" >> "$results"
        return
    fi
    # Keep 75 s for the benchmark within the 4-minute budget.
    local left=$(( 165 - ($(date +%s) - start) ))
    if [ "$left" -lt 10 ]; then
        say "$name: not run, out of time"
        printf "%s\tSKIPPED\n" "$name" >> "$results"
        return
    fi
    [ "$left" -gt 90 ] && left=90
    local log="$OUT/test-$name.log" t0 rc status
    t0=$(date +%s)
    timeout "$left" ".carry/$path" --include-ignored --test-threads=1 --nocapture "$@" > "$log" 2>&1
    rc=$?
    status=ok
    [ $rc -ne 0 ] && status=FAILED
    [ $rc -eq 124 ] && status=TIMEOUT
    printf "%s\t%s\n" "$name" "$status" >> "$results"
    say "$(printf "%-20s %-8s %4ss  checks: %d pass, %d fail, %d skip" "$name" "$status" "$(( $(date +%s) - t0 ))" \
        "$(grep -c "\] PASS \|^PASS " "$log")" "$(grep -c "\] FAIL \|^FAIL \|panicked" "$log")" "$(grep -c "^SKIP " "$log")")"
    grep -A1 -E "\] FAIL |^FAIL |panicked|^SKIP " "$log" | grep -v "^--$" | head -16 | sed 's/^/    /' | tee -a "$report"
}

# Cheapest first: a kernel that does not compile or breaks its contract shows before the models.
# bf16 only: the f32/f16 variants and the other attention families belong to gpu-check.sh.
run_test kernels_compile
run_test contract_gemma
run_test contract_rows
run_test contract_attention --exact attention_contract planted_bugs_fail
run_test footprint
run_test backend_parity gpu_matches_cpu_on_dummy_models gpu_matches_cpu_on_fixtures \
    gpu_f16_matches_cpu_on_dummy_models gpu_f16_matches_cpu_on_fixtures
run_test backend_invariance gpu_logits_are_batch_and_chunk_invariant
run_test graphs_parity gpu_graphs_give_the_tokens_of_eager_launches
run_test contract_sampling backend_samples_fixture_models
run_test verify_rows

kiln=$(awk '$1=="bin" && $2=="kiln" {print $3}' "$manifest")
if [ -n "$kiln" ]; then
    left=$(( 230 - ($(date +%s) - start) ))
    [ "$left" -gt 90 ] && left=90
    say "benchmark (kiln bench, dummy:gemma4-e4b, --device cuda):"
    RUST_BACKTRACE=0 timeout "$left" ".carry/$kiln" bench --model dummy:gemma4-e4b --device cuda \
        --prefill 2048,8192 --depth 0 --concurrency 1 --decode 128 --repeats 2 \
        --json "$OUT/bench-gemma4-e4b.json" > "$OUT/bench.log" 2>&1
    brc=$?
    grep -v "^\s*$" "$OUT/bench.log" | tail -14 | sed 's/^/    /' | tee -a "$report"
    if [ $brc -ne 0 ]; then
        say "    bench FAILED rc=$brc (see bench.log)"
        printf "bench\tFAILED\n" >> "$results"
    else
        printf "bench\tok\n" >> "$results"
    fi
else
    say "bench: no kiln binary in the carry (built without KILN_CARRY_SKIP_BIN=1?)"
    printf "bench\tMISSING\n" >> "$results"
fi

total=$(( $(date +%s) - start ))
failed=$(awk -F'\t' '$2!="ok"{print $1}' "$results" | tr '\n' ' ')
say ""
say "SUMMARY ($total s): $(awk -F'\t' '$2=="ok"' "$results" | wc -l) of $(wc -l < "$results") parts ok${failed:+; not ok: $failed}"
[ -z "$failed" ]
