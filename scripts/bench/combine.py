"""Put kiln's figures beside llama.cpp's and transformers' from one side-by-side run.

Reads `kiln bench --json` output, llama-bench `-o jsonl` output, llama-batched-bench `--output-format jsonl`
output and hf_bench.py output; writes one results JSON (date, commit, device, model, rows of every engine,
and a comparison: kiln / llama.cpp, kiln / transformers and each figure's fraction of the hardware floor)
and prints the comparison as a Markdown table. Standard library only: it runs on the GPU machine and here.

Hardware floor of a row: the time its bytes take at --bandwidth and its FLOPs at --tflops, whichever is
longer, for a dense Llama-shaped model with 16-bit weights (--weight-bytes; --kv-bytes for the KV cache's
elements where they differ, as with 8-bit weights beside a 16-bit cache):
  prefill of L tokens: FLOPs 2*P*L + 2*L^2*layers*heads*head_dim (causal attention), bytes: the weights once;
  decode at depth D with C streams, per step: FLOPs C*(2*P + 4*ctx*layers*heads*head_dim),
  bytes: weights + C*ctx*(KV bytes per token), ctx = D + half the generated tokens;
P = matmul weights (all but the token embedding; a tied head counts once).
"""
import argparse
import json
import sys

ENGINES = ("kiln", "llama.cpp", "transformers")


def load_jsonl(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def spread(samples, avg):
    s = [x for x in (samples or []) if isinstance(x, (int, float))]
    return (min(s), max(s)) if s else (avg, avg)


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def llama_bench_rows(records):
    """llama-bench: a pp test is a prefill row (at depth 0), a tg test a batch-1 decode row at its depth.
    tok_s is the median of the runs, as kiln's (llama-bench's own figure, the mean, is kept as tok_s_mean)."""
    rows = []
    for r in records:
        samples = r.get("samples_ts") or [r["avg_ts"]]
        lo, hi = spread(samples, r["avg_ts"])
        base = {"engine": "llama.cpp", "concurrency": 1, "tok_s": median(samples), "tok_s_min": lo, "tok_s_max": hi,
                "tok_s_mean": r["avg_ts"]}
        depth = r.get("n_depth", 0)
        if r["n_prompt"] > 0 and r["n_gen"] == 0:
            if depth:  # a prompt on top of a filled cache: not a figure this table compares
                continue
            rows.append({**base, "test": "prefill", "tokens": r["n_prompt"]})
        elif r["n_gen"] > 0 and r["n_prompt"] == 0:
            rows.append({**base, "test": "decode", "tokens": depth, "generated": r["n_gen"]})
    return rows


def batched_bench_rows(records):
    """llama-batched-bench: total generated tok/s of `pl` streams after a prompt of `pp` tokens each."""
    return [{"engine": "llama.cpp", "test": "decode", "tokens": r["pp"], "concurrency": r["pl"],
             "tok_s": r["speed_tg"], "generated": r["tg"]} for r in records]


def key(row):
    return (row["test"], int(row["tokens"]), int(row.get("concurrency", 1)))


class Floor:
    def __init__(self, info, tflops, bandwidth, weight_bytes, kv_bytes=None):
        self.L, self.H, self.hd = info["num_layers"], info["num_heads"], info["head_dim"]
        self.weight_bytes = weight_bytes
        self.kv_bytes = weight_bytes if kv_bytes is None else kv_bytes
        self.kv_per_token = 2 * self.L * info["num_kv_heads"] * self.hd * self.kv_bytes
        embd = info["vocab_size"] * info["hidden_size"]
        self.P = info["params"] - (0 if info.get("tie_embeddings") else embd)
        self.W = self.P * weight_bytes
        self.F, self.B = tflops * 1e12, bandwidth

    def tok_s(self, row):
        t, n, c = key(row)
        if t == "prefill":
            flops = 2 * self.P * n + 2 * n * n * self.L * self.H * self.hd
            secs = max(flops / self.F, self.W / self.B)
            return n / secs
        ctx = n + row.get("generated", 128) / 2
        flops = c * (2 * self.P + 4 * ctx * self.L * self.H * self.hd)
        secs = max(flops / self.F, (self.W + c * ctx * self.kv_per_token) / self.B)
        return c / secs


def compare(rows, floor):
    by = {}
    for r in rows:
        by.setdefault(key(r), {})[r["engine"]] = r["tok_s"]
    out = []
    for k in sorted(by, key=lambda k: (k[0] != "prefill", k[1], k[2])):
        e = by[k]
        line = {"test": k[0], "tokens": k[1], "concurrency": k[2]}
        for name in ENGINES:
            line[name] = e.get(name)
        kiln = e.get("kiln")
        line["kiln_vs_llama.cpp"] = kiln / e["llama.cpp"] if kiln and e.get("llama.cpp") else None
        line["kiln_vs_transformers"] = kiln / e["transformers"] if kiln and e.get("transformers") else None
        if floor:
            gen = next((r.get("generated", 128) for r in rows if key(r) == k), 128)
            f = floor.tok_s({"test": k[0], "tokens": k[1], "concurrency": k[2], "generated": gen})
            line["floor_tok_s"] = f
            for name in ENGINES:
                line[f"{name}_of_floor"] = e[name] / f if e.get(name) else None
        out.append(line)
    return out


def markdown(doc, comparison, has_floor):
    def num(x, fmt="{:,.1f}"):
        return "" if x is None else fmt.format(x)

    def pct(x):
        return num(x and 100 * x, "{:.0f}%")

    # Columns only for the engines this run measured.
    present = [e for e in ENGINES if any(c[e] is not None for c in comparison)]
    others = [e for e in present if e != "kiln"]
    head = ["test", "tokens", "streams"] + [f"{e} tok/s" for e in present] + [f"kiln/{e}" for e in others]
    if has_floor:
        head += ["floor tok/s"] + [f"{e} % floor" for e in present]
    lines = [f"{doc['model']} on {doc['device']}, commit {doc['commit']}, {doc['date']}", "",
             "| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
    for c in comparison:
        cells = [c["test"], str(c["tokens"]), str(c["concurrency"])] + [num(c[e]) for e in present]
        cells += [num(c[f"kiln_vs_{e}"], "{:.2f}x") for e in others]
        if has_floor:
            cells += [num(c["floor_tok_s"], "{:,.0f}")] + [pct(c[f"{e}_of_floor"]) for e in present]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def llama_version(records):
    """What llama-bench says about its build and settings, from its first record."""
    if not records:
        return None
    r = records[0]
    return (f"llama.cpp {r.get('build_commit', '?')} ({r.get('backends', '?')}, {r.get('n_threads', '?')} threads, "
            f"ubatch {r.get('n_ubatch', '?')}, flash_attn {r.get('flash_attn', '?')}, {r.get('model_type', '')})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", help="kiln bench --json output")
    ap.add_argument("--llama-bench", nargs="*", default=[], help="llama-bench -o jsonl outputs")
    ap.add_argument("--llama-batched", nargs="*", default=[], help="llama-batched-bench jsonl outputs")
    ap.add_argument("--hf", help="hf_bench.py output")
    ap.add_argument("--model", help="model name when kiln's JSON is absent")
    ap.add_argument("--device", help="device name (default: kiln's)")
    ap.add_argument("--tflops", type=float, help="tensor rate for the floor, TFLOP/s (790 on the H200)")
    ap.add_argument("--bandwidth", type=float, help="memory bandwidth for the floor, bytes/s (3.95e12 on the H200)")
    ap.add_argument("--weight-bytes", type=float, default=2.0, help="bytes per weight (and KV element)")
    ap.add_argument("--kv-bytes", type=float, help="bytes per KV element (default: --weight-bytes)")
    ap.add_argument("--note", default="", help="a remark kept with the results (e.g. machine load)")
    ap.add_argument("--out", help="write the combined results JSON here")
    a = ap.parse_args(argv)

    kiln = json.load(open(a.kiln)) if a.kiln else {}
    rows = [dict(r, engine="kiln") for r in kiln.get("rows", [])]
    versions = {}
    for p in a.llama_bench:
        records = load_jsonl(p)
        rows += llama_bench_rows(records)
        versions.setdefault("llama.cpp", llama_version(records))
    for p in a.llama_batched:
        rows += batched_bench_rows(load_jsonl(p))
    hf = json.load(open(a.hf)) if a.hf else {}
    rows += [dict(r, engine="transformers") for r in hf.get("rows", [])]
    if hf.get("versions"):
        versions["transformers"] = f"{hf['versions']}, {hf.get('dtype', '?')} {hf.get('weights', '?')} weights"
    if not rows:
        sys.exit("no rows: give --kiln, --llama-bench, --llama-batched or --hf files")

    info = kiln.get("model_info")
    floor = None
    if a.tflops and a.bandwidth:
        if info:
            floor = Floor(info, a.tflops, a.bandwidth, a.weight_bytes, a.kv_bytes)
        else:
            print("note: no kiln model_info, so no hardware floor", file=sys.stderr)
    doc = {
        "date": kiln.get("date") or hf.get("date") or "",
        "commit": kiln.get("commit", "unknown"),
        "device": a.device or kiln.get("device", "unknown"),
        "model": a.model or kiln.get("model", "unknown"),
        "model_info": info,
        "note": a.note,
        "versions": {k: v for k, v in versions.items() if v},
        "rows": rows,
    }
    comparison = compare(rows, floor)
    doc["comparison"] = comparison
    if floor:
        doc["floor"] = {"tflops": a.tflops, "bandwidth_bytes_s": a.bandwidth, "weight_bytes": floor.weight_bytes,
                        "kv_bytes": floor.kv_bytes}
    text = markdown(doc, comparison, floor is not None)
    print(text, end="")
    if a.note:
        print(f"\n{a.note}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"results written to {a.out}", file=sys.stderr)
    return doc


if __name__ == "__main__":
    main()
