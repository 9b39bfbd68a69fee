# Sourced (not run) by attn-gpu.sh and decode-gpu.sh on the GPU machine, in the repository root
# with OUT set: the carried executables' environment, the carry unpacked (its compiled kernels
# into the kernel cache, saving NVRTC's time) and what both scripts use: say (the terminal and
# $OUT/summary.txt), exe KIND NAME (a manifest entry's path), left (seconds of TOTAL_S, default
# 175, since this ran), budget SECONDS CMD... (CMD for at most SECONDS or what is left), checks
# LOG (a log's pass and fail counts), bench (cuda_bench's path).
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_REQUIRE_GPU=1
export KILN_KERNEL_CACHE="${KILN_KERNEL_CACHE:-/tmp/kiln-kernel-cache}"
export RUST_BACKTRACE=0
manifest=.carry/manifest.txt
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
[ -f "$manifest" ] || { echo "FAIL: $manifest missing (run scripts/build-gpu-carry.sh first)"; exit 1; }
for f in .carry/bin/*.xz; do [ -f "$f" ] && xz -df "$f"; done
if [ -f .carry/kernel-cache.tar.xz ]; then
    mkdir -p "$KILN_KERNEL_CACHE"
    tar -C "$KILN_KERNEL_CACHE" --strip-components=1 -xJf .carry/kernel-cache.tar.xz
fi
exe() { awk -v k="$1" -v n="$2" '$1==k && $2==n {print ".carry/"$3}' "$manifest"; }
start=$(date +%s)
TOTAL_S=${TOTAL_S:-175}
left() { echo $(( TOTAL_S - ($(date +%s) - start) )); }
budget() { local t=$1; shift; local l; l=$(left); [ "$l" -lt "$t" ] && t=$l; [ "$t" -lt 5 ] && return 124; timeout "$t" "$@"; }
checks() { echo "$(grep -c '\] PASS ' "$1") pass, $(grep -c '\] FAIL \|panicked' "$1") fail"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1 | tee -a "$summary"
bench=$(exe bench cuda_bench)
