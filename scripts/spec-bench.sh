#!/usr/bin/env bash
# Speculative decoding figures: `kiln generate --json` with and without drafting on two workloads,
# each run REPEATS times, one JSON line per run (median them with scripts/spec-summary.py).
#   edit  - code editing: the prompt holds a file and asks for it again, so the reply repeats
#           its context (what prompt lookup is for)
#   prose - an ordinary prompt (what a draft model is for)
# Drafters: none, ngram, and the draft model DRAFT (default the shipped kiln-4m-draft).
# Usage: scripts/spec-bench.sh [MODEL] [DEVICE]   (default the shipped kiln-4m on the cpu)
#   KILN_BIN (default target/release/kiln), OUT (default ./spec-bench-out), REPEATS=3, TOKENS=200
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/kiln-4m/kiln-4m-f16.gguf}
DEVICE=${2:-cpu}
DRAFT=${DRAFT:-models/kiln-4m-draft/kiln-4m-draft-f16.gguf}
BIN=${KILN_BIN:-target/release/kiln}
OUT=${OUT:-$PWD/spec-bench-out}
REPEATS=${REPEATS:-3}
TOKENS=${TOKENS:-200}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "no kiln binary at $BIN" >&2; exit 1; }
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The file the edit workload quotes: about 400 tokens of kiln-4m's vocabulary, leaving room in its
# 1,024-token context for the reply.
file=$(head -c 1100 crates/kiln-engine/src/draft.rs)
edit_prompt="Here is a file:

$file

The same file again, unchanged:

$(echo "$file" | head -n 3)"
prose_prompt="A file descriptor is"

results="$OUT/spec-$(basename "$MODEL")-$DEVICE.jsonl"
: > "$results"
for workload in edit prose; do
    prompt=$edit_prompt
    [ "$workload" = prose ] && prompt=$prose_prompt
    for drafter in none ngram "$DRAFT"; do
        args=()
        [ "$drafter" != none ] && args=(--draft "$drafter")
        for r in $(seq "$REPEATS"); do
            line=$("$BIN" generate --model "$MODEL" --device "$DEVICE" --prompt "$prompt" \
                -n "$TOKENS" --ignore-eos --json "${args[@]}" 2>>"$OUT/spec.log") || { echo "run failed" >&2; continue; }
            python3 -c '
import json, sys
j = json.loads(sys.argv[1])
t = j["timings"]
print(json.dumps({"workload": sys.argv[2], "drafter": sys.argv[3], "device": sys.argv[4],
    "generated": t["generated_tokens"], "tok_s": round(t["generation_tokens_per_s"], 1),
    "draft": j["draft"]}))' "$line" "$workload" "$(basename "$drafter")" "$DEVICE" | tee -a "$results"
        done
    done
done
