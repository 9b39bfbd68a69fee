#!/usr/bin/env bash
# Decode on the GPU machine in one call, under 3 minutes: the contract of the tensor-core decode
# GEMM and of the fused decode launches (bits against the skinny kernel and the unfused
# launches, float64, the planted bugs it must catch), the GEMM kernels alone (`cuda_bench
# llama3-8b gemm`), the A/B of each decode switch end to end (`cuda_bench llama3-8b
# decode-grid`: batch 1/8/32/128 at depth 0, 1/8/32 at 8k; then batch 1 per fusion), and the
# invariance suites with the switches on, while time remains.
# QUICK=1 (off by default) runs only the tensor-core GEMM's contract (tc_gemm_contract,
# tc_auto_contract) and decode at batch 32 and 128 (depth 0, `cuda_bench llama3-8b decode-tc`)
# with the defaults against KILN_SKINNY_TC=auto, and prints the ratio: under a minute once
# the kernels are compiled.
# Needs the executables from scripts/build-gpu-carry.sh in .carry/ (with KILN_CARRY_KERNELS=1
# the compiled kernels too, which saves the NVRTC time here). Logs under $OUT (default
# ./decode-gpu-out); the summary comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/decode-gpu-out}"
mkdir -p "$OUT"
source scripts/carry-run-env.sh

if [ "${QUICK:-0}" = 1 ]; then
    contract=$(exe test contract_decode_fused)
    for t in tc_gemm_contract tc_auto_contract; do
        budget 40 "$contract" --include-ignored --exact "$t" --test-threads=1 --nocapture > "$OUT/contract-$t.log" 2>&1
        say "$t: rc=$?, $(checks "$OUT/contract-$t.log")"
        grep -E "\] FAIL |panicked|^SKIP" "$OUT/contract-$t.log" | head -6 | cut -c1-220 | sed 's/^/    /' | tee -a "$summary"
    done
    for tc in off auto; do
        budget 40 env KILN_SKINNY_TC=$tc "$bench" llama3-8b decode-tc > "$OUT/tc-$tc.json" 2> "$OUT/tc-$tc.log"
        say "decode-tc KILN_SKINNY_TC=$tc: rc=$?"
    done
    python3 - "$OUT" <<'EOF' | tee -a "$summary"
import re, sys
out = sys.argv[1]
def rates(tc):
    r = {}
    try:
        for line in open(f"{out}/tc-{tc}.log"):
            m = re.match(r"BENCH decode batch (\d+) depth 0: ([\d.]+) tok/s", line)
            if m:
                r[int(m[1])] = float(m[2])
    except OSError:
        pass
    return r
base, auto = rates("off"), rates("auto")
for b in (32, 128):
    if b in base and b in auto:
        print(f"b{b} d0: defaults {base[b]:,.1f}, KILN_SKINNY_TC=auto {auto[b]:,.1f} tok/s ({auto[b] / base[b]:.3f}x)")
    else:
        print(f"b{b} d0: missing (defaults {base.get(b)}, auto {auto.get(b)})")
EOF
    say "QUICK ($(( $(date +%s) - start )) s)"
    if grep -q "\] FAIL \|panicked" "$OUT"/contract-tc_*.log 2>/dev/null; then
        say "RESULT: failures (see above and $OUT)"
        exit 1
    fi
    say "RESULT: no failures"
    exit 0
fi

# 1. The contract, each test in a process of its own (a faulting kernel takes its process's
# context with it). The first one compiles the kernels into the cache unless they came along.
contract=$(exe test contract_decode_fused)
for t in tc_gemm_contract tc_auto_contract fused_decode_contract planted::planted_bugs_fail; do
    log="$OUT/contract-${t##*::}.log"
    budget 50 "$contract" --include-ignored --exact "$t" --test-threads=1 --nocapture > "$log" 2>&1
    say "$t: rc=$?, $(checks "$log")"
    grep -E "\] FAIL |panicked|^SKIP" "$log" | head -6 | cut -c1-220 | sed 's/^/    /' | tee -a "$summary"
done

# 2. End to end, each switch against the defaults (one process per setting: switches are read
# once a process).
grid() { # RUN SECONDS [VAR=VALUE...]
    local run=$1 secs=$2; shift 2
    budget "$secs" env "$@" "$bench" llama3-8b decode-grid > "$OUT/grid-$run.json" 2> "$OUT/grid-$run.log"
    say "decode-grid $run${*:+ ($*)}: rc=$?"
}
grid base 40 KILN_DECODE_FUSE=none
grid all 40 KILN_DECODE_FUSE=all KILN_SKINNY_TC=auto
grid tc 40 KILN_SKINNY_TC=auto
grid fuse 40 KILN_DECODE_FUSE=all

# 3. The GEMM kernels alone: skinny against each tensor-core shape, 1-256 rows.
budget 30 "$bench" llama3-8b gemm > "$OUT/gemm.json" 2> "$OUT/gemm.log"
say "cuda_bench gemm: rc=$?"

# 4. Each fusion alone at batch 1 (depth 0).
for f in glu add norm rope; do
    budget 12 env KILN_DECODE_FUSE=$f "$bench" llama3-8b decode > "$OUT/b1-$f.json" 2> "$OUT/b1-$f.log"
    say "decode b1 KILN_DECODE_FUSE=$f: rc=$?"
done

# 5. The invariance suites with every switch on and the tensor-core kernel from 2 rows (so
# verify steps and small batches take it too), while time remains.
for t in backend_invariance verify_rows graphs_parity prefix_reuse; do
    KILN_DECODE_FUSE=all KILN_SKINNY_TC=2 budget 40 "$(exe test $t)" --include-ignored --test-threads=1 --nocapture > "$OUT/on-$t.log" 2>&1
    rc=$?
    [ $rc = 124 ] && { say "$t (switches on): skipped or out of time"; continue; }
    say "$t (KILN_DECODE_FUSE=all KILN_SKINNY_TC=2): rc=$rc, $(checks "$OUT/on-$t.log")"
done

# Summary: decode tok/s per setting side by side, the GEMM lines at 1, 64, 128 and 256 rows.
say ""
say "SUMMARY ($(( $(date +%s) - start )) s)"
python3 - "$OUT" <<'EOF' | tee -a "$summary"
import re, sys, os
out = sys.argv[1]
def rates(path):
    r = {}
    if os.path.exists(path):
        for line in open(path):
            m = re.match(r"BENCH decode batch (\d+) depth (\d+): ([\d.]+) tok/s", line)
            if m:
                r[(int(m[1]), int(m[2]))] = float(m[3])
    return r
runs = ["base", "tc", "fuse", "all"]
grid = {run: rates(f"{out}/grid-{run}.log") for run in runs}
keys = sorted({k for g in grid.values() for k in g}, key=lambda k: (k[1], k[0]))
print("decode tok/s    " + "".join(f"{r:>16}" for r in runs))
for k in keys:
    base = grid["base"].get(k)
    cells = []
    for r in runs:
        v = grid[r].get(k)
        cells.append("" if v is None else f"{v:,.1f}" + (f" ({v / base:.2f}x)" if base and r != "base" else ""))
    print(f"b{k[0]:<4} d{k[1]:<8}" + "".join(f"{c:>16}" for c in cells))
for f in ["glu", "add", "norm", "rope"]:
    v = rates(f"{out}/b1-{f}.log").get((1, 0))
    base = grid["base"].get((1, 0))
    if v:
        print(f"b1 d0 KILN_DECODE_FUSE={f}: {v:.1f} tok/s" + (f" ({v / base:.3f}x base)" if base else ""))
if os.path.exists(f"{out}/gemm.log"):
    for line in open(f"{out}/gemm.log"):
        if re.match(r"BENCH gemm \S+ \S+ rows (1|64|128|256):", line):
            print(line.strip()[len("BENCH "):][:400])
EOF
if grep -q "\] FAIL \|panicked" "$OUT"/contract-*.log "$OUT"/on-*.log 2>/dev/null; then
    say "RESULT: failures (see above and $OUT)"
    exit 1
fi
say "RESULT: no failures"
