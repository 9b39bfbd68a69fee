#!/usr/bin/env bash
# Quantised weights on the GPU machine, in one call (needs .carry/ from scripts/build-gpu-carry.sh,
# with the kiln binary): the quantised-weight GPU tests (kernel contracts, CPU parity, footprint,
# invariance, verify rows, graphs; KILN_REQUIRE_GPU=1), the skinny kernels' bandwidth lines, then
# `kiln bench` on each quantised GGUF given (decode at depth 0 and 8k, batch 1/8/32, prefill
# 128/2k/8k) and A/Bs of the quantised path's switches on the same file: decode through the first
# family of quantised decode kernels (KILN_QUANT_DECODE=v1; depth 0, batch 1 and 32), one 16-row
# tile a CTA (KILN_QUANT_TILES=1; batch 8 and 32), the first bf16 expansion kernel
# (KILN_QUANT_EXPAND=words; prefill 2k), the embedding on the GPU instead of in pinned host
# memory (KILN_QUANT_EMBED=device; prefill 2k, batch-1 decode), the launches apart from the
# GEMMs (KILN_QUANT_FUSE=none; batch 1, 8, 32) and Q4_K, then Q4_K and Q6_K, in 128-k records
# (KILN_QUANT_Q4K=128, KILN_QUANT_Q6K=128, Q4_K_M only; prefill 2k, batch 1 and 32), on the first
# file only
# (AB_ALL=1: every file). The
# expansion at load (KILN_GPU_QUANT=0) and KILN_QUANT_PREFILL=skinny were measured on 2026-12-02
# (docs/BENCH.md) and are no longer run here. Logs and JSON under $OUT; the summary last. About
# 4 minutes on an H200 for two 8B files (the files' creation and llama.cpp's runs not counted).
#
# TESTS_ONLY=1: only the quick tests, all with KILN_GPU_QUANT=1: footprint (which also fills a
# cold kernel cache), then in QUICK_BUDGET_S (default 85 s) quant_parity, verify_rows, the
# decode kernels' contract (both families), the quantised invariance cases and quant_parity with
# Q4_K in 128-k records and with the embedding on the GPU; each test's limit is cut to what
# remains and a test that no longer fits is named as skipped (a failure, but for the opt-in
# ones).
#
# Usage: scripts/quant-gpu.sh [LABEL=]GGUF ...   e.g. q4_k_m=/tmp/llama3-8b-q4_k_m.gguf q8_0=/tmp/llama3-8b-q8_0.gguf
#   LABEL is the `weights` field of the results (default: q4_k_m, q8_0, q4_0, q6_k or f16
#   found in the file's name). With no file, dummy:llama3-8b:q4_k_m and dummy:llama3-8b:q8_0
#   (random blocks of the same shapes) are benchmarked instead.
# Environment: OUT (default ./quant-gpu-out), QUANT_GGUFS (files when no argument is given),
#   TESTS_ONLY=1, QUICK_BUDGET_S, SKIP_TESTS=1, SKIP_BANDWIDTH=1, SKIP_BENCH=1, SKIP_AB=1 (no A/B),
#   AB_ALL=1,
#   BENCH_REPEATS (default 2),
#   VS_LLAMA=PATH/llama-bench (also run llama.cpp on each file through `kiln bench --vs`).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/quant-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_FIXTURES="${KILN_FIXTURES:-$PWD/tests/fixtures}"
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
export KILN_COMMIT="${KILN_COMMIT:-$(cat .carry/commit.txt 2>/dev/null || echo unknown)}"
# The quantised path is opt-in for now: on for every test and benchmark here.
export KILN_GPU_QUANT=1
manifest=.carry/manifest.txt
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
[ -f "$manifest" ] || { echo "no $manifest: run scripts/build-gpu-carry.sh on the build machine" >&2; exit 1; }
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
start=$SECONDS
note "kiln quant-gpu $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $KILN_COMMIT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"

exe() { awk -v n="$1" '$2==n {print $3}' "$manifest"; }
status=0

# Tests: each executable with a time limit, the quantised ones first. Under TESTS_ONLY the limit
# is also cut to what remains of QUICK_BUDGET_S.
run_test() { # NAME LIMIT_S [FILTER]
    local name=$1 limit=$2 path log rc pass fail
    if [ -n "${budget_end:-}" ]; then
        local left=$((budget_end - SECONDS))
        # An opt-in switch's test (OPTIONAL=1) that no longer fits is named but fails nothing.
        [ "$left" -lt 8 ] && { note "$name${TAG:-}: skipped (the ${QUICK_BUDGET_S:-85} s budget is spent)"; [ "${OPTIONAL:-0}" = 1 ] || status=1; return; }
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    path=$(exe "$name")
    if [ -z "$path" ]; then note "$name: not in the carry"; status=1; return; fi
    log="$OUT/test-$name${TAG:-}.log"
    KILN_REQUIRE_GPU=1 timeout "$limit" ".carry/$path" --include-ignored --test-threads=1 --nocapture ${3:-} > "$log" 2>&1
    rc=$?
    pass=$(grep -c "\] PASS \|^test .* ok$" "$log")
    fail=$(grep -c "\] FAIL \|panicked" "$log")
    [ $rc -ne 0 ] && status=1
    note "$(printf "%-32s rc %-3s %4d pass %3d fail" "$name${TAG:-}" "$rc" "$pass" "$fail")"
    grep -E "\] FAIL |panicked" "$log" | head -12 | cut -c1-220 | sed 's/^/    /' | tee -a "$summary"
}
if [ "${TESTS_ONLY:-0}" = 1 ]; then
    # The first test compiles every kernel module when the cache is cold (about 30 s; gpu-run.sh's
    # check part fills it first): footprint runs before the budget starts.
    run_test footprint 90
    budget_end=$((SECONDS + ${QUICK_BUDGET_S:-85}))
    run_test quant_parity 40
    run_test verify_rows 30
    run_test contract_quant 40 skinny_quant_contract
    run_test backend_invariance 30 quantised
    # Q4_K in 128-k records, the embedding on the GPU: CPU parity again, if time remains.
    OPTIONAL=1 KILN_QUANT_Q4K=128 KILN_QUANT_Q6K=128 TAG=-k128 run_test quant_parity 30
    KILN_QUANT_EMBED=device TAG=-embed-device run_test quant_parity 30
    note ""
    note "SUMMARY tests only ($((SECONDS - start)) s): $([ $status -eq 0 ] && echo ok || echo 'NOT ok, see above'); logs in $OUT"
    exit $status
fi
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    run_test quant_layout 30
    # planted_bugs_fail builds the module once for each of its seventeen bugs (NVRTC).
    run_test contract_quant 210 "skinny_quant_contract dequantised_rows_are_the_reference_values planted_bugs_fail"
    run_test quant_parity 80
    run_test footprint 40
    # The quantised cases of the invariance, verify-row and graph tests.
    run_test backend_invariance 60 quantised
    run_test verify_rows 40 quantised
    run_test graphs_parity 60 quantised
    # The embedding on the GPU: parity and the footprint again.
    KILN_QUANT_EMBED=device TAG=-embed-device run_test quant_parity 80
    KILN_QUANT_EMBED=device TAG=-embed-device run_test footprint 40
    # Q4_K and Q6_K in 128-k records: parity, footprint, invariance.
    KILN_QUANT_Q4K=128 KILN_QUANT_Q6K=128 TAG=-k128 run_test quant_parity 80
    KILN_QUANT_Q4K=128 KILN_QUANT_Q6K=128 TAG=-k128 run_test footprint 40
    KILN_QUANT_Q4K=128 KILN_QUANT_Q6K=128 TAG=-k128 run_test backend_invariance 60 quantised
    # The quantised epilogues apart, and the fused ones' contract.
    KILN_QUANT_FUSE=none TAG=-fuse-none run_test quant_parity 80
    run_test contract_quant_fused 120
    # Prefill rows through the quantised skinny kernels: invariance again.
    KILN_QUANT_PREFILL=skinny TAG=-prefill-skinny run_test backend_invariance 60 quantised
fi

# The skinny kernels' bandwidth on Llama-3-8B shapes (weights rotated past the L2).
if [ "${SKIP_TESTS:-0}" != 1 ] && [ "${SKIP_BANDWIDTH:-0}" != 1 ] && [ -n "$(exe contract_quant)" ]; then
    KILN_REQUIRE_GPU=1 timeout 90 ".carry/$(exe contract_quant)" --include-ignored --nocapture skinny_quant_bandwidth > "$OUT/bandwidth.log" 2>&1
    grep "BENCH" "$OUT/bandwidth.log" | sed 's/^\[skinny_quant\] BENCH /    /' > "$OUT/bandwidth.txt"
    note "skinny quant bandwidth ($(wc -l < "$OUT/bandwidth.txt") lines, bandwidth.txt): m=1 lines:"
    grep " m=1 " "$OUT/bandwidth.txt" | tee -a "$summary"
fi

# Benchmarks.
BIN=.carry/bin/kiln
models=("$@")
[ ${#models[@]} -eq 0 ] && [ -n "${QUANT_GGUFS:-}" ] && read -r -a models <<< "$QUANT_GGUFS"
[ ${#models[@]} -eq 0 ] && models=(q4_k_m=dummy:llama3-8b:q4_k_m q8_0=dummy:llama3-8b:q8_0)
label_of() { # the weights label of a model argument
    case "$1" in *=*) echo "${1%%=*}"; return ;; esac
    local lower
    lower=$(basename "$1" | tr 'A-Z' 'a-z')
    for l in q4_k_m q8_0 q4_0 q6_k q4_k f16 bf16; do
        case "$lower" in *"$l"*) echo "$l"; return ;; esac
    done
    echo unknown
}
bench() { # LABEL MODEL TAG ARGS...: one kiln bench run, JSON with the weights label added
    local label=$1 model=$2 tag=$3; shift 3
    local json="$OUT/bench-$label$tag.json" log="$OUT/bench-$label$tag.log"
    # llama.cpp's runs (VS_LLAMA) take about as long again.
    local limit=170
    [ -n "${VS_LLAMA:-}" ] && limit=420
    RUST_LOG=info RUST_BACKTRACE=0 timeout "$limit" "$BIN" bench --model "$model" --device cuda \
        --repeats "${BENCH_REPEATS:-2}" --json "$json" "$@" > "$OUT/bench-$label$tag.txt" 2> "$log"
    local rc=$?
    [ $rc -ne 0 ] && { note "kiln bench $label$tag: FAILED rc $rc ($(tail -1 "$log" | cut -c1-160))"; status=1; return; }
    python3 - "$json" "$label" "$log" <<'PY'
import json, re, sys
path, label, log = sys.argv[1:]
doc = json.load(open(path))
doc["weights"] = label
m = re.search(r"weights ([0-9.]+) GiB([^;]*);", open(log).read())
if m:
    doc["device_weights_gib"] = float(m.group(1))
    doc["device_weights_note"] = m.group(2).strip()
json.dump(doc, open(path, "w"), indent=1)
PY
}
summarise() { # JSON: one line of the figures
    python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
parts = []
for r in d.get("rows", []):
    if r.get("engine", "kiln") != "kiln" or "tok_s" not in r:
        continue
    if r["test"] == "prefill":
        parts.append(f"prefill {r['tokens']} {r['tok_s']:,.0f}")
    elif r["test"] == "decode":
        parts.append(f"decode d{r['tokens']} b{r['concurrency']} {r['tok_s']:,.1f}")
w = d.get("device_weights_gib")
print(f"{d.get('weights')} ({d.get('model')}): weights {w} GiB on the device; tok/s: " + "; ".join(parts))
PY
}
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    [ -x "$BIN" ] || { note "no $BIN: build the carry with the kiln binary"; exit 1; }
    for m in "${models[@]}"; do
        label=$(label_of "$m")
        model=${m#*=}
        vs=()
        [ -n "${VS_LLAMA:-}" ] && [ -f "$model" ] && vs=(--vs "llama.cpp=$VS_LLAMA")
        bench "$label" "$model" "" --prefill 128,2048,8192 --decode 128 --depth 0,8192 --concurrency 1,8,32 "${vs[@]}"
        [ -s "$OUT/bench-$label.json" ] && note "$(summarise "$OUT/bench-$label.json")"
        if [ "${SKIP_AB:-0}" != 1 ] && { [ "$m" = "${models[0]}" ] || [ "${AB_ALL:-0}" = 1 ]; }; then
            # Each switch of this round against the run above (its default on).
            KILN_QUANT_DECODE=v1 bench "$label" "$model" "-decode-v1" --prefill none --decode 128 --depth 0 --concurrency 1,32
            [ -s "$OUT/bench-$label-decode-v1.json" ] && note "  KILN_QUANT_DECODE=v1: $(summarise "$OUT/bench-$label-decode-v1.json")"
            KILN_QUANT_TILES=1 bench "$label" "$model" "-tiles-1" --prefill none --decode 128 --depth 0 --concurrency 8,32
            [ -s "$OUT/bench-$label-tiles-1.json" ] && note "  KILN_QUANT_TILES=1: $(summarise "$OUT/bench-$label-tiles-1.json")"
            KILN_QUANT_EXPAND=words bench "$label" "$model" "-expand-words" --prefill 2048 --decode 0
            [ -s "$OUT/bench-$label-expand-words.json" ] && note "  KILN_QUANT_EXPAND=words: $(summarise "$OUT/bench-$label-expand-words.json")"
            # The embedding on the GPU: weights on the device, and its cost.
            KILN_QUANT_EMBED=device bench "$label" "$model" "-embed-device" --prefill 2048 --decode 128 --depth 0 --concurrency 1
            [ -s "$OUT/bench-$label-embed-device.json" ] && note "  KILN_QUANT_EMBED=device: $(summarise "$OUT/bench-$label-embed-device.json")"
            # The quantised epilogues apart (batch 1, 8 and 32).
            KILN_QUANT_FUSE=none bench "$label" "$model" "-fuse-none" --prefill none --decode 128 --depth 0 --concurrency 1,8,32
            [ -s "$OUT/bench-$label-fuse-none.json" ] && note "  KILN_QUANT_FUSE=none: $(summarise "$OUT/bench-$label-fuse-none.json")"
            # Q4_K, then Q4_K and Q6_K, in 128-k records (a K-quant file only): memory and speed.
            if [ "$label" = q4_k_m ]; then
                KILN_QUANT_Q4K=128 bench "$label" "$model" "-q4k128" --prefill 2048 --decode 128 --depth 0 --concurrency 1,32
                [ -s "$OUT/bench-$label-q4k128.json" ] && note "  KILN_QUANT_Q4K=128: $(summarise "$OUT/bench-$label-q4k128.json")"
                KILN_QUANT_Q4K=128 KILN_QUANT_Q6K=128 bench "$label" "$model" "-k128" --prefill 2048 --decode 128 --depth 0 --concurrency 1,32
                [ -s "$OUT/bench-$label-k128.json" ] && note "  KILN_QUANT_Q4K=128 KILN_QUANT_Q6K=128: $(summarise "$OUT/bench-$label-k128.json")"
            fi
        fi
    done
fi
note ""
note "SUMMARY ($((SECONDS - start)) s): $([ $status -eq 0 ] && echo ok || echo 'NOT ok, see above'); logs and JSON in $OUT"
exit $status
