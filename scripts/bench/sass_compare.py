#!/usr/bin/env python3
"""Whether two builds of the kernels hold the same machine code, entry by entry: for each cubin
present in both folders, each entry is `identical` (the same instructions), `same opcodes` (the
same count of every opcode with its modifiers, registers and order aside: what an edit that only
moves source code into a helper usually gives), or `differs` (with the opcodes that changed).
Local-memory traffic (LDL/STL: spills) is reported wherever it changed.

Usage: sass_compare.py NVDISASM BEFORE_DIR AFTER_DIR   (scripts/sass-same.sh builds the folders)
Exits 1 when any entry differs.
"""

import collections
import os
import re
import sys

from sass_loops import listing


def entries(text):
    """Each entry's instructions, in order, without addresses or the `.reuse` register hints."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", line)
        if m and cur is not None:
            cur.append(m.group(1).replace(".reuse", ""))
    return out


def opcodes(ins):
    return collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split()[0] for i in ins)


def spills(ins):
    return sum(1 for i in ins if re.search(r"\b(LDL|STL)\b", i))


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    nvdisasm, before, after = sys.argv[1:]
    worst = 0
    names = sorted(set(os.listdir(before)) & set(os.listdir(after)))
    for cubin in (n for n in names if n.endswith(".cubin")):
        a = entries(listing(nvdisasm, os.path.join(before, cubin)))
        b = entries(listing(nvdisasm, os.path.join(after, cubin)))
        kinds = collections.Counter()
        for name in sorted(set(a) | set(b)):
            x, y = a.get(name), b.get(name)
            if x == y:
                kinds["identical"] += 1
                continue
            if x is None or y is None:
                print(f"  {cubin}: {name} only {'after' if x is None else 'before'}")
                worst = 1
                continue
            ox, oy = opcodes(x), opcodes(y)
            note = f" (spills {spills(x)} -> {spills(y)})" if spills(x) != spills(y) else ""
            if ox == oy and not note:
                kinds["same opcodes"] += 1
                continue
            moved = {k: oy[k] - ox[k] for k in ox | oy if ox[k] != oy[k]}
            top = ", ".join(f"{k} {v:+d}" for k, v in sorted(moved.items(), key=lambda kv: -abs(kv[1]))[:8])
            print(f"  {cubin}: {name} differs: {len(x)} -> {len(y)} instructions{note}; {top}")
            kinds["differs"] += 1
            worst = 1
        print(f"{cubin}: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    sys.exit(worst)


if __name__ == "__main__":
    main()
