#!/usr/bin/env python3
"""A few lines per kernel from an Nsight Compute report exported with
`ncu -i REPORT --page raw --csv` (read from the file named, or stdin): duration, SM and tensor
pipe use, issue slots, eligible warps, the largest stall reasons, L2 and DRAM traffic and
shared-memory bank conflicts. Columns a report lacks are left out, so any section set works.

With --by-name: one line per kernel name instead, its launches, total and mean duration and
share of the whole, the names ordered by total (where a profiled step's time goes).

Usage: ncu_summary.py [--by-name] RAW.csv
"""
import csv
import sys

# (label, metric name, scale) for the figures printed whenever the report has them.
FIGURES = [
    ("duration us", "gpu__time_duration.sum", 1e-3),
    ("SM %", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("issue active %", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1),
    ("warps active/sched", "smsp__warps_active.avg.per_cycle_active", 1),
    ("eligible/sched", "smsp__warps_eligible.avg.per_cycle_active", 1),
    ("cycles/issue", "smsp__average_warp_latency_per_inst_issued.ratio", 1),
    ("L2 hit %", "lts__t_sector_hit_rate.pct", 1),
    ("L2 %", "lts__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("DRAM %", "dram__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("L1 %", "l1tex__throughput.avg.pct_of_peak_sustained_active", 1),
    ("smem bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 1),
]
STALL = ("smsp__average_warps_issue_stalled_", "_per_issue_active.ratio")


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def duration_scale(unit):
    """Microseconds per unit of a duration column."""
    u = unit.strip().lower()
    return {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}.get(u, 1e-3)


def by_name(head, units, data, col, name_col):
    i = col.get("gpu__time_duration.sum")
    if i is None or name_col is None:
        print("ncu summary: the report has no gpu__time_duration.sum or no kernel names")
        return
    scale = duration_scale(units[i])
    totals = {}
    for r in data:
        v = number(r[i]) if len(r) == len(head) else None
        if v is None:
            continue
        n, t = totals.get(r[name_col], (0, 0.0))
        totals[r[name_col]] = (n + 1, t + v * scale)
    whole = sum(t for _, t in totals.values())
    print(f"NCU total {whole:.1f} us over {sum(n for n, _ in totals.values())} launches")
    for name, (n, t) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"NCU {t:10.1f} us {100 * t / whole:5.1f}% {n:5d} x {t / n:8.2f} us  {name}")


def main():
    args = [a for a in sys.argv[1:] if a != "--by-name"]
    f = open(args[0], newline="") if args else sys.stdin
    rows = list(csv.reader(f))
    if len(rows) < 3:
        print("ncu summary: no kernel in the report")
        return
    head, units, data = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(head)}
    name_col = col.get("Kernel Name", col.get("Function Name"))
    if "--by-name" in sys.argv[1:]:
        by_name(head, units, data, col, name_col)
        return
    for r in data:
        if len(r) != len(head):
            continue
        name = r[name_col] if name_col is not None else "?"
        parts = []
        for label, metric, scale in FIGURES:
            i = col.get(metric)
            v = number(r[i]) if i is not None else None
            if v is not None:
                # Durations come in the unit the report chose; make them microseconds.
                if metric == "gpu__time_duration.sum":
                    scale = duration_scale(units[i])
                parts.append(f"{label} {v * scale:.1f}")
        # Tensor-pipe use, whichever of the pipe metrics the report holds.
        for i, metric in enumerate(head):
            if "pipe_tensor" in metric and metric.endswith("pct_of_peak_sustained_active"):
                v = number(r[i])
                if v is not None:
                    parts.append(f"{metric.split('__')[1].split('.')[0]} {v:.1f}%")
        stalls = []
        for i, metric in enumerate(head):
            if metric.startswith(STALL[0]) and metric.endswith(STALL[1]) and "not_issued" not in metric:
                v = number(r[i])
                if v:
                    stalls.append((v, metric[len(STALL[0]):-len(STALL[1])]))
        stalls.sort(reverse=True)
        top = ", ".join(f"{n} {v:.2f}" for v, n in stalls[:6])
        print(f"NCU {name}: {'; '.join(parts)}")
        if top:
            print(f"NCU {name} stalls (warps per issue): {top}")


if __name__ == "__main__":
    main()
