#!/usr/bin/env python3
"""Where a kernel's warps stall, instruction by instruction, from an Nsight Compute report's
source page exported as CSV (`ncu -i REPORT --page source --csv --print-source sass`, with the
SourceCounters section collected): the stall reasons' shares of all warp samples, the opcodes'
shares of samples and of executed instructions, the loops (backward branches) with their share
of executed instructions and their instructions per pass, and the costliest instructions.

Usage: ncu_source.py SOURCE.csv [TOP]   (standard library only)
"""
import collections
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read(path):
    """(kernel name, rows): each row {addr, sass, samples, executed, stalls{reason: n}}."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    kernel = lines[0][1] if lines and len(lines[0]) > 1 and lines[0][0] == "Kernel Name" else "?"
    head = lines[1] if kernel != "?" else lines[0]
    body = lines[2:] if kernel != "?" else lines[1:]
    col = {h: i for i, h in enumerate(head)}
    reasons = [h for h in head if h.startswith("stall_") and "(Not Issued)" not in h]
    num = lambda r, h: int(float(r[col[h]])) if h in col and r[col[h]] not in ("", "-") else 0
    rows = []
    for r in body:
        if len(r) < len(head):
            continue
        rows.append({
            "addr": int(r[col["Address"]], 16),
            "sass": r[col["Source"]].strip(),
            "samples": num(r, SAMPLES),
            "executed": num(r, EXECUTED),
            "stalls": {s[len("stall_"):]: num(r, s) for s in reasons},
        })
    return kernel, rows


def opcode(sass):
    """The opcode without predicate or modifiers: `@!P0 BRA x` -> BRA, `HGMMA.64x128x16...` -> HGMMA."""
    s = re.sub(r"^@!?U?P\w+\s+", "", sass)
    return s.split(" ")[0].split(".")[0]


def loops(rows):
    """(first, last) row indices of each backward branch's body, innermost first. Branches
    from the out-of-line blocks after the last EXIT (the retries of barrier waits, which jump
    back into the code) and bodies holding an EXIT are not loops."""
    at = {r["addr"]: i for i, r in enumerate(rows)}
    exits = [i for i, r in enumerate(rows) if re.search(r"(^|\s)EXIT\b", r["sass"])]
    end = exits[-1] if exits else len(rows)
    found = []
    for i, r in enumerate(rows[:end]):
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", r["sass"])
        if m and m.group(1):
            target = int(m.group(1), 16)
            if target in at and at[target] < i and not any(at[target] < e < i for e in exits):
                found.append((at[target], i))
    return sorted(found, key=lambda l: l[1] - l[0])


def summary(kernel, rows, top=25):
    total = sum(r["samples"] for r in rows) or 1
    executed = sum(r["executed"] for r in rows) or 1
    out = [f"{kernel}: {total} warp samples, {executed} warp instructions executed"]
    stalls = collections.Counter()
    for r in rows:
        stalls.update(r["stalls"])
    out.append("stalls: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in stalls.most_common(8)))
    by_op, ex_op = collections.Counter(), collections.Counter()
    for r in rows:
        by_op[opcode(r["sass"])] += r["samples"]
        ex_op[opcode(r["sass"])] += r["executed"]
    out.append("opcodes (samples / executed): " + ", ".join(
        f"{k} {100 * v / total:.1f}/{100 * ex_op[k] / executed:.1f}%" for k, v in by_op.most_common(12)))
    for first, last in loops(rows):
        body = rows[first:last + 1]
        passes = max(body[0]["executed"], 1)
        ex = sum(r["executed"] for r in body)
        if ex < 0.02 * executed:
            continue
        out.append(f"loop {body[0]['addr']:#x}-{body[-1]['addr']:#x}: {last - first + 1} instructions, "
                   f"{ex / passes:.0f} executed a pass, {100 * ex / executed:.1f}% of all, "
                   f"{100 * sum(r['samples'] for r in body) / total:.1f}% of samples")
    out.append("costliest instructions:")
    for r in sorted(rows, key=lambda r: -r["samples"])[:top]:
        lead = max(r["stalls"].items(), key=lambda kv: kv[1], default=("-", 0))
        out.append(f"  {100 * r['samples'] / total:5.1f}%  {r['addr']:#x}  {r['sass'][:64]:64s}  {lead[0]}")
    return "\n".join(out)


def main(argv):
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    kernel, rows = read(argv[0])
    if not rows:
        print(f"ncu_source: no instructions in {argv[0]}", file=sys.stderr)
        return 1
    print(summary(kernel, rows, int(argv[1]) if len(argv) > 1 else 25))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
