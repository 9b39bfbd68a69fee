#!/usr/bin/env bash
# What scripts/grammar-gpu.sh needs besides .carry/: the mask_time example (release), the Llama-3
# vocabulary GGUF and llama.cpp's gguf-py (to write the random GGUF there), under .carry-grammar/.
# Usage: scripts/build-grammar-carry.sh SHARED_VOCAB_DIR GGUF_PY_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
VOCAB=${1:?folder holding ggml-vocab-llama-bpe.gguf}
GGUF_PY=${2:?llama.cpp gguf-py folder}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/targets/cuda}"
cargo build --release -p kiln-grammar --example mask_time
rm -rf .carry-grammar && mkdir -p .carry-grammar
cp "$CARGO_TARGET_DIR/release/examples/mask_time" .carry-grammar/
strip --strip-debug .carry-grammar/mask_time
xz -T2 -6 .carry-grammar/mask_time
cp "$VOCAB/ggml-vocab-llama-bpe.gguf" .carry-grammar/
cp -r "$GGUF_PY" .carry-grammar/gguf-py
du -sh .carry-grammar
