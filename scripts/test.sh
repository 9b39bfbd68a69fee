#!/usr/bin/env bash
# The whole test suite, as CI runs it: Rust tests (CPU backend, formats, tokenizers, engine, server),
# the NVRTC compile check of every CUDA kernel, the benchmark scripts' checks (scripts/bench/test_*.py)
# and the OpenAI-client tests against `kiln serve`.
#
# Tests build in the release profile, the one the README's run command builds, so the dependencies
# are compiled once for both. What it fetches the first time (all under ~/.cache unless said):
#   - NVRTC 13.0 from PyPI (scripts/ci-nvrtc.sh), so every kernel is compiled even without a GPU,
#     and nvdisasm (scripts/ci-nvdisasm.sh), so the SASS order checks run too;
#   - the vocabularies, tokenizer cases and chat templates of the llama-cpp-python sdist from PyPI
#     (scripts/fetch-test-data.py), unless ../shared sits beside the checkout or $KILN_TEST_DATA
#     points at a copy;
#   - the openai client and pytest into .venv/openai-tests (tests/openai/run.sh).
# Ends with a summary: tests passed, failed and ignored, and why each ignored test was ignored
# (the GPU tests are ignored on a machine without an NVIDIA GPU, and run where there is one).
set -euo pipefail
cd "$(dirname "$0")/.."

# NVRTC from PyPI so that every kernel is compiled in CI even without a GPU.
if [ -x scripts/ci-nvrtc.sh ]; then
  eval "$(bash scripts/ci-nvrtc.sh)"
fi
# nvdisasm from PyPI, so that the SASS order a kernel's speed depends on is checked too.
if [ -x scripts/ci-nvdisasm.sh ]; then
  eval "$(bash scripts/ci-nvdisasm.sh)"
fi

if [ -z "${KILN_TEST_DATA:-}" ] && [ ! -d ../shared/vocab ]; then
  KILN_TEST_DATA="$(python3 scripts/fetch-test-data.py)"
  export KILN_TEST_DATA
fi

# Where a GPU can be used, its tests run too, one at a time: kiln-cuda's test files share one
# executable, and its GPU tests each load models of up to 16 GB onto the one device.
run_ignored=()
if nvidia-smi -L >/dev/null 2>&1; then
  run_ignored=(-- --include-ignored)
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# Examples are compiled by clippy (.ci/run), not here; doc tests run only where a doc comment
# holds a Rust code block, since rustdoc takes about 2 s a crate even when it finds none.
if [ ${#run_ignored[@]} -eq 0 ]; then
  cargo test --workspace --release --no-fail-fast --lib --bins --tests 2>&1 | tee "$log" || status=$?
else
  cargo test --workspace --exclude kiln-cuda --release --no-fail-fast --lib --bins --tests "${run_ignored[@]}" 2>&1 | tee "$log" || status=$?
  cargo test -p kiln-cuda --release --no-fail-fast --lib --bins --tests "${run_ignored[@]}" --test-threads=1 2>&1 | tee -a "$log" || status=$?
fi
if python3 - crates/*/src <<'PY'
import pathlib, re, sys
# What rustdoc runs: a fenced block whose info string names no language but Rust.
rust = {"", "rust", "ignore", "should_panic", "no_run", "compile_fail", "standalone_crate"}
for root in sys.argv[1:]:
    for f in pathlib.Path(root).rglob("*.rs"):
        fence = None
        for line in f.read_text(errors="replace").splitlines():
            m = re.match(r"\s*//[/!]\s?(```+|~~~+)\s*(.*)", line)
            if not m:
                continue
            if fence is None:
                fence = m[1]
                words = [w for w in re.split(r"[\s,]+", m[2]) if w]
                if all(w in rust or w.startswith(("edition", "ignore-")) for w in words):
                    sys.exit(0)
            elif m[1] == fence:
                fence = None
sys.exit(1)
PY
then
  cargo test --workspace --release --no-fail-fast --doc 2>&1 | tee -a "$log" || status=$?
fi

summary() {
  python3 - "$log" <<'PY'
import collections, re, sys
text = open(sys.argv[1], errors="replace").read()
totals = collections.Counter()
for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", text):
    totals["passed"] += int(m[1]); totals["failed"] += int(m[2]); totals["ignored"] += int(m[3])
reasons = collections.Counter(m[1] or "no reason given" for m in re.finditer(r"^test \S+ \.\.\. ignored(?:, (.*))?$", text, re.M))
print(f"summary: {totals['passed']} passed, {totals['failed']} failed, {totals['ignored']} ignored")
for why, n in reasons.most_common():
    print(f"  {n} ignored: {why}")
PY
}
summary
# The benchmark scripts' own checks (standard library Python, a second each).
for t in scripts/bench/test_*.py; do
  python3 "$t" || status=$?
done
[ "$status" -eq 0 ] || exit "$status"

if [ -x tests/openai/run.sh ]; then
  KILN_BIN="${KILN_BIN:-${CARGO_TARGET_DIR:-target}/release/kiln}" bash tests/openai/run.sh
fi
