#!/usr/bin/env bash
# Without a GPU: builds one kernel module for sm_90 with NVRTC (the kernels_compile test, as CI
# does) and prints the loops of the entries named, instruction counts and their most frequent
# opcodes (scripts/bench/sass_loops.py), read with nvdisasm from the nvidia-cuda-nvdisasm wheel
# (scripts/ci-nvdisasm.sh fetches it once into ~/.cache/kiln/nvdisasm). For comparing a kernel's inner loop before and
# after an edit; the GPU still decides what is faster.
# Usage: scripts/sass-loops.sh MODULE ENTRY [ENTRY...]   e.g. scripts/sass-loops.sh skinny_tc skinny_tc_t2x2
set -euo pipefail
cd "$(dirname "$0")/.."
module=${1:?a kernel module (kernel_sources.rs names them)}
shift
[ $# -gt 0 ] || { echo "sass-loops: name at least one entry of $module" >&2; exit 2; }
eval "$(scripts/ci-nvdisasm.sh)"
eval "$(scripts/ci-nvrtc.sh)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
KILN_COMPILE_ONLY="$module" KILN_DUMP_CUBIN="$out" \
    cargo test -q --release -p kiln-cuda --test all kernels_compile::kernels_compile > "$out/build.log" 2>&1 \
    || { tail -20 "$out/build.log" >&2; exit 1; }
python3 scripts/bench/sass_loops.py "$KILN_NVDISASM" "$out/$module.cubin" "$@"
