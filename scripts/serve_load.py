#!/usr/bin/env python3
"""A fixed serving workload for any OpenAI-compatible server, so figures compare across engines and runs:
C concurrent clients, each sending streamed /v1/completions requests with a unique random-word prompt (no
shared prefix) until TOTAL requests are done. Prints one JSON line: output tok/s, requests/s, TTFT and
inter-token latency percentiles. Usage: serve_load.py URL MODEL CONC TOTAL PROMPT_WORDS MAX_TOKENS [LABEL]
The workload of the recorded figures (docs/BENCH.md, issue 18): 400 words, 128 tokens; 1/32/128/256
clients with 4/64/256/512 requests. Needs aiohttp (scripts/serve-gpu.sh runs it on the GPU machine).
SERVE_LOAD_FIRST=N numbers the prompts from N instead of 0: loads run one after another on one server
must not repeat each other's prompts, or the later ones find them in its prefix cache."""
import asyncio, json, os, random, sys, time
import aiohttp

url, model, conc, total, words, max_tokens = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
label = sys.argv[7] if len(sys.argv) > 7 else url
VOCAB = ("time file system process memory kernel thread network packet socket buffer queue "
         "signal device driver module page table cache disk block inode mount user group shell "
         "command option value string number list map key index record field").split()

FIRST = int(os.environ.get("SERVE_LOAD_FIRST", "0"))

def prompt(i):
    r = random.Random((FIRST + i) * 7919 + 17)
    return " ".join(r.choice(VOCAB) for _ in range(words))

async def one(sess, i, out):
    body = {"model": model, "prompt": prompt(i), "max_tokens": max_tokens, "temperature": 0,
            "stream": True}
    t0 = time.perf_counter(); first = None; stamps = []; n = 0; err = None
    try:
        async with sess.post(url + "/v1/completions", json=body) as r:
            if r.status != 200:
                err = f"HTTP {r.status}: {(await r.text())[:200]}"
            else:
                async for raw in r.content:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    j = json.loads(data)
                    ch = j.get("choices") or []
                    if ch and ch[0].get("text"):
                        now = time.perf_counter(); n += 1; stamps.append(now)
                        if first is None:
                            first = now
    except Exception as e:  # a lost stream counts as an error
        err = f"{type(e).__name__}: {str(e)[:200]}"
    out.append({"ttft": (first - t0) if first else None, "n": n, "err": err,
                "itl": [(b - a) for a, b in zip(stamps, stamps[1:])], "dur": time.perf_counter() - t0})

async def main():
    out = []; nxt = iter(range(total))
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0, force_close=True)) as sess:
        async def worker():
            for i in nxt:
                await one(sess, i, out)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        wall = time.perf_counter() - t0
    ok = [o for o in out if not o["err"]]
    pct = lambda xs, q: (sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else None)
    ttft = [o["ttft"] for o in ok if o["ttft"] is not None]
    itl = [x for o in ok for x in o["itl"]]
    toks = sum(o["n"] for o in ok)
    res = {"label": label, "conc": conc, "requests": total, "ok": len(ok), "errors": len(out) - len(ok),
           "first_error": next((o["err"] for o in out if o["err"]), None), "wall_s": round(wall, 2),
           "out_tok_s": round(toks / wall, 1), "req_s": round(len(ok) / wall, 2),
           "mean_tokens": round(toks / max(1, len(ok)), 1),
           "ttft_p50_ms": round(1e3 * pct(ttft, .5), 1) if ttft else None,
           "ttft_p99_ms": round(1e3 * pct(ttft, .99), 1) if ttft else None,
           "itl_p50_ms": round(1e3 * pct(itl, .5), 2) if itl else None,
           "itl_p99_ms": round(1e3 * pct(itl, .99), 2) if itl else None}
    print(json.dumps(res), flush=True)

asyncio.run(main())
