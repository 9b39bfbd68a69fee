#!/usr/bin/env bash
# Where a step's time goes, on the GPU machine: Nsight Compute times every kernel of two decode
# steps of N sequences (`cuda_bench PRESET decode-profile N`: three warm-up steps, then two
# between cuProfilerStart and cuProfilerStop) or of the last prefill chunk of an N-token prompt
# (`prefill-profile N`), then sums the durations per kernel name. Clocks and caches are left as they are (--clock-control none --cache-control
# none), so the kernels run as a step runs them, one at a time. By default only each kernel's
# duration, which ncu reads in one pass with nothing saved or restored; METRICS=full adds L2,
# DRAM, SM and tensor-pipe use (several passes a kernel, each restoring the device memory the
# kernel may write: minutes for a decode step of an 8B model). Needs .carry/bin/cuda_bench
# (scripts/build-gpu-carry.sh). KERNEL=REGEX profiles only the kernels whose names match, the
# first COUNT (default 8) of them, with ncu's sections SECTIONS (default: speed of light, warp
# stall reasons, memory workload, occupancy, launch) and prints ncu's details page and every
# stall reason's cycles per issued instruction: why a kernel runs as long as it does, not only
# how long. EXTRA_METRICS (a comma-separated list) adds metrics to that page.
# Usage: OUT=... scripts/step-profile.sh decode|prefill [N] [PRESET] [chunk=N | depth=D]
#   (depth=D: decode from D tokens of context per sequence instead of none)
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-decode}
case "$what" in
    decode) n=${2:-128} ;;
    prefill) n=${2:-8192} ;;
    *) echo "step-profile: decode or prefill, not $what"; exit 2 ;;
esac
preset=${3:-llama3-8b}
extra=${4:-}
OUT=${OUT:-$PWD/step-profile-out}
mkdir -p "$OUT"
ncu=/usr/local/cuda/bin/ncu
[ -x "$ncu" ] || ncu=$(command -v ncu || true)
[ -n "$ncu" ] || { echo "step-profile: ncu not found"; exit 1; }
bench=.carry/bin/cuda_bench
[ -f "$bench.xz" ] && xz -df "$bench.xz"
rep="$OUT/$what-$n${extra:+-$extra}"
if [ -n "${KERNEL:-}" ]; then
    sections=${SECTIONS:-SpeedOfLight WarpStateStats MemoryWorkloadAnalysis Occupancy LaunchStats}
    args=()
    for s in $sections; do args+=(--section "$s"); done
    # EXTRA_METRICS: more metrics on the details page (e.g. sm__cycles_active.min,...max: how
    # unevenly the multiprocessors were busy).
    [ -n "${EXTRA_METRICS:-}" ] && args+=(--metrics "$EXTRA_METRICS")
    rep="$rep-$(echo "$KERNEL" | tr -c 'A-Za-z0-9_\n' _)"
    "$ncu" --clock-control none --cache-control none --profile-from-start off \
        --kernel-name "regex:$KERNEL" --launch-count "${COUNT:-8}" "${args[@]}" \
        -o "$rep" -f "$bench" "$preset" "$what-profile" "$n" $extra > "$rep.log" 2>&1
    echo "ncu: rc=$?"
    "$ncu" -i "$rep.ncu-rep" --page details > "$rep-details.txt" 2>> "$rep.log"
    # The details page names only the top stall reason; the raw page holds every reason's
    # cycles per issued instruction (WarpStateStats), which ncu_summary.py lists largest first.
    "$ncu" -i "$rep.ncu-rep" --page raw --csv > "$rep-raw.csv" 2>> "$rep.log"
    python3 scripts/bench/ncu_summary.py "$rep-raw.csv" > "$rep-stalls.txt" 2>> "$rep.log"
    cat "$rep-stalls.txt"
    grep -iE "^  [a-z_0-9]+|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Warp|L2 Hit|Block Limit" \
        "$rep-details.txt" | head -"${LINES_MAX:-80}"
    exit 0
fi
metrics=gpu__time_duration.sum
[ "${METRICS:-time}" = full ] && metrics=$metrics,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
"$ncu" --clock-control none --cache-control none --profile-from-start off --metrics "$metrics" \
    -o "$rep" -f "$bench" "$preset" "$what-profile" "$n" $extra > "$rep.log" 2>&1
rc=$?
echo "ncu: rc=$rc"
grep -E "BENCH|ERROR|error" "$rep.log" | head -5
"$ncu" -i "$rep.ncu-rep" --page raw --csv > "$rep.csv" 2>> "$rep.log"
python3 scripts/bench/ncu_summary.py --by-name "$rep.csv" | tee "$rep-by-name.txt"
python3 scripts/bench/ncu_summary.py "$rep.csv" > "$rep-kernels.txt"
