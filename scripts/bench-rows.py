#!/usr/bin/env python3
"""Prints the rows of `kiln bench --json` files one line each (file, test, tokens, concurrency,
tok/s with its min-max), for reading results in a GPU call's output.
Usage: scripts/bench-rows.py FILE.json..."""
import json
import sys

for path in sys.argv[1:]:
    try:
        rows = json.load(open(path)).get("rows", [])
    except (OSError, ValueError) as e:
        print(f"{path}: {e}")
        continue
    name = path.rsplit("/", 1)[-1]
    for r in rows:
        lo, hi = r.get("tok_s_min"), r.get("tok_s_max")
        span = f" ({lo:.1f}-{hi:.1f})" if lo is not None and hi is not None else ""
        print(f"{name:28} {r.get('test', '?'):8} {r.get('tokens', ''):>6} x{r.get('concurrency', '')}"
              f" {r.get('tok_s', 0):10.1f}{span}")
