#!/usr/bin/env bash
# Fetches nvdisasm (CUDA 13, the nvidia-cuda-nvdisasm wheel from PyPI, 6 MB) once into a folder
# of its own and prints the environment the SASS tests need (kiln-cuda's sass_order, which
# checks where ptxas put the waits a kernel's speed depends on; scripts/sass-loops.sh).
# Usage: eval "$(scripts/ci-nvdisasm.sh)"
set -euo pipefail
dir="${KILN_NVDISASM_DIR:-$HOME/.cache/kiln/nvdisasm}"
nvd="$dir/nvidia/cu13/bin/nvdisasm"
if [ ! -x "$nvd" ]; then
    mkdir -p "$dir"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_17_x86_64 "nvidia-cuda-nvdisasm==13.2.86" -d "$dir/wheel" >&2
    python3 -c "import zipfile,glob,sys; zipfile.ZipFile(glob.glob(sys.argv[1] + '/wheel/*.whl')[0]).extractall(sys.argv[1])" "$dir"
    chmod +x "$nvd"
fi
[ -x "$nvd" ] || { echo "ci-nvdisasm: nvdisasm missing under $dir" >&2; exit 1; }
echo "export KILN_NVDISASM=$nvd"
echo "export KILN_REQUIRE_NVDISASM=1"
