"""Checks ncu_source.py on testdata/ncu-source.csv (a made-up kernel of 11 instructions in
ncu's source-page CSV layout): stall shares, opcodes, the one loop, and the out-of-line retry
block that jumps back into the code but is not a loop.

Usage: python3 scripts/bench/test_ncu_source.py   (standard library only; exits non-zero on a failure)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ncu_source  # noqa: E402

kernel, rows = ncu_source.read(os.path.join(HERE, "testdata", "ncu-source.csv"))
assert kernel == "toy_kernel", kernel
assert len(rows) == 11 and rows[4]["samples"] == 6 and rows[4]["stalls"] == {"wait": 2, "barrier": 4}, rows[4]
assert ncu_source.opcode("@!P0 BRA 0x1080") == "BRA"
assert ncu_source.opcode("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24") == "HGMMA"
# 0x1020..0x1060 is the loop; the retry block after EXIT branches back to 0x1040 but is not one.
assert ncu_source.loops(rows) == [(2, 6)], ncu_source.loops(rows)
text = ncu_source.summary(kernel, rows, top=2)
assert "16 warp samples" in text, text
assert "stalls: wait 62.5%, barrier 37.5%" in text, text
assert "loop 0x1020-0x1060: 5 instructions, 5 executed a pass" in text, text
assert "37.5%  0x1040  HGMMA" in text, text
print("ncu_source: ok")
