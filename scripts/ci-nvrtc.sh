#!/usr/bin/env bash
# Installs NVRTC (CUDA 13.0, the GPU machine's version) from PyPI into a folder of its own and
# prints the environment the kernels_compile test needs. Usage: eval "$(scripts/ci-nvrtc.sh)"
set -euo pipefail
dir="${KILN_NVRTC_DIR:-$HOME/.cache/kiln/nvrtc-13.0}"
lib="$dir/nvidia/cu13/lib"
if [ ! -e "$lib/libnvrtc.so.13" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$dir" "nvidia-cuda-nvrtc==13.0.88" >&2
fi
[ -e "$lib/libnvrtc.so.13" ] || { echo "ci-nvrtc: libnvrtc.so.13 missing under $lib" >&2; exit 1; }
echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export KILN_REQUIRE_NVRTC=1"
