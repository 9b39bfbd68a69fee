#!/usr/bin/env bash
# kiln beside llama.cpp's CPU build on this machine, on the same GGUF file: for each model (kiln's
# dummy presets, written as random-weight GGUFs by scripts/bench/make_random_gguf.py), `kiln bench`
# and `llama-bench` on the same prompt length, decode count and thread count. Prints the comparison
# table and writes one results JSON per model under bench/results/ (append the table to docs/BENCH.md).
#
# Usage: scripts/bench-cpu.sh
# Environment (all optional):
#   MODELS="tiny llama3-1b"   presets to run          DTYPE=f32      weights in the GGUF (f32|f16|bf16)
#   THREADS=$(nproc)          threads for both        REPEATS=3      timed runs per case
#   PROMPT_tiny=128,512,2048 GEN_tiny=128 PROMPT_llama3_1b=256 GEN_llama3_1b=32   case sizes per preset
#   KILN_BENCH_DIR=/tmp/kiln-bench   GGUFs and raw outputs (reused between runs)
#   KILN_BIN=...              a kiln binary (default: build it with cargo --release)
#   LLAMA_BIN_DIR=/work/llamacpp-cpu/bin   llama.cpp binaries; built from LLAMA_SRC when missing
#   LLAMA_SRC=.anchor/llama.cpp   llama.cpp source (../shared/device/prepare_llamacpp.sh makes it)
#   PYTHON=python3 with numpy     VOCAB=../shared/vocab/ggml-vocab-llama-bpe.gguf
#   NOTE="..."                a remark stored with the results (e.g. the machine's load)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODELS=${MODELS:-"tiny llama3-1b"}
DTYPE=${DTYPE:-f32}
THREADS=${THREADS:-$(nproc)}
REPEATS=${REPEATS:-3}
DIR=${KILN_BENCH_DIR:-/tmp/kiln-bench}
LLAMA_SRC=${LLAMA_SRC:-$ROOT/.anchor/llama.cpp}
LLAMA_BIN_DIR=${LLAMA_BIN_DIR:-/work/llamacpp-cpu/bin}
VOCAB=${VOCAB:-$ROOT/../shared/vocab/ggml-vocab-llama-bpe.gguf}
PYTHON=${PYTHON:-$( [ -x /work/pyenv/bin/python ] && echo /work/pyenv/bin/python || echo python3)}
mkdir -p "$DIR" bench/results

timed() { # label command...: runs it, prints how long it took
    local label=$1 t0=$SECONDS; shift
    "$@"
    echo "[$label: $((SECONDS - t0)) s]" >&2
}

if [ -z "${KILN_BIN:-}" ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/targets/bench}
    timed "build kiln" cargo build --release -p kiln >&2
    KILN_BIN=$CARGO_TARGET_DIR/release/kiln
fi

if [ ! -x "$LLAMA_BIN_DIR/llama-bench" ]; then
    # No CPU build yet: build llama-bench (no CUDA) into an ignored folder of the repository.
    [ -f "$LLAMA_SRC/CMakeLists.txt" ] || { echo "no llama.cpp source at $LLAMA_SRC (run ../shared/device/prepare_llamacpp.sh $LLAMA_SRC)" >&2; exit 1; }
    B=$ROOT/.anchor/llamacpp-cpu-build
    mkdir -p "$B"
    [ -f "$B/CMakeCache.txt" ] || cmake -S "$LLAMA_SRC" -B "$B" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF > "$B/cmake.log" 2>&1
    timed "build llama-bench" cmake --build "$B" -j"$(nproc)" --target llama-bench > "$B/build.log" 2>&1 \
        || { tail -30 "$B/build.log" >&2; exit 1; }
    LLAMA_BIN_DIR=$B/bin
fi

date_tag=$(date -u +%Y-%m-%dT%H%M)
load=$(cut -d' ' -f1-3 /proc/loadavg)
note="${NOTE:-load average at start: $load on $(nproc) cores}"
for m in $MODELS; do
    var=${m//-/_}
    prompt_var=PROMPT_$var gen_var=GEN_$var
    case $m in tiny) dp=128,512,2048 dg=128 ;; *) dp=256 dg=32 ;; esac
    P=${!prompt_var:-$dp}
    G=${!gen_var:-$dg}
    gguf=$DIR/$m-$DTYPE.gguf
    if [ ! -s "$gguf" ]; then
        timed "write $gguf" "$PYTHON" scripts/bench/make_random_gguf.py --vocab "$VOCAB" --out "$gguf.part" \
            --gguf-py "$LLAMA_SRC/gguf-py" --preset "$m" --dtype "$DTYPE" >&2
        mv "$gguf.part" "$gguf"
    fi
    echo "== $m ($DTYPE GGUF): prompt $P, decode $G, $THREADS threads, $REPEATS repeats; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    timed "kiln $m" "$KILN_BIN" bench --model "$gguf" --device cpu --threads "$THREADS" --prefill "$P" \
        --decode "$G" --depth 0 --concurrency 1 --repeats "$REPEATS" --json "$DIR/kiln-$m.json" >&2
    timed "llama.cpp $m" "$LLAMA_BIN_DIR/llama-bench" -m "$gguf" -p "$P" -n "$G" -t "$THREADS" -r "$REPEATS" \
        -o jsonl > "$DIR/llamacpp-$m.jsonl"
    "$PYTHON" scripts/bench/combine.py --kiln "$DIR/kiln-$m.json" --llama-bench "$DIR/llamacpp-$m.jsonl" \
        --model "$m ($DTYPE GGUF)" --note "$note" --out "bench/results/$date_tag-cpu-$m.json"
    echo
done
