#!/usr/bin/env bash
# One call on the GPU machine: runs the named parts one after another, each with a time limit and its
# logs in a folder of its own, then packs every log into $OUT/logs.tgz (a call brings back only a few
# files) and prints each part's summary last. The parts' scripts need .carry/ from
# scripts/build-gpu-carry.sh; the side-by-side parts need what scripts/gpu-prepare.sh makes.
#
# Usage: scripts/gpu-run.sh PART[:SECONDS]...
#   prepare      start scripts/gpu-prepare.sh in the background (llama.cpp, the GGUFs), return at once
#   check        scripts/gpu-check.sh tests          attn   scripts/attn-gpu.sh
#   gemma        scripts/gemma-gpu.sh                quant  scripts/quant-gpu.sh on the dummies
#   gemma-vs     kiln bench on the random Gemma 4 GGUF beside llama.cpp (--vs)
#   quant-tests  scripts/quant-gpu.sh TESTS_ONLY=1 (the quantised tests with KILN_GPU_QUANT=1, < 90 s)
#   quant-vs     scripts/quant-gpu.sh on the llama-quantize'd Q4_K_M and Q8_0 files, beside llama.cpp
#   f16-vs       kiln bench on the Llama-3-8B F16 GGUF beside llama.cpp (the baseline of quant-vs)
#   f32-cli      scripts/gpu-check.sh f32-cli (kiln generate --dtype f32 on the GPU vs the CPU)
#   decode       scripts/decode-gpu.sh (tensor-core decode GEMM, fused decode launches)
#   serve        scripts/serve-gpu.sh on the random Llama-3-8B GGUF
#   serve-vs     scripts/serve-vs.sh: kiln serve and llama-server on that GGUF, the weights' memory on Q4_K_M
# Environment: OUT (default ./gpu-run-out); PART_ENV_<part>="VAR=VALUE ..." extra environment for a part.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-run-out}
LOGS=/tmp/gpu-run-logs
mkdir -p "$OUT" "$LOGS"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
KILN=.carry/bin/kiln
# The commit the carried binaries were built from, recorded with every figure.
[ -z "${KILN_COMMIT:-}" ] && [ -f .carry/commit.txt ] && export KILN_COMMIT="$(cat .carry/commit.txt)"
B=/tmp/kiln-bench
LLAMA_BENCH=${LLAMA_BUILD:-/tmp/llamacpp-build}/bin/llama-bench
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
say "gpu-run $(date -u +%H:%M:%S) commit $(cat .carry/commit.txt 2>/dev/null || echo unknown): $*"

vs_bench() { # NAME GGUF [kiln bench args...]: kiln and llama.cpp on one file, in this call
    local name=$1 gguf=$2; shift 2
    scripts/gpu-wait.sh llama || return 1
    "$KILN" bench --model "$gguf" --device cuda --vs "llama.cpp=$LLAMA_BENCH" "$@" \
        --json "$LOGS/$name/bench.json" > "$LOGS/$name/bench.txt" 2> "$LOGS/$name/bench.log"
    local rc=$?
    cat "$LOGS/$name/bench.txt"
    [ $rc = 0 ] || tail -5 "$LOGS/$name/bench.log"
    return $rc
}

part() { # NAME LIMIT
    local name=$1 limit=$2 dir=$LOGS/$1 t0=$SECONDS rc
    mkdir -p "$dir"
    local extra_var="PART_ENV_${name//-/_}"
    local -a extra=()
    [ -n "${!extra_var:-}" ] && read -r -a extra <<< "${!extra_var}"
    echo "== $name (limit ${limit}s) ${extra[*]}" >&2
    case $name in
        prepare) setsid nohup scripts/gpu-prepare.sh > /dev/null 2>&1 < /dev/null & rc=0 ;;
        check) env "${extra[@]}" OUT=$dir timeout "$limit" scripts/gpu-check.sh tests > "$dir/out.txt" 2>&1; rc=$?
               cp "$dir/report.txt" "$dir/summary.txt" 2>/dev/null ;;
        attn) env "${extra[@]}" OUT=$dir timeout "$limit" scripts/attn-gpu.sh > "$dir/out.txt" 2>&1; rc=$? ;;
        gemma) env "${extra[@]}" OUT=$dir timeout "$limit" scripts/gemma-gpu.sh > "$dir/out.txt" 2>&1; rc=$?
               cp "$dir/report.txt" "$dir/summary.txt" 2>/dev/null ;;
        quant) env "${extra[@]}" OUT=$dir timeout "$limit" scripts/quant-gpu.sh > "$dir/out.txt" 2>&1; rc=$? ;;
        quant-tests) env "${extra[@]}" OUT=$dir TESTS_ONLY=1 timeout "$limit" scripts/quant-gpu.sh > "$dir/out.txt" 2>&1; rc=$? ;;
        quant-vs) scripts/gpu-wait.sh llama quant > "$dir/out.txt" 2>&1 \
                  && env "${extra[@]}" OUT=$dir SKIP_TESTS=1 VS_LLAMA=$LLAMA_BENCH timeout "$limit" scripts/quant-gpu.sh \
                     q4_k_m=$B/llama3-8b-q4_k_m.gguf q8_0=$B/llama3-8b-q8_0.gguf >> "$dir/out.txt" 2>&1; rc=$? ;;
        gemma-vs) scripts/gpu-wait.sh gemma4 > "$dir/out.txt" 2>&1 \
                  && env "${extra[@]}" timeout "$limit" bash -c "$(declare -f vs_bench); KILN=$KILN LOGS=$LOGS LLAMA_BENCH=$LLAMA_BENCH \
                     vs_bench gemma-vs $B/gemma4-f16.gguf --prefill 2048,8192,32768 --depth 0,8192 --concurrency 1 \
                     --decode 128 --repeats 3" > "$dir/summary.txt" 2>&1; rc=$? ;;
        f16-vs) scripts/gpu-wait.sh llama3 > "$dir/out.txt" 2>&1 \
                && env "${extra[@]}" timeout "$limit" bash -c "$(declare -f vs_bench); KILN=$KILN LOGS=$LOGS LLAMA_BENCH=$LLAMA_BENCH \
                   vs_bench f16-vs $B/llama3-8b-f16.gguf --prefill 2048,8192 --depth 0,8192 --concurrency 1,8,32 \
                   --decode 128 --repeats 3" > "$dir/summary.txt" 2>&1; rc=$? ;;
        f32-cli) env "${extra[@]}" OUT=$dir timeout "$limit" scripts/gpu-check.sh f32-cli > "$dir/out.txt" 2>&1; rc=$?
                 cp "$dir/report.txt" "$dir/summary.txt" 2>/dev/null ;;
        decode) env "${extra[@]}" OUT=$dir TOTAL_S=$((limit - 5)) timeout "$limit" scripts/decode-gpu.sh > "$dir/out.txt" 2>&1; rc=$? ;;
        serve) scripts/gpu-wait.sh llama3 > "$dir/out.txt" 2>&1 \
               && env "${extra[@]}" OUT=$dir timeout "$limit" scripts/serve-gpu.sh >> "$dir/out.txt" 2>&1; rc=$? ;;
        serve-vs) scripts/gpu-wait.sh llama llama3 quant > "$dir/out.txt" 2>&1 \
                  && env "${extra[@]}" OUT=$dir QUANT_GGUF=$B/llama3-8b-q4_k_m.gguf timeout "$limit" scripts/serve-vs.sh \
                     $B/llama3-8b-f16.gguf "${LLAMA_BUILD:-/tmp/llamacpp-build}/bin/llama-server" >> "$dir/out.txt" 2>&1; rc=$?
                  cat "$dir/serve-vs.jsonl" "$dir/memory.txt" > "$dir/summary.txt" 2>/dev/null ;;
        *) echo "unknown part $name" > "$dir/summary.txt"; rc=2 ;;
    esac
    say "## $name: rc $rc, $((SECONDS - t0)) s"
    if [ -s "$dir/summary.txt" ]; then tail -40 "$dir/summary.txt" | tee -a "$summary" >/dev/null
    else tail -25 "$dir/out.txt" 2>/dev/null | tee -a "$summary" >/dev/null; fi
}

for spec in "$@"; do
    name=${spec%%:*}
    limit=${spec#*:}
    [ "$limit" = "$spec" ] && limit=240
    part "$name" "$limit"
done
cp /tmp/kiln-bench/prepare.log "$LOGS/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$summary"
