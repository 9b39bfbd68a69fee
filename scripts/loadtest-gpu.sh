#!/usr/bin/env bash
# The OpenAI server under load on the GPU: starts `kiln serve --device cuda` on a model, waits
# until it answers, runs scripts/loadtest.py (streaming clients at each concurrency level) and
# stops the server. Results: $OUT/loadtest.json, $OUT/loadtest.txt, $OUT/serve.log.
#
# Usage: scripts/loadtest-gpu.sh MODEL   (a .gguf, a Hugging Face folder or dummy:PRESET)
# Environment: KILN_BIN (default .carry/bin/kiln, else target/release/kiln), OUT=./loadtest-out,
#   PORT=8011, CONCURRENCY=1,8,32,128, DURATION=15 (seconds per level), MAX_TOKENS=64,
#   DEVICE=cuda, MAX_SEQS=128 (--max-num-seqs: every client of the top level decodes at once),
#   LOGPROBS=0 (requests without logprobs), TEMPERATURE=0 (greedy), TOP_P=1
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: scripts/loadtest-gpu.sh MODEL}
OUT=${OUT:-$PWD/loadtest-out}
PORT=${PORT:-8011}
DEVICE=${DEVICE:-cuda}
BIN=${KILN_BIN:-}
if [ -z "$BIN" ]; then
    for BIN in .carry/bin/kiln target/release/kiln; do [ -x "$BIN" ] && break; done
fi
[ -x "$BIN" ] || { echo "no kiln binary: set KILN_BIN" >&2; exit 1; }
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

"$BIN" serve --model "$MODEL" --device "$DEVICE" --port "$PORT" --max-num-seqs "${MAX_SEQS:-128}" \
    > "$OUT/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT

# Loading a large model takes a while: wait for /health, or for the server to die.
for _ in $(seq 600); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null && break
    kill -0 $server 2>/dev/null || { echo "server exited:" >&2; tail -20 "$OUT/serve.log" >&2; exit 1; }
    sleep 1
done
python3 scripts/loadtest.py --url "http://127.0.0.1:$PORT" --concurrency "${CONCURRENCY:-1,8,32,128}" \
    --duration "${DURATION:-15}" --max-tokens "${MAX_TOKENS:-64}" --out "$OUT/loadtest.json" \
    --temperature "${TEMPERATURE:-0}" --top-p "${TOP_P:-1}" \
    $([ "${LOGPROBS:-1}" = 0 ] && echo --no-logprobs) | tee "$OUT/loadtest.txt"
rc=${PIPESTATUS[0]}
curl -s "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics.txt" 2>/dev/null || true
exit "$rc"
