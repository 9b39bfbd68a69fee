"""Checks combine.py on the inputs in testdata/: rows from every tool, ratios, hardware floors, the table.

Usage: python3 scripts/bench/test_combine.py   (standard library only; exits non-zero on a failure)
"""
import contextlib
import io
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import combine  # noqa: E402

D = os.path.join(HERE, "testdata")


def run(*extra):
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        path = os.path.join(tmp, "results.json")
        combine.main([f"--kiln={D}/kiln.json", "--llama-bench", f"{D}/llama-bench.jsonl",
                      "--llama-batched", f"{D}/llama-batched.jsonl", f"--hf={D}/hf.json", f"--out={path}", *extra])
        doc = json.load(open(path))
    return doc, out.getvalue()


def close(a, b, rel=1e-9):
    return a is not None and abs(a - b) <= rel * abs(b)


def main():
    doc, table = run("--tflops=790", "--bandwidth=3.95e12", "--device=NVIDIA H200")
    rows = doc["rows"]
    by_engine = {e: [r for r in rows if r["engine"] == e] for e in combine.ENGINES}
    # 6 kiln rows; llama-bench: 3 prefill + 2 decode (the prompt on a filled cache is left out); 3 batched; 5 HF.
    assert [len(by_engine[e]) for e in combine.ENGINES] == [6, 8, 5], {e: len(v) for e, v in by_engine.items()}
    assert doc["device"] == "NVIDIA H200" and doc["commit"] == "sample" and doc["model"] == "random 8B"

    cmp = {(c["test"], c["tokens"], c["concurrency"]): c for c in doc["comparison"]}
    p2k = cmp[("prefill", 2048, 1)]
    assert close(p2k["kiln_vs_llama.cpp"], 40000 / 23910) and close(p2k["kiln_vs_transformers"], 40000 / 33105)
    d8k = cmp[("decode", 8192, 1)]
    assert close(d8k["kiln_vs_llama.cpp"], 220 / 189.4) and d8k["kiln_vs_transformers"] is None
    b32 = cmp[("decode", 512, 32)]
    assert close(b32["kiln_vs_llama.cpp"], 6400 / 3613) and close(b32["kiln_vs_transformers"], 6400 / 513)
    # A row only llama.cpp has still shows, without a ratio.
    assert cmp[("decode", 512, 8)]["kiln"] is None and cmp[("decode", 512, 8)]["kiln_vs_llama.cpp"] is None
    llama_min = [r for r in by_engine["llama.cpp"] if r["test"] == "prefill" and r["tokens"] == 2048][0]
    assert (llama_min["tok_s_min"], llama_min["tok_s_max"]) == (23850.0, 23970.0)
    assert combine.median([3.0, 1.0, 2.0]) == 2.0 and combine.median([4.0, 1.0]) == 2.5

    # Floors of the Llama-3-8B shape: 7.50e9 matmul weights (embedding left out), 16-bit.
    P = 8030261248 - 128256 * 4096
    f2k = 2048 / ((2 * P * 2048 + 2 * 2048**2 * 32 * 32 * 128) / 790e12)
    assert close(p2k["floor_tok_s"], f2k), (p2k["floor_tok_s"], f2k)
    assert 45_000 < f2k < 56_000
    assert close(p2k["kiln_of_floor"], 40000 / f2k)
    ctx = 0 + 64
    f_dec = 1 / ((2 * P + ctx * 2 * 32 * 8 * 128 * 2) / 3.95e12)
    assert close(cmp[("decode", 0, 1)]["floor_tok_s"], f_dec), (cmp[("decode", 0, 1)]["floor_tok_s"], f_dec)
    assert 240 < f_dec < 280
    # 32 streams at depth 512: more tokens per weight read, so a higher floor, still bandwidth bound.
    assert cmp[("decode", 512, 32)]["floor_tok_s"] > 20 * f_dec

    # 8-bit weights beside a 16-bit cache at twice the tensor rate: the weights' bytes halve.
    doc8, _ = run("--tflops=1580", "--bandwidth=3.95e12", "--weight-bytes=1", "--kv-bytes=2")
    cmp8 = {(c["test"], c["tokens"], c["concurrency"]): c for c in doc8["comparison"]}
    f_dec8 = 1 / ((P + ctx * 2 * 32 * 8 * 128 * 2) / 3.95e12)
    assert close(cmp8[("decode", 0, 1)]["floor_tok_s"], f_dec8), (cmp8[("decode", 0, 1)]["floor_tok_s"], f_dec8)
    assert close(cmp8[("prefill", 2048, 1)]["floor_tok_s"], 2 * f2k)
    assert doc8["floor"]["weight_bytes"] == 1 and doc8["floor"]["kv_bytes"] == 2

    lines = table.splitlines()
    assert lines[0].startswith("random 8B on NVIDIA H200")
    assert "| prefill | 2048 | 1 | 40,000.0 | 23,910.0 | 33,105.0 | 1.67x | 1.21x | 50,815 | 79% | 47% | 65% |" in table, table
    assert "kiln % floor" in lines[2]
    assert doc["versions"]["llama.cpp"].startswith("llama.cpp ?") and "float16 gguf" in doc["versions"]["transformers"]
    assert sum(1 for l in lines if l.startswith("| decode")) == 5

    # Without floor figures the floor columns go away; without transformers, its columns.
    doc, table = run()
    assert "floor" not in doc and "floor" not in table
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        combine.main([f"--kiln={D}/kiln.json", "--llama-bench", f"{D}/llama-bench.jsonl"])
    assert "transformers" not in out.getvalue() and "| prefill | 2048 | 1 | 40,000.0 | 23,910.0 | 1.67x |" in out.getvalue()
    print("test_combine: 1 passed, 0 failed")


if __name__ == "__main__":
    main()
