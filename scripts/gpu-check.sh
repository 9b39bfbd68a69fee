#!/usr/bin/env bash
# One GPU-machine run of every kiln-cuda check: the kernel contract tests, backend parity and
# invariance tests (all with KILN_REQUIRE_GPU=1, so a missing GPU fails) and a quick benchmark.
# Needs the executables from scripts/build-gpu-carry.sh in .carry/. Writes under $OUT
# (default ./gpu-check-out): one log per executable, report.txt, report.json; prints the
# summary last. Whole run bounded to about 8 minutes.
#
# Usage: scripts/gpu-check.sh [PART...]   PARTs: tests, bench (the default: both), f32, digests,
# base-bench, f32-cli. `f32` runs the f32 path's checks alone: the typed kernels' contracts in f32 and
# f16, then the backend in f32 against the CPU on every fixture (the same greedy tokens, logits
# within 1e-5), in f16 on the fixtures rounded to f16, its batch invariance and graphs vs
# eager in f32, and `kiln generate --dtype f32` against the CPU (`f32-cli`: that alone) (`tests` runs them too, among the rest). `digests` runs the logits_digest example on the fixtures and the 8B dummy
# presets; with a baseline build in .carry-base/ (logits_digest, cuda_bench built from an
# earlier commit) it runs that too and diffs the two, and `base-bench` times the baseline's
# cuda_bench right after this build's, for a same-call A/B of a change that must not move
# speed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_REQUIRE_GPU=1
export KILN_FIXTURES="${KILN_FIXTURES:-$PWD/tests/fixtures}"
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
manifest=.carry/manifest.txt
report="$OUT/report.txt"
: > "$report"
say() { echo "$*" | tee -a "$report"; }

if [ ! -f "$manifest" ]; then
    say "FAIL: $manifest missing (run scripts/build-gpu-carry.sh on the build machine first)"
    exit 1
fi
parts="${*:-tests bench}"
want() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
# Carried binaries may travel xz-compressed.
for f in .carry/bin/*.xz .carry-base/*.xz; do [ -f "$f" ] && xz -df "$f"; done
commit=$(cat .carry/commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
say "kiln gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $commit"
export KILN_COMMIT="${KILN_COMMIT:-$commit}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$report"
start=$(date +%s)
results="$OUT/results.tsv"
: > "$results"

# Order: cheapest and most basic first, so a broken kernel shows before the model tests.
order="kernels_compile unit footprint contract_rows contract_sampling contract_gemm contract_attention contract_typed backend_parity backend_invariance graphs_counts graphs_parity"
want tests || order=""
test_budget=330
want bench || test_budget=470
# CHECK_BUDGET_S: the tests' whole budget in seconds, for a call that runs nothing else.
test_budget=${CHECK_BUDGET_S:-$test_budget}
for name in $order $(want tests && awk '$1=="test"{print $2}' "$manifest"); do
    path=$(awk -v n="$name" '$1=="test" && $2==n {print $3}' "$manifest")
    [ -n "$path" ] || continue
    grep -q "^$name	" "$results" && continue
    log="$OUT/test-$name.log"
    # Keep 150 s for the benchmark within the 8-minute budget (all of it without the benchmark).
    left=$(( test_budget - ($(date +%s) - start) ))
    if [ "$left" -lt 20 ]; then
        printf "%s\tSKIPPED\t0\t0\t0\t0\t0\n" "$name" >> "$results"
        say "$name: not run, out of time"
        continue
    fi
    [ "$left" -gt 170 ] && left=170
    t0=$(date +%s%N)
    # --include-ignored: the GPU tests are ignored by default, so that a machine without a GPU
    # reports them as ignored rather than passed.
    timeout "$left" ".carry/$path" --include-ignored --test-threads=1 --nocapture > "$log" 2>&1
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN{printf "%.1f", (b-a)/1e9}')
    pass=$(grep -c "\] PASS \|^PASS " "$log")
    fail=$(grep -c "\] FAIL \|^FAIL \|panicked" "$log")
    skip=$(grep -c "^SKIP " "$log")
    status=ok
    [ $rc -ne 0 ] && status=FAILED
    [ $rc -eq 124 ] && status=TIMEOUT
    printf "%s\t%s\t%s\t%.1f\t%s\t%s\t%s\n" "$name" "$status" "$rc" "$secs" "$pass" "$fail" "$skip" >> "$results"
    say "$(printf "%-20s %-8s %6.1fs  checks: %d pass, %d fail, %d skip" "$name" "$status" "$secs" "$pass" "$fail" "$skip")"
    grep -A1 -E "\] FAIL |^FAIL |panicked|^SKIP " "$log" | grep -v "^--$" | head -24 | sed 's/^/    /' | tee -a "$report"
done

# The f32 path: each executable's f32 tests alone (a name filter), one line each.
if want f32; then
    for spec in contract_typed: footprint: backend_parity:f32 backend_parity:f16 backend_invariance:f32 graphs_parity:f32; do
        name=${spec%%:*} filter=${spec#*:}
        path=$(awk -v n="$name" '$1=="test" && $2==n {print $3}' "$manifest")
        [ -n "$path" ] || { say "f32 $name: not in the manifest"; continue; }
        log="$OUT/test-f32-$name${filter:+-$filter}.log"
        left=$(( 540 - ($(date +%s) - start) ))
        [ "$left" -lt 20 ] && { say "f32 $name: not run, out of time"; continue; }
        [ "$left" -gt 170 ] && left=170
        t0=$(date +%s%N)
        timeout "$left" ".carry/$path" --include-ignored --test-threads=1 --nocapture $filter > "$log" 2>&1
        rc=$?
        secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN{printf "%.1f", (b-a)/1e9}')
        pass=$(grep -c "\] PASS " "$log")
        fail=$(grep -c "\] FAIL \|panicked" "$log")
        status=ok
        [ $rc -ne 0 ] && status=FAILED
        [ $rc -eq 124 ] && status=TIMEOUT
        printf "%s\t%s\t%s\t%.1f\t%s\t%s\t0\n" "f32:$name${filter:+:$filter}" "$status" "$rc" "$secs" "$pass" "$fail" >> "$results"
        say "$(printf "f32 %-22s %-8s %6.1fs  checks: %d pass, %d fail" "$name${filter:+ $filter}" "$status" "$secs" "$pass" "$fail")"
        grep -E "\] FAIL |panicked" "$log" | head -12 | cut -c1-300 | sed 's/^/    /' | tee -a "$report"
    done
fi
# `f32-cli` runs this check alone.
if want f32 || want f32-cli; then
    # The flag as a user gives it: kiln generate --dtype f32 on the GPU gives the CPU's greedy
    # tokens on every fixture the CUDA backend runs.
    kiln_bin=$(awk '$1=="bin" && $2=="kiln" {print $3}' "$manifest")
    if [ -n "$kiln_bin" ]; then
        same=0 differ=0 refused=0
        for m in tests/fixtures/*/model.gguf tests/fixtures/*/hf; do
            [ -e "$m" ] || continue
            for dev in cpu cuda; do
                ".carry/$kiln_bin" generate --model "$m" --device $dev --dtype f32 -p "The potter loads the kiln" \
                    -n 32 --ignore-eos --temperature 0 --ignore-generation-config --json \
                    > "$OUT/f32-cli-$dev.json" 2> "$OUT/f32-cli-$dev.err"
            done
            if grep -q "cannot run this" "$OUT/f32-cli-cuda.err"; then
                refused=$((refused + 1))
            elif python3 -c 'import json,sys; a,b=(json.load(open(f))["ids"] for f in sys.argv[1:]); sys.exit(a!=b)' \
                    "$OUT/f32-cli-cpu.json" "$OUT/f32-cli-cuda.json" 2>/dev/null; then
                same=$((same + 1))
            else
                differ=$((differ + 1))
                say "    kiln generate --dtype f32 $m: GPU tokens differ from the CPU's ($(tail -1 "$OUT/f32-cli-cuda.err" | cut -c1-160))"
            fi
        done
        status=ok
        [ $differ -ne 0 ] && status=FAILED
        printf "%s\t%s\t%s\t%.1f\t%s\t%s\t0\n" "f32:cli" "$status" "$differ" 0 "$same" "$differ" >> "$results"
        say "f32 kiln generate --dtype f32: $same models give the CPU's tokens, $differ differ, $refused refused by the CUDA backend"
    fi
fi

# The parity test again with every fast path off: if it fails above and passes here, the
# fault is in a fast kernel (flash/decode attention or the skinny GEMM), not in the plumbing.
parity=$(awk '$1=="test" && $2=="backend_parity" {print $3}' "$manifest")
if want tests && [ -n "$parity" ] && [ $(( $(date +%s) - start )) -lt 200 ]; then
    log="$OUT/test-backend_parity-reference-paths.log"
    KILN_FLASH_ATTN=0 KILN_SKINNY_GEMM=0 KILN_SPLIT_DECODE=0 timeout 60 ".carry/$parity" --include-ignored --test-threads=1 --nocapture gpu_matches_cpu > "$log" 2>&1
    rc=$?
    say "backend_parity with KILN_FLASH_ATTN=0 KILN_SKINNY_GEMM=0 KILN_SPLIT_DECODE=0: rc=$rc, $(grep -c '\] PASS ' "$log") pass, $(grep -c '\] FAIL \|panicked' "$log") fail (diagnostic only)"
fi

# Greedy tokens and logits digests of this build, and of the baseline build when one travelled:
# a change that must move no bit shows no difference.
digest=$(awk '$1=="digest"{print $3}' "$manifest")
if want digests && [ -n "$digest" ]; then
    models=""
    for d in tests/fixtures/*/; do
        for g in "$d"*.gguf; do [ -f "$g" ] && models="$models $g"; done
        [ -f "$d/hf/config.json" ] && models="$models ${d}hf"
    done
    models="$models dummy:llama3-8b@300 dummy:qwen3-8b@300 dummy:mistral-7b@4200"
    for build in new base; do
        bin=".carry/$digest"; [ $build = base ] && bin=.carry-base/logits_digest
        [ -x "$bin" ] || continue
        : > "$OUT/digests-$build.txt"
        for m in $models; do
            timeout 120 "$bin" cuda "$m" >> "$OUT/digests-$build.txt" 2> "$OUT/digests-$build.err" \
                || echo "$m cuda: FAILED ($(tail -1 "$OUT/digests-$build.err"))" >> "$OUT/digests-$build.txt"
        done
    done
    say "digests: $(grep -c digest "$OUT/digests-new.txt") cases, $(grep -c FAILED "$OUT/digests-new.txt") failed"
    if [ -s "$OUT/digests-base.txt" ]; then
        # Every case the baseline ran must appear in this build's lines unchanged (a model the
        # baseline cannot load is listed apart).
        grep -v FAILED "$OUT/digests-base.txt" | sort > "$OUT/d-base"
        sort "$OUT/digests-new.txt" > "$OUT/d-new"
        moved=$(comm -23 "$OUT/d-base" "$OUT/d-new")
        if [ -z "$moved" ]; then
            say "digests: identical to the baseline on all $(wc -l < "$OUT/d-base") cases it ran"
        else
            say "digests: DIFFER from the baseline (baseline lines not matched):"
            echo "$moved" | head -20 | cut -c1-200 | tee -a "$report"
        fi
        grep FAILED "$OUT/digests-base.txt" | sed 's/^/    baseline: /' | cut -c1-160 | tee -a "$report"
        rm -f "$OUT/d-base" "$OUT/d-new"
    fi
fi

bench=$(awk '$1=="bench"{print $3}' "$manifest")
if want base-bench && [ -x .carry-base/cuda_bench ] && [ -n "$bench" ]; then
    # The same benchmark twice, this build then the baseline, then this build again: the spread of
    # the two runs of this build is the noise the difference must exceed.
    for run in new base new2; do
        bin=".carry/$bench"; [ $run = base ] && bin=.carry-base/cuda_bench
        RUST_BACKTRACE=0 timeout 170 "$bin" llama3-8b > "$OUT/ab-$run.json" 2> "$OUT/ab-$run.log"
        grep -E "^BENCH" "$OUT/ab-$run.log" | sed "s/^/    $run: /" | tee -a "$report"
    done
fi
if want bench && [ -n "$bench" ]; then
    say "benchmark (dummy:llama3-8b):"
    # Everything ends by about 470 s (under 8 minutes with start-up).
    left=$(( 470 - ($(date +%s) - start) ))
    [ "$left" -gt 150 ] && left=150
    RUST_BACKTRACE=0 timeout "$left" ".carry/$bench" llama3-8b > "$OUT/bench.json" 2> "$OUT/bench.log"
    brc=$?
    grep -E "^BENCH|loaded in|^device|^switches|^gemm" "$OUT/bench.log" | sed 's/^/    /' | tee -a "$report"
    [ $brc -ne 0 ] && say "    bench FAILED rc=$brc (see bench.log)" && tail -5 "$OUT/bench.log" | sed 's/^/    /' | tee -a "$report"
    # A/B: decode with the skinny GEMMs launched after their predecessors end (no PDL).
    left=$(( 470 - ($(date +%s) - start) ))
    if [ $brc -eq 0 ] && [ "$left" -gt 30 ]; then
        [ "$left" -gt 60 ] && left=60
        KILN_PDL=0 RUST_BACKTRACE=0 timeout "$left" ".carry/$bench" llama3-8b decode > "$OUT/bench-no-pdl.json" 2> "$OUT/bench-no-pdl.log"
        grep -E "^BENCH" "$OUT/bench-no-pdl.log" | sed 's/^/    KILN_PDL=0: /' | tee -a "$report"
    fi
    # A/B: the 8-warp skinny kernels (the 16-warp ones are the default).
    left=$(( 470 - ($(date +%s) - start) ))
    if [ $brc -eq 0 ] && [ "$left" -gt 30 ]; then
        [ "$left" -gt 60 ] && left=60
        KILN_SKINNY_WIDE=0 RUST_BACKTRACE=0 timeout "$left" ".carry/$bench" llama3-8b decode-batch > "$OUT/bench-wide-0.json" 2> "$OUT/bench-wide-0.log"
        grep -E "^BENCH" "$OUT/bench-wide-0.log" | sed 's/^/    KILN_SKINNY_WIDE=0: /' | tee -a "$report"
    fi
    # A/B: decode at batch 1 with every step launched eagerly instead of as a CUDA graph.
    left=$(( 470 - ($(date +%s) - start) ))
    if [ $brc -eq 0 ] && [ "$left" -gt 30 ]; then
        [ "$left" -gt 60 ] && left=60
        KILN_CUDA_GRAPHS=0 RUST_BACKTRACE=0 timeout "$left" ".carry/$bench" llama3-8b decode > "$OUT/bench-no-graphs.json" 2> "$OUT/bench-no-graphs.log"
        grep -E "^BENCH" "$OUT/bench-no-graphs.log" | sed 's/^/    KILN_CUDA_GRAPHS=0: /' | tee -a "$report"
    fi
    # Skinny GEMM bandwidth and device sampling times from the contract tests, for the record.
    grep -h "BENCH" "$OUT"/test-contract_gemm.log 2>/dev/null | sed 's/^/    /' | tee -a "$report"
    grep -h "sampling speed" "$OUT"/test-contract_sampling.log 2>/dev/null | sed 's/^/    /' | tee -a "$report"
fi

python3 - "$results" "$OUT/bench.json" "$OUT/report.json" <<'PY' 2>/dev/null || echo "(report.json not written: python3 missing)"
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
tests = [{"name": r[0], "status": r[1], "rc": int(r[2]), "seconds": float(r[3]), "pass": int(r[4]), "fail": int(r[5]), "skip": int(r[6])} for r in rows]
try:
    bench = json.load(open(sys.argv[2]))
except Exception:
    bench = None
json.dump({"tests": tests, "bench": bench, "ok": all(t["status"] == "ok" for t in tests)}, open(sys.argv[3], "w"), indent=1)
PY

total=$(( $(date +%s) - start ))
failed=$(awk -F'\t' '$2!="ok"{print $1}' "$results" | tr '\n' ' ')
say ""
say "SUMMARY ($total s): $(awk -F'\t' '$2=="ok"' "$results" | wc -l) of $(wc -l < "$results") test executables ok${failed:+; not ok: $failed}"
[ -s "$OUT/bench.json" ] && say "bench: $(cat "$OUT/bench.json")"
[ -z "$failed" ]
