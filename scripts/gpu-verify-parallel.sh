#!/usr/bin/env bash
# Runs a plan of correctness checks (scripts/gpu-verify.sh's format) as N groups side by side on
# the one GPU, for plans whose checks need little of it each (the contract tests take 1 GiB KV
# pools): the checks are dealt to the groups longest first, each group to the one with the least
# so far, and every group runs under gpu-verify.sh with TOTAL_S of its own. Not for timings:
# the groups share the GPU. Logs under $OUT/gK; the groups' summaries printed last.
# Usage: N=3 TOTAL_S=500 OUT=... scripts/gpu-verify-parallel.sh PLAN
set -uo pipefail
cd "$(dirname "$0")/.."
plan=${1:?a plan file}
N=${N:-3}
OUT=${OUT:-$PWD/gpu-verify-out}
mkdir -p "$OUT"
# Unpack the carried binaries and kernel cache once, before the groups race for them.
OUT=$OUT/unpack scripts/gpu-verify.sh /dev/null > /dev/null 2>&1
python3 - "$plan" "$N" "$OUT" <<'EOF'
import sys
plan, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
checks = [l for l in open(plan).read().splitlines() if l.strip() and not l.startswith('#')]
checks.sort(key=lambda l: -int(l.split()[0]))
groups, load = [[] for _ in range(n)], [0] * n
for c in checks:
    k = load.index(min(load))
    groups[k].append(c)
    load[k] += int(c.split()[0])
for k, g in enumerate(groups):
    open(f"{out}/group-{k}.txt", "w").write("\n".join(g) + "\n")
EOF
for k in $(seq 0 $((N - 1))); do
    OUT=$OUT/g$k scripts/gpu-verify.sh "$OUT/group-$k.txt" > "$OUT/g$k.log" 2>&1 &
done
wait
for k in $(seq 0 $((N - 1))); do
    echo "== group $k"
    cat "$OUT/g$k/summary.txt"
done
