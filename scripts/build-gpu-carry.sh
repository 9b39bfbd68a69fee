#!/usr/bin/env bash
# Builds what the GPU machine (no Rust there) needs to run scripts/gpu-check.sh: the kiln-cuda
# test executables, the cuda_bench example and the release kiln binary, stripped, under .carry/
# (ignored by git, carried to the GPU machine), with .carry/manifest.txt listing them as
# "KIND NAME PATH" lines: `test NAME` for each module of the integration-test executable
# (`suite kiln_cuda_tests`) and `test unit` for the library's own tests.
# Usage: scripts/build-gpu-carry.sh   (KILN_CARRY_SKIP_BIN=1: no kiln binary)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/targets/cuda}"
carry=.carry
rm -rf "$carry"
mkdir -p "$carry/bin"
manifest="$carry/manifest.txt"
: > "$manifest"

add() { # kind name source
    local dst="$carry/bin/$2"
    cp "$3" "$dst"
    strip --strip-debug "$dst" 2>/dev/null || true
    echo "$1 $2 bin/$2" >> "$manifest"
}

echo "building kiln-cuda test executables (release)..." >&2
cargo test -p kiln-cuda --release --no-run --message-format=json 2>/dev/null \
    | python3 scripts/test-executables.py > "$carry/tests.txt"
# Surface compile errors (the JSON run hides them).
if [ ! -s "$carry/tests.txt" ]; then
    cargo test -p kiln-cuda --release --no-run
    echo "no test executables were built" >&2
    exit 1
fi
while read -r name exe; do
    case "$name" in
        kiln_cuda) add test unit "$exe" ;;
        all)
            # One executable holds every file of tests/all as a module; each module NAME gets
            # a `test NAME` line and a bin/NAME that runs that module alone, as its own
            # executable once did (scripts/carry-test-module.sh).
            add suite kiln_cuda_tests "$exe"
            for module in $("$exe" --list --format terse | sed -n 's/^\([a-z0-9_]*\)::.*: test$/\1/p' | sort -u); do
                cp scripts/carry-test-module.sh "$carry/bin/$module"
                echo "test $module bin/$module" >> "$manifest"
            done
            ;;
        *) add test "$name" "$exe" ;;
    esac
done < "$carry/tests.txt"
rm "$carry/tests.txt"

echo "building the cuda_bench example (release)..." >&2
cargo build -p kiln-cuda --release --example cuda_bench
add bench cuda_bench "$CARGO_TARGET_DIR/release/examples/cuda_bench"
echo "building the logits_digest example (release)..." >&2
cargo build -p kiln --release --example logits_digest
add digest logits_digest "$CARGO_TARGET_DIR/release/examples/logits_digest"

if [ "${KILN_CARRY_SKIP_BIN:-0}" != 1 ]; then
    echo "building the kiln binary (release)..." >&2
    if cargo build -p kiln --release; then
        add bin kiln "$CARGO_TARGET_DIR/release/kiln"
    else
        echo "WARNING: the kiln binary did not build; the GPU checks do not need it" >&2
    fi
fi
# KILN_CARRY_KERNELS=1: the bf16 kernels compiled for sm_90 (NVRTC from scripts/ci-nvrtc.sh)
# as a kernel cache in .carry/kernel-cache.tar.xz, which decode-gpu.sh unpacks into its cache:
# no NVRTC minutes on the GPU machine.
if [ "${KILN_CARRY_KERNELS:-0}" = 1 ]; then
    eval "$(scripts/ci-nvrtc.sh)"
    KILN_KERNEL_CACHE="$PWD/$carry/kernel-cache" KILN_FILL_CACHE=1 \
        cargo test -p kiln-cuda --release --test all kernels_compile::fill_kernel_cache -- --nocapture >&2
    tar -C "$carry" -cJf "$carry/kernel-cache.tar.xz" kernel-cache && rm -rf "$carry/kernel-cache"
fi
# The commit the executables were built from (the GPU machine's copy may have no history).
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo +changes)" > "$carry/commit.txt"
# xz keeps the carry small (gpu-check.sh unpacks it there); KILN_CARRY_XZ=0 leaves it plain.
if [ "${KILN_CARRY_XZ:-1}" != 0 ]; then
    xz -T2 -6 "$carry"/bin/*
fi
# The kernel sources travel with the repository; nothing else is needed there.
size=$(du -sm "$carry" | cut -f1)
echo "carry: ${size} MB in $carry:" >&2
cat "$manifest" >&2
if [ "$size" -gt 40 ]; then
    echo "WARNING: $carry is ${size} MB, over the 40 MB budget" >&2
fi
