#!/usr/bin/env python3
"""Reads `cargo test --no-run --message-format=json` on stdin; prints "NAME EXECUTABLE" for each
test executable built (scripts/build-gpu-carry.sh, scripts/carry-refresh.sh)."""
import json
import sys

for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"].get("test"):
        print(m["target"]["name"], m["executable"])
