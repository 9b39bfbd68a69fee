"""Medians of scripts/spec-bench.sh runs: per workload and drafter, decode tok/s, the speed-up over
no drafting, the acceptance rate (accepted / proposed) and tokens per target pass.
Usage: spec-summary.py RESULTS.jsonl"""
import json, statistics, sys

runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in runs:
    groups.setdefault((r["workload"], r["drafter"]), []).append(r)
base = {w: statistics.median(x["tok_s"] for x in rs) for (w, d), rs in groups.items() if d == "none"}
print("| workload | drafter | decode tok/s (median) | speed-up | accepted / proposed | tokens per target pass |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for (w, d), rs in sorted(groups.items()):
    tps = statistics.median(x["tok_s"] for x in rs)
    prop = sum(x["draft"]["proposed"] for x in rs)
    acc = sum(x["draft"]["accepted"] for x in rs)
    passes = sum(x["draft"]["target_passes"] for x in rs)
    gen = sum(x["generated"] for x in rs)
    rate = f"{acc / prop:.2f}" if prop else "-"
    # Plain decoding makes one token per pass; a verify pass makes accepted + 1.
    per_pass = f"{(acc + passes) / passes:.2f}" if passes else "1.00"
    print(f"| {w} | {d} | {tps:.1f} | {tps / base[w]:.2f}x | {rate} | {per_pass} |")
