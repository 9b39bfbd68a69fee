#!/usr/bin/env bash
# kiln beside llama.cpp and transformers on the GPU machine, on one random-weight Llama-3-8B F16 GGUF,
# in one call: writes the GGUF once (into /tmp, reused while the machine stays warm), builds llama.cpp
# (llama-bench, llama-batched-bench) once into /tmp/llamacpp-build, then runs llama-bench (flash attention,
# ubatch 2048), llama-batched-bench (streams after a 512-token prompt), `kiln bench` (the same: batch 1 at
# each depth, the streams after 512 tokens) and transformers
# (scripts/bench/hf_bench.py, the same weights in float16), and prints one table with kiln / llama.cpp,
# kiln / transformers and each figure's fraction of the hardware floor. Each part is timed.
#
# Usage: scripts/bench-gpu.sh LLAMA_SRC [VOCAB_GGUF]
#   LLAMA_SRC: llama.cpp source made by ../shared/device/prepare_llamacpp.sh (e.g. .anchor/llama.cpp, carried)
#   VOCAB_GGUF: ggml-vocab-llama-bpe.gguf, needed only to write the GGUF the first time (default: the first of
#     ../shared/vocab/, .anchor/ that has it)
# Environment:
#   OUT=./bench-gpu-out   where results.json, table.md, times.txt and raw.tgz (the raw outputs) go
#   RAW=/tmp/kiln-bench/gpu-run   raw outputs, kept while the machine stays warm: a part left out with
#     SKIP_*=1 reuses its output from an earlier call (a part that runs replaces it)
#   KILN_BIN              kiln binary (default: .carry/bin/kiln, else target*/release/kiln)
#   KILN_COMMIT           commit recorded with the figures (default: .carry/commit.txt, which
#                         scripts/build-gpu-carry.sh writes; the machine's copy has no history)
#   SKIP_GGUF=1 SKIP_BUILD=1 SKIP_LLAMA=1 SKIP_BATCHED=1 SKIP_KILN=1 SKIP_HF=1   leave a part out
#   PREFILL=2048,8192,32768 DECODE=128 DEPTHS=0,512,8192 STREAMS=1,8,32 REPEATS=3
#   GGUF=/tmp/kiln-bench/llama3-8b-f16.gguf   PYTHON=python3   LLAMA_BUILD=/tmp/llamacpp-build
#   MODEL_LABEL="Llama-3-8B shape, random F16 GGUF"   the model's name in the table
#   KILN_DEVICE=cuda (cpu: to try the script on a machine without a GPU, with a small GGUF)
#   KILN_ARGS             more arguments for every `kiln bench` run (e.g. "--quantize fp8")
set -uo pipefail
cd "$(dirname "$0")/.."
[ -z "${KILN_COMMIT:-}" ] && [ -f .carry/commit.txt ] && export KILN_COMMIT="$(cat .carry/commit.txt)"
ROOT=$PWD
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: scripts/bench-gpu.sh LLAMA_SRC [VOCAB_GGUF]   (LLAMA_SRC: a llama.cpp source folder)" >&2
    exit 2
fi
LLAMA_SRC=$(realpath "$1")
VOCAB=${2:-}
OUT=${OUT:-$ROOT/bench-gpu-out}
RAW=${RAW:-/tmp/kiln-bench/gpu-run}
PYTHON=${PYTHON:-python3}
GGUF=${GGUF:-/tmp/kiln-bench/llama3-8b-f16.gguf}
PREFILL=${PREFILL:-2048,8192,32768}
DECODE=${DECODE:-128}
DEPTHS=${DEPTHS:-0,512,8192}
STREAMS=${STREAMS:-1,8,32}
REPEATS=${REPEATS:-3}
MODEL_LABEL=${MODEL_LABEL:-Llama-3-8B shape, random F16 GGUF}
BUILD=${LLAMA_BUILD:-/tmp/llamacpp-build}
KILN_DEVICE=${KILN_DEVICE:-cuda}
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_KERNEL_CACHE=${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}
mkdir -p "$OUT" "$RAW" "$(dirname "$GGUF")"
TIMES=$OUT/times.txt
: > "$TIMES"
T_ALL=$SECONDS

part() { # NAME SKIPVAR command...: runs a part unless $SKIPVAR=1, logs its time and status
    local name=$1 skip=$2 t0=$SECONDS rc; shift 2
    if [ "${!skip:-0}" = 1 ]; then
        echo "$name: skipped ($skip=1)" | tee -a "$TIMES"
        return 0
    fi
    echo "== $name" >&2
    "$@"
    rc=$?
    echo "$name: $((SECONDS - t0)) s, rc $rc" | tee -a "$TIMES"
    return $rc
}

# The device's name for the table (without nvidia-smi: the one kiln reports).
device_args=()
if nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1; then
    device_args=(--device "$(head -1 "$OUT/gpu.txt" | cut -d, -f1)")
fi

write_gguf() {
    [ -s "$GGUF" ] && { echo "reusing $GGUF" >&2; return 0; }
    local v
    for v in "$VOCAB" "$ROOT/../shared/vocab/ggml-vocab-llama-bpe.gguf" "$ROOT/.anchor/ggml-vocab-llama-bpe.gguf"; do
        [ -n "$v" ] && [ -s "$v" ] && break
    done
    [ -s "$v" ] || { echo "no vocab GGUF: pass ggml-vocab-llama-bpe.gguf as the second argument" >&2; return 1; }
    "$PYTHON" scripts/bench/make_random_gguf.py --vocab "$v" --out "$GGUF.part" --gguf-py "$LLAMA_SRC/gguf-py" \
        --dtype f16 && mv "$GGUF.part" "$GGUF"
}

build_llamacpp() {
    [ -x "$BUILD/bin/llama-bench" ] && [ -x "$BUILD/bin/llama-batched-bench" ] && { echo "llama.cpp already built" >&2; return 0; }
    mkdir -p "$BUILD"
    [ -f "$BUILD/build.ninja" ] || cmake -S "$LLAMA_SRC" -B "$BUILD" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release > "$BUILD/cmake.log" 2>&1 \
        || { tail -20 "$BUILD/cmake.log" >&2; return 1; }
    cmake --build "$BUILD" -j"$(nproc)" --target llama-bench llama-batched-bench > "$BUILD/build.log" 2>&1 \
        || { tail -30 "$BUILD/build.log" >&2; return 1; }
}

run_llama_bench() {
    local lb=$BUILD/bin/llama-bench
    rm -f "$RAW"/llama-bench-*
    "$lb" -m "$GGUF" -ngl 99 -fa 1 -ub 2048 -p "$PREFILL" -n 0 -r "$REPEATS" -o jsonl > "$RAW/llama-bench-prefill.jsonl" \
        2> "$RAW/llama-bench-prefill.log" || { tail -5 "$RAW/llama-bench-prefill.log" >&2; return 1; }
    # Decode at each depth where this llama-bench has -d; else at depth 0 only.
    local depth_args=()
    # (Help read into a variable first: with pipefail, grep -q closing the pipe early fails the test.)
    local help
    help=$("$lb" --help 2>&1)
    [[ $help == *--n-depth* ]] && depth_args=(-d "$(echo "$DEPTHS" | tr ',' '\n' | grep -vx 512 | paste -sd,)")
    "$lb" -m "$GGUF" -ngl 99 -fa 1 -ub 2048 -p 0 -n "$DECODE" "${depth_args[@]}" -r "$REPEATS" -o jsonl \
        > "$RAW/llama-bench-decode.jsonl" 2> "$RAW/llama-bench-decode.log" || { tail -5 "$RAW/llama-bench-decode.log" >&2; return 1; }
}

run_batched() {
    local max_streams ctx
    rm -f "$RAW"/llama-batched.*
    max_streams=$(echo "$STREAMS" | tr ',' '\n' | sort -n | tail -1)
    ctx=$((max_streams * (512 + DECODE) + 256))
    "$BUILD/bin/llama-batched-bench" -m "$GGUF" -ngl 99 -fa on -c "$ctx" -b 2048 -ub 2048 -npp 512 -ntg "$DECODE" \
        -npl "$STREAMS" --output-format jsonl > "$RAW/llama-batched.jsonl" 2> "$RAW/llama-batched.log" \
        || { tail -5 "$RAW/llama-batched.log" >&2; return 1; }
}

run_kiln() {
    local bin=${KILN_BIN:-}
    rm -f "$RAW"/kiln.* "$RAW"/kiln-*.json
    if [ -z "$bin" ]; then
        for bin in "$ROOT/.carry/bin/kiln" "$ROOT"/target/release/kiln "$ROOT"/targets/*/release/kiln; do
            [ -x "$bin" ] && break
        done
    fi
    [ -x "$bin" ] || { echo "no kiln binary: set KILN_BIN or run scripts/build-gpu-carry.sh and carry .carry" >&2; return 1; }
    # As llama.cpp runs them: prefill and batch-1 decode at every depth (llama-bench), then the
    # streams after a 512-token prompt each (llama-batched-bench). One run of every depth
    # with every stream count would not fit: 128 streams x 8k tokens of KV is more than the GPU.
    # shellcheck disable=SC2086 # KILN_ARGS: words for kiln
    "$bin" bench --model "$GGUF" --device "$KILN_DEVICE" ${KILN_ARGS:-} --prefill "$PREFILL" --decode "$DECODE" --depth "$DEPTHS" \
        --concurrency 1 --repeats "$REPEATS" --json "$RAW/kiln-b1.json" > "$RAW/kiln.txt" 2> "$RAW/kiln.log"
    local rc=$?
    local streams
    streams=$(echo "$STREAMS" | tr ',' '\n' | grep -vx 1 | paste -sd,)
    if [ $rc = 0 ] && [ -n "$streams" ]; then
        # shellcheck disable=SC2086
        "$bin" bench --model "$GGUF" --device "$KILN_DEVICE" ${KILN_ARGS:-} --prefill none --decode "$DECODE" --depth 512 \
            --concurrency "$streams" --repeats "$REPEATS" --json "$RAW/kiln-streams.json" >> "$RAW/kiln.txt" 2>> "$RAW/kiln.log"
        rc=$?
    fi
    # One kiln.json: the first run's, with the streams' rows added.
    if [ $rc = 0 ]; then
        "$PYTHON" - "$RAW/kiln-b1.json" "$RAW/kiln-streams.json" "$RAW/kiln.json" <<'PY'
import json, os, sys
base = json.load(open(sys.argv[1]))
if os.path.exists(sys.argv[2]):
    base["rows"] += json.load(open(sys.argv[2]))["rows"]
json.dump(base, open(sys.argv[3], "w"), indent=1)
PY
        rc=$?
    fi
    cat "$RAW/kiln.txt"
    [ $rc = 0 ] || tail -5 "$RAW/kiln.log" >&2
    return $rc
}

run_hf() {
    rm -f "$RAW"/hf.*
    "$PYTHON" scripts/bench/hf_bench.py --gguf "$GGUF" --gguf-py "$LLAMA_SRC/gguf-py" --out "$RAW/hf.json" \
        --prefill "$PREFILL" --decode "$DECODE" --batch "$STREAMS" --repeats "$REPEATS" > "$RAW/hf.log" 2>&1
    local rc=$?
    tail -12 "$RAW/hf.log" >&2
    return $rc
}

part gguf SKIP_GGUF write_gguf || exit 1
part build-llama.cpp SKIP_BUILD build_llamacpp || SKIP_LLAMA=1 SKIP_BATCHED=1
part llama-bench SKIP_LLAMA run_llama_bench
part llama-batched-bench SKIP_BATCHED run_batched
part kiln SKIP_KILN run_kiln
part transformers SKIP_HF run_hf

args=()
[ -s "$RAW/kiln.json" ] && args+=(--kiln "$RAW/kiln.json")
lbs=()
for f in "$RAW/llama-bench-prefill.jsonl" "$RAW/llama-bench-decode.jsonl"; do [ -s "$f" ] && lbs+=("$f"); done
[ ${#lbs[@]} -gt 0 ] && args+=(--llama-bench "${lbs[@]}")
[ -s "$RAW/llama-batched.jsonl" ] && args+=(--llama-batched "$RAW/llama-batched.jsonl")
[ -s "$RAW/hf.json" ] && args+=(--hf "$RAW/hf.json")
echo "== results"
# The floor: 16-bit weights at 790 TFLOP/s (80% of the H200's dense bf16 rate); with kiln's fp8
# weights, 1 byte a weight beside the 16-bit cache at twice that (llama.cpp's Q8_0, 8.5 bits a
# weight, is measured against the same floor).
floor=(--tflops 790 --bandwidth 3.95e12)
case " ${KILN_ARGS:-} " in *" --quantize fp8 "*) floor=(--tflops 1580 --bandwidth 3.95e12 --weight-bytes 1 --kv-bytes 2) ;; esac
"$PYTHON" scripts/bench/combine.py "${args[@]}" --model "$MODEL_LABEL" "${device_args[@]}" \
    "${floor[@]}" --out "$OUT/results.json" | tee "$OUT/table.md"
echo "total: $((SECONDS - T_ALL)) s" | tee -a "$TIMES"
cat "$TIMES"
# The raw outputs in one archive: a GPU call brings back at most 8 files from its output folder.
(cd "$RAW" && tar czf "$OUT/raw.tgz" $(ls *.json *.jsonl *.log *.txt 2>/dev/null))
