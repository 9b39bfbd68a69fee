#!/usr/bin/env bash
# Fingerprints of the CPU backend's logits on every fixture model, the shipped models and the
# dummy presets that fit this machine (crates/kiln/examples/logits_digest.rs), one line per case.
# Run before and after a change that must not move a bit, and diff the two files:
#   scripts/digests.sh > before.txt; ...; scripts/digests.sh > after.txt; diff before.txt after.txt
# The GPU's lines come from the same example with `cuda` (scripts/gpu-check.sh runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p kiln --example logits_digest
bin=target/debug/examples/logits_digest
shopt -s nullglob
models=()
for f in tests/fixtures/*/; do
    name=$(basename "$f")
    for gguf in "$f"*.gguf; do models+=("$gguf"); done
    models+=("$f"hf)
done
models+=(models/kiln-4m/kiln-4m-f16.gguf models/kiln-4m/hf models/kiln-4m-draft/kiln-4m-draft-f16.gguf)
models+=(dummy:tiny dummy:tiny@300 dummy:llama3-1b@24)
"$bin" cpu "${models[@]}"
