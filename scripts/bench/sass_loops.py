#!/usr/bin/env python3
"""The loops of kernel entries in a cubin, from nvdisasm's listing: for each backward branch, the
instructions between its target and it, with the most frequent opcodes. A kernel's inner loop is
usually the longest one; its count against the MMAs or FMAs it holds says how much of the issue
bandwidth goes to bookkeeping (register moves, address arithmetic, reloads).

Usage: sass_loops.py NVDISASM CUBIN ENTRY [ENTRY...]   (scripts/sass-loops.sh builds the cubin)
"""

import collections
import re
import subprocess
import sys


def listing(nvdisasm, cubin):
    return subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True).stdout


def instructions(text, entry):
    """The entry's instructions in order, and the index each of its labels stands at."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if re.match(r"\s*\.text\." + re.escape(entry) + r":", l)), None)
    if start is None:
        raise SystemExit(f"sass_loops: no entry {entry} in the cubin")
    ins, labels = [], {}
    for line in lines[start + 1:]:
        if re.match(r"\s*\.text\.", line) or line.strip().startswith(".section"):
            break
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(2))
    return ins, labels


def opcode(instruction):
    # Drop a predicate (@P0, @!UP1) and the opcode's modifiers.
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0].split(".")[0]


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    nvdisasm, cubin, entries = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = listing(nvdisasm, cubin)
    for entry in entries:
        ins, labels = instructions(text, entry)
        print(f"{entry}: {len(ins)} instructions")
        for i, t in enumerate(ins):
            m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", t)
            if not m or labels.get(m.group(1), len(ins)) > i:
                continue
            first = labels[m.group(1)]
            kinds = collections.Counter(opcode(b) for b in ins[first:i + 1])
            top = ", ".join(f"{k} {n}" for k, n in kinds.most_common(10))
            print(f"  loop of {i - first + 1} instructions ({top})")


if __name__ == "__main__":
    main()
