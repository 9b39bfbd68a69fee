#!/usr/bin/env bash
# The whole test suite, as CI runs it: Rust tests (CPU backend, formats, tokenizers, engine, server),
# the NVRTC compile check of every CUDA kernel, and the OpenAI-client tests against `kiln serve`.
# Installs what it needs (Python venv with the openai client and the NVRTC wheel) under .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

# NVRTC from PyPI so that every kernel is compiled in CI even without a GPU.
if [ -x scripts/ci-nvrtc.sh ]; then
  eval "$(bash scripts/ci-nvrtc.sh)"
fi

cargo test --workspace

if [ -x tests/openai/run.sh ]; then
  bash tests/openai/run.sh
fi
