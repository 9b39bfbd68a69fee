#!/usr/bin/env bash
# On the GPU machine, what the side-by-side runs need besides kiln, made once per machine (under /tmp,
# which outlives a call while the machine stays warm): llama.cpp built from the carried source, the
# random-weight GGUFs every engine reads, and their llama-quantize'd copies. Meant to start in the
# background at the top of a call (setsid) while the tests run; each product appears at its final
# path only when complete, and /tmp/kiln-bench/prepare.log says what was done and how long it took.
#
# Usage: setsid scripts/gpu-prepare.sh [PRODUCT...] &   PRODUCTs (default: all, in this order):
#   llama        llama.cpp (llama-bench, llama-batched-bench, llama-server, llama-quantize)
#   llama3       /tmp/kiln-bench/llama3-8b-f16.gguf (Llama-3-8B shape and vocabulary)
#   gemma4       /tmp/kiln-bench/gemma4-f16.gguf (Gemma4TextConfig defaults, gemma-4 vocabulary)
#   quant        /tmp/kiln-bench/llama3-8b-q4_k_m.gguf and -q8_0.gguf (needs llama and llama3)
#   q8           /tmp/kiln-bench/llama3-8b-q8_0.gguf alone (what the fp8 proof reads; half of quant's time)
# PREP_JOBS: the build's jobs (default: all cores but 4, left to the tests that run meanwhile).
# Inputs (carried in .anchor/, which git ignores): llama.cpp.tar.xz (a folder made by
# ../shared/device/prepare_llamacpp.sh, packed) or, in its place, gguf-py.tar.xz and the tools
# built without a GPU (scripts/build-llamacpp-here.sh: llama-rest.tar.xz, llama-cuda.so.xz.part-*
# and llama-cuda.so.sha256), which saves the build here; ggml-vocab-llama-bpe.gguf,
# ggml-vocab-gemma-4.gguf.
# scripts/gpu-wait.sh PRODUCT... waits for products to be ready.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=/tmp/kiln-bench
BUILD=${LLAMA_BUILD:-/tmp/llamacpp-build}
SRC=/tmp/llamacpp-src/llama.cpp
PYTHON=${PYTHON:-python3}
LOG=$DIR/prepare.log
mkdir -p "$DIR"
# One preparation at a time: a second (a call that starts it again while the first still runs)
# waits for the first, then finds its products made.
if command -v flock > /dev/null; then
    exec 9> "$DIR/prepare.lock"
    flock 9
fi
export PATH=/usr/local/cuda/bin:$PATH
products="${*:-llama llama3 gemma4 quant}"
say() { echo "$(date +%H:%M:%S) $*" >> "$LOG"; }

source_tree() { # the whole source, or (built elsewhere) only gguf-py, what the GGUF writers read
    [ -d "$SRC" ] && return 0
    mkdir -p "$(dirname "$SRC")"
    local t
    for t in llama.cpp gguf-py; do
        [ -s "$ROOT/.anchor/$t.tar.xz" ] && { tar xJf "$ROOT/.anchor/$t.tar.xz" -C "$(dirname "$SRC")"; return; }
    done
    return 1
}

vocab() { # NAME: the vocab-only GGUF, from .anchor or ../shared
    local f
    for f in "$ROOT/.anchor/ggml-vocab-$1.gguf" "$ROOT/../shared/vocab/ggml-vocab-$1.gguf"; do
        [ -s "$f" ] && { echo "$f"; return 0; }
        [ -s "$f.xz" ] && { xz -dkf "$f.xz" && echo "$f"; return 0; }
    done
    return 1
}

# The tools as scripts/build-llamacpp-here.sh built them on a machine without a GPU, if carried
# and they start here (the device's build is about 300 s of a call). Their CUDA library comes
# in parts (38 MB packed: beside the tree, more than one call carries), which may arrive over
# two calls: each call's parts are kept in $PARTS until the library's checksum matches.
PARTS=/tmp/llama-parts
keep_parts() {
    mkdir -p "$PARTS"
    local f
    for f in "$ROOT"/.anchor/llama-cuda.so.xz.part-* "$ROOT"/.anchor/llama-cuda.so.sha256 \
        "$ROOT"/.anchor/llama-rest.tar.xz; do
        [ -s "$f" ] && cp "$f" "$PARTS/"
    done
    return 0
}
prebuilt_llama() { # after keep_parts (below, at the start of every run)
    [ -s "$PARTS/llama-rest.tar.xz" ] && [ -s "$PARTS/llama-cuda.so.sha256" ] || return 1
    mkdir -p "$BUILD" && tar xJf "$PARTS/llama-rest.tar.xz" -C "$BUILD" || return 1
    cat "$PARTS"/llama-cuda.so.xz.part-* | xz -dc > "$BUILD/bin/libggml-cuda.so" || return 1
    (cd "$BUILD/bin" && sha256sum -c "$PARTS/llama-cuda.so.sha256" >> "$LOG" 2>&1) \
        || { say "llama: the prebuilt CUDA library's parts are not all here"; return 1; }
    # Started, and the CUDA backend loaded (a library it cannot load leaves the CPU alone).
    "$BUILD/bin/llama-server" --version >> "$LOG" 2>&1 \
        && "$BUILD/bin/llama-bench" --list-devices 2>&1 | tee -a "$LOG" | grep -q CUDA0 \
        && say "llama: the prebuilt tools start" && return 0
    say "llama: the prebuilt tools do not start here; building from source"
    rm -rf "$BUILD/bin"
    return 1
}

build_llama() {
    [ -x "$BUILD/bin/llama-quantize" ] && [ -x "$BUILD/bin/llama-server" ] && return 0
    prebuilt_llama && return 0
    source_tree || return 1
    mkdir -p "$BUILD"
    [ -f "$BUILD/build.ninja" ] || cmake -S "$SRC" -B "$BUILD" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DCMAKE_BUILD_TYPE=Release > "$BUILD/cmake.log" 2>&1 || return 1
    # Leave a few cores to the tests that run meanwhile.
    local jobs=${PREP_JOBS:-$(( $(nproc) > 6 ? $(nproc) - 4 : 2 ))}
    cmake --build "$BUILD" -j"$jobs" --target llama-bench llama-batched-bench llama-server llama-quantize \
        > "$BUILD/build.log" 2>&1
}

gguf_llama3() {
    local out=$DIR/llama3-8b-f16.gguf
    [ -s "$out" ] && return 0
    source_tree || return 1
    "$PYTHON" scripts/bench/make_random_gguf.py --vocab "$(vocab llama-bpe)" --out "$out.part" \
        --gguf-py "$SRC/gguf-py" --dtype f16 >> "$LOG" 2>&1 && mv "$out.part" "$out"
}

gguf_gemma4() {
    local out=$DIR/gemma4-f16.gguf
    [ -s "$out" ] && return 0
    source_tree || return 1
    "$PYTHON" scripts/bench/make_random_gemma4_gguf.py --vocab "$(vocab gemma-4)" --out "$out.part" \
        --gguf-py "$SRC/gguf-py" --dtype f16 >> "$LOG" 2>&1 && mv "$out.part" "$out"
}

quantise() { # [TYPE...] (default: Q8_0 Q4_K_M)
    local t
    for t in ${*:-Q8_0 Q4_K_M}; do
        local out=$DIR/llama3-8b-${t,,}.gguf
        [ -s "$out" ] && continue
        "$BUILD/bin/llama-quantize" "$DIR/llama3-8b-f16.gguf" "$out.part" "$t" > "$DIR/quantize-$t.log" 2>&1 \
            && mv "$out.part" "$out" || return 1
    done
}

quantise_q8() { quantise Q8_0; }

run() { # NAME function
    local t0=$SECONDS
    say "$1: start"
    if "$2"; then say "$1: done in $((SECONDS - t0)) s"; rm -f "$DIR/$1.failed"; touch "$DIR/$1.ready"
    else say "$1: FAILED after $((SECONDS - t0)) s"; touch "$DIR/$1.failed"; fi
}

# llama.cpp builds while the GGUFs are written (one is CPU-bound compiling, the other writing).
want() { case " $products " in *" $1 "*) return 0 ;; esac; return 1; }
keep_parts
want llama && { run llama build_llama & }
want llama3 && run llama3 gguf_llama3
want gemma4 && run gemma4 gguf_gemma4
wait
for q in q8 quant; do
    want $q || continue
    if [ -f "$DIR/llama.ready" ] && [ -f "$DIR/llama3.ready" ]; then
        if [ $q = q8 ]; then run q8 quantise_q8; else run quant quantise; fi
    else
        say "$q: skipped (llama or llama3 missing)"
        touch "$DIR/$q.failed"
    fi
done
say "all: finished"
