#!/usr/bin/env bash
# Constrained decoding figures on the GPU machine (needs .carry/ from scripts/build-gpu-carry.sh
# with the kiln binary, and .carry-grammar/ from scripts/build-grammar-carry.sh: the mask_time
# example, gguf-py and the Llama-3 vocabulary): the adjusted-sampling kernel contract, the masks'
# CPU time on the 128k vocabulary, then `kiln bench --grammar` on a random Llama-3-8B-shape F16
# GGUF (written here while the first two run): decode at 1, 8 and 32 streams with every stream
# constrained against none. Writes $OUT/{contract.txt,mask-time.md,grammar.json,bench.log}.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/grammar-gpu-out}
G=.carry-grammar
GGUF=${GGUF:-/tmp/kiln-grammar/llama3-8b-f16.gguf}
STREAMS=${STREAMS:-1,8,32}
mkdir -p "$OUT" "$(dirname "$GGUF")"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_KERNEL_CACHE=${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}
for f in .carry/bin/*.xz $G/*.xz; do [ -f "$f" ] && xz -df "$f"; done
export KILN_COMMIT="${KILN_COMMIT:-$(cat .carry/commit.txt 2>/dev/null)}"
[ -s "$GGUF" ] || (python3 scripts/bench/make_random_gguf.py --vocab $G/ggml-vocab-llama-bpe.gguf \
    --out "$GGUF.part" --gguf-py $G/gguf-py --dtype f16 && mv "$GGUF.part" "$GGUF") > "$OUT/gguf.log" 2>&1 &
writer=$!
echo "== contract: device sampling with logit bias and grammar masks"
.carry/bin/contract_sampling --test-threads 1 --nocapture device_adjusted_sampling device_sampling_equals \
    > "$OUT/contract.txt" 2>&1
grep -E "PASS|FAIL|ok|panicked|test result" "$OUT/contract.txt" | tail -12
echo "== mask time, Llama-3 vocabulary (this machine's CPU)"
$G/mask_time $G/ggml-vocab-llama-bpe.gguf 20 | tee "$OUT/mask-time.md"
wait $writer || { echo "GGUF not written:"; tail -5 "$OUT/gguf.log"; exit 1; }
echo "== kiln bench --grammar (8B shape, random F16)"
.carry/bin/kiln bench --model "$GGUF" --device cuda --prefill none --decode 128 --depth 0 \
    --concurrency "$STREAMS" --repeats 3 --warmup 1 \
    --grammar json_object --grammar bench/grammars/nested.json --grammar 'regex:([a-z]{1,8} ){40,400}' \
    --json "$OUT/grammar.json" 2> "$OUT/bench.log" | tail -16
tail -3 "$OUT/bench.log"
