#!/usr/bin/env bash
# Rebuilds the kiln-cuda integration-test executable, cuda_bench, logits_digest and the kiln
# binary into an existing .carry
# (made by scripts/build-gpu-carry.sh), for a quick GPU call after a kernel or test change.
# The carried kernel cache is left as it was: modules whose text changed build on the GPU
# machine at first use.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/targets/cuda}"
[ -d .carry/bin ] || { echo "no .carry: run scripts/build-gpu-carry.sh first" >&2; exit 1; }
exe=$(cargo test -p kiln-cuda --release --test all --no-run --message-format=json 2>/dev/null \
    | python3 scripts/test-executables.py | awk '$1 == "all" { print $2 }')
[ -n "$exe" ] || { cargo test -p kiln-cuda --release --test all --no-run; exit 1; }
cargo build -q -p kiln-cuda --release --example cuda_bench
cargo build -q -p kiln --release --example logits_digest
cargo build -q -p kiln --release
pack() { # source name
    local tmp
    tmp=$(mktemp)
    cp "$1" "$tmp"
    strip --strip-debug "$tmp" 2>/dev/null || true
    xz -9 -c "$tmp" > ".carry/bin/$2.xz"
    chmod +x ".carry/bin/$2.xz"
    rm -f "$tmp" ".carry/bin/$2"
}
pack "$exe" kiln_cuda_tests
pack "$CARGO_TARGET_DIR/release/examples/cuda_bench" cuda_bench
pack "$CARGO_TARGET_DIR/release/examples/logits_digest" logits_digest
pack "$CARGO_TARGET_DIR/release/kiln" kiln
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo +changes)" > .carry/commit.txt
echo "carry refreshed: kiln_cuda_tests, cuda_bench, logits_digest, kiln ($(cat .carry/commit.txt))" >&2
