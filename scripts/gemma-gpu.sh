#!/usr/bin/env bash
# The Gemma 4 checks on the GPU machine, under 3 minutes: the contracts of gemma.cu (the fused
# post-norms included) and of the 512-wide attention kernels (KILN_ATTN_HEAD_DIMS=512: the split
# flash kernel, the tensor-core decode, their planted bugs); GPU vs CPU parity on the Gemma 4
# fixtures and dummies in bf16 and f16 (held to the CPU's emulation of the GPU's storage); then
# with the other variants (ALT below: post-norms apart, the recomputing wide flash, the
# tensor-core wide decode) parity, batch and chunk invariance, graphs vs eager and verify rows;
# and `kiln bench` of dummy:gemma4-e4b with the defaults and with ALT (prefill 2k/8k/32k, decode
# at depth 0 and 8k). All with KILN_REQUIRE_GPU=1. Needs the executables of scripts/build-gpu-carry.sh in
# .carry/ (kernels_compile runs on the build machine). Writes one log per part under $OUT
# (default ./gemma-gpu-out) and report.txt, and prints the summary last.
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
ALT="KILN_GEMMA_FUSE=0 KILN_FLASH_WIDE=recompute KILN_DECODE_WIDE=mma"
# label limit name [test-name filters...] (environment for the test: $RUN_ENV): the executable's
# log, its checks, and a line in the report.
run_test() {
    local label=$1 cap=$2 name=$3
    shift 3
    local path
    path=$(awk -v n="$name" '$1=="test" && $2==n {print $3}' "$manifest")
    if [ -z "$path" ]; then
        say "$label: not in the carry"
        printf "%s\tMISSING\n" "$label" >> "$results"
        return
    fi
    local left=$(( 175 - ($(date +%s) - start) ))
    if [ "$left" -lt 10 ]; then
        say "$label: not run, out of time"
        printf "%s\tSKIPPED\n" "$label" >> "$results"
        return
    fi
    [ "$left" -gt "$cap" ] && left=$cap
    local log="$OUT/test-$label.log" t0 rc status
    t0=$(date +%s)
    env ${RUN_ENV:-} timeout "$left" ".carry/$path" --include-ignored --test-threads=1 --nocapture "$@" > "$log" 2>&1
    rc=$?
    status=ok
    [ $rc -ne 0 ] && status=FAILED
    [ $rc -eq 124 ] && status=TIMEOUT
    printf "%s\t%s\n" "$label" "$status" >> "$results"
    say "$(printf "%-26s %-8s %4ss  checks: %d pass, %d fail, %d skip" "$label" "$status" "$(( $(date +%s) - t0 ))" \
        "$(grep -c "\] PASS \|^PASS " "$log")" "$(grep -c "\] FAIL \|^FAIL \|panicked" "$log")" "$(grep -c "^SKIP " "$log")")"
    grep -A1 -E "\] FAIL |^FAIL |panicked|^SKIP " "$log" | grep -v "^--$" | head -12 | sed 's/^/    /' | tee -a "$report"
}

bench() { # label [VAR=VALUE...]: kiln bench of dummy:gemma4-e4b
    local label=$1
    shift
    local kiln
    kiln=$(awk '$1=="bin" && $2=="kiln" {print $3}' "$manifest")
    if [ -z "$kiln" ]; then
        say "bench $label: no kiln binary in the carry"
        printf "bench-%s\tMISSING\n" "$label" >> "$results"
        return
    fi
    local left=$(( 175 - ($(date +%s) - start) ))
    if [ "$left" -lt 15 ]; then
        say "bench $label: not run, out of time"
        printf "bench-%s\tSKIPPED\n" "$label" >> "$results"
        return
    fi
    [ "$left" -gt 40 ] && left=40
    say "kiln bench dummy:gemma4-e4b, $label ($*):"
    env "$@" RUST_BACKTRACE=0 timeout "$left" ".carry/$kiln" bench --model dummy:gemma4-e4b --device cuda \
        --prefill 2048,8192,32768 --depth 0,8192 --concurrency 1 --decode 64 --repeats 2 \
        --json "$OUT/bench-$label.json" > "$OUT/bench-$label.log" 2>&1
    local brc=$?
    grep -v "^\s*$" "$OUT/bench-$label.log" | tail -9 | sed 's/^/    /' | tee -a "$report"
    if [ $brc -ne 0 ]; then
        say "    bench FAILED rc=$brc (see bench-$label.log)"
        printf "bench-%s\tFAILED\n" "$label" >> "$results"
    else
        printf "bench-%s\tok\n" "$label" >> "$results"
    fi
}

# Cheapest first: a kernel that breaks its contract shows before the models. The first test
# compiles every bf16 module into the kernel cache when no earlier part of the call did (about
# 40 s); the parts then run in order of importance, and those left when 175 s are spent are
# reported as skipped rather than overrun.
export KILN_ATTN_HEAD_DIMS=512
run_test contract_gemma 75 contract_gemma
run_test contract_attention_wide 40 contract_attention --exact attention_contract attention_contract_decode_mma planted::planted_bugs_fail
unset KILN_ATTN_HEAD_DIMS
bench defaults
# shellcheck disable=SC2086
bench alt $ALT
run_test backend_parity 30 backend_parity gpu_matches_cpu_on_dummy_models gpu_matches_cpu_on_fixtures \
    gpu_f16_matches_cpu_on_dummy_models gpu_f16_matches_cpu_on_fixtures
RUN_ENV=$ALT run_test backend_parity_alt 20 backend_parity gpu_matches_cpu_on_dummy_models gpu_matches_cpu_on_fixtures
RUN_ENV=$ALT run_test backend_invariance_alt 25 backend_invariance gpu_logits_are_batch_and_chunk_invariant
RUN_ENV=$ALT run_test graphs_parity_alt 20 graphs_parity gpu_graphs_give_the_tokens_of_eager_launches
RUN_ENV=$ALT run_test verify_rows_alt 15 verify_rows

total=$(( $(date +%s) - start ))
failed=$(awk -F'\t' '$2!="ok"{print $1}' "$results" | tr '\n' ' ')
say ""
say "SUMMARY ($total s): $(awk -F'\t' '$2=="ok"' "$results" | wc -l) of $(wc -l < "$results") parts ok${failed:+; not ok: $failed}"
[ -z "$failed" ]
