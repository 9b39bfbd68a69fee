#!/usr/bin/env bash
# OpenAI-client tests: builds (or takes $KILN_BIN) the kiln binary, prepares a venv with the
# official `openai` package and pytest, starts `kiln serve` on a free loopback port, runs pytest
# against it, then stops the server with SIGTERM and checks that it shut down cleanly.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL="${KILN_MODEL:-dummy:tiny}"
if [ -z "${KILN_BIN:-}" ]; then
  # The release profile, as the README's commands build it (nothing is compiled twice).
  cargo build -p kiln --release --quiet
  KILN_BIN="${CARGO_TARGET_DIR:-target}/release/kiln"
fi

VENV=.venv/openai-tests
if [ ! -x "$VENV/bin/pytest" ] || ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check openai pytest
fi

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
LOG="$(mktemp)"
"$KILN_BIN" serve --model "$MODEL" --host 127.0.0.1 --port "$PORT" >"$LOG" 2>&1 &
SERVER=$!
stop_server() {
  if kill -0 "$SERVER" 2>/dev/null; then kill -TERM "$SERVER" 2>/dev/null || true; fi
}
on_exit() {
  local rc=$?
  stop_server
  if [ "$rc" -ne 0 ]; then echo "--- kiln serve log ---"; tail -n 40 "$LOG"; fi
  rm -f "$LOG"
}
trap on_exit EXIT

export KILN_BASE_URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 300); do
  if python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=1)" "$KILN_BASE_URL" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$SERVER" 2>/dev/null; then echo "kiln serve exited before becoming healthy" >&2; exit 1; fi
  sleep 0.2
done

status=0
"$VENV/bin/pytest" -q tests/openai || status=$?

# A clean shutdown: SIGTERM, exit code 0, within a few seconds.
kill -TERM "$SERVER"
for _ in $(seq 1 100); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SERVER" 2>/dev/null; then
  echo "kiln serve did not stop within 10 s of SIGTERM" >&2
  kill -KILL "$SERVER"; status=1
else
  wait "$SERVER" || { echo "kiln serve exited with code $? after SIGTERM" >&2; status=1; }
fi
exit $status
