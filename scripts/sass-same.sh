#!/usr/bin/env bash
# Without a GPU: whether an edit of the kernel sources changed the machine code. Builds the kernel
# modules for sm_90 with NVRTC (the kernels_compile test, as CI does) at REV (default HEAD, from a
# git worktree under $TMPDIR) and in the working tree, and compares them entry by entry with
# nvdisasm (scripts/bench/sass_compare.py): identical, the same opcodes (an edit that only moved
# code: registers and order aside), or differs. What the GPU tests would check, short of running:
# an entry that differs still needs the contract tests on a GPU.
# Usage: [MODULES=a,b] scripts/sass-same.sh [REV]   (MODULES: kernel_sources.rs's names; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
eval "$(scripts/ci-nvdisasm.sh)"
eval "$(scripts/ci-nvrtc.sh)"
work=$(mktemp -d)
trap 'git worktree remove --force "$work/tree" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
dump() {  # dump SOURCE_DIR OUT_DIR
    mkdir -p "$2"
    (cd "$1" && env ${MODULES:+KILN_COMPILE_ONLY="$MODULES"} KILN_DUMP_CUBIN="$2" \
        cargo test -q --release -p kiln-cuda --test all kernels_compile::kernels_compile) > "$2.log" 2>&1 \
        || { tail -20 "$2.log" >&2; exit 1; }
}
git worktree add -q --detach "$work/tree" "$rev"
# The worktree builds into its own target folder, kept between runs, so neither build undoes
# the other's.
CARGO_TARGET_DIR="${SASS_SAME_TARGET:-$HOME/.cache/kiln/sass-same-target}" dump "$work/tree" "$work/before"
dump "$PWD" "$work/after"
python3 scripts/bench/sass_compare.py "$KILN_NVDISASM" "$work/before" "$work/after"
