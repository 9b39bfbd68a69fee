"""A multi-turn chat workload for an OpenAI-compatible server, the case a prompt cache is for: C clients,
each holding one conversation of T turns that starts with a system prompt shared by every client. Each
turn sends the whole conversation so far (streamed /v1/chat/completions, greedy, every reply
MAX_TOKENS long) and appends the reply and a new user message. With MODE `unique` every request is
instead a new conversation with a system prompt of its own: nothing can be reused (the cost of a cache
that never hits). Tokens are counted by their log-probability entries, so that a token whose text is
held back (a partial UTF-8 sequence) still counts and still marks the first token. Prints one JSON
line: output tok/s over the run, TTFT percentiles (also per turn number), and the prompt and cached
tokens the server reported (usage.prompt_tokens_details).
Usage: chat_load.py URL MODEL CLIENTS TURNS SYSTEM_WORDS USER_WORDS MAX_TOKENS [LABEL [MODE]]"""
import asyncio, json, random, sys, time
import aiohttp

url, model = sys.argv[1], sys.argv[2]
clients, turns, system_words, user_words, max_tokens = map(int, sys.argv[3:8])
label = sys.argv[8] if len(sys.argv) > 8 else url
mode = sys.argv[9] if len(sys.argv) > 9 else "shared"
assert mode in ("shared", "unique"), mode
VOCAB = ("time file system process memory kernel thread network packet socket buffer queue "
         "signal device driver module page table cache disk block inode mount user group shell "
         "command option value string number list map key index record field").split()


def words(seed, n):
    r = random.Random(seed)
    return " ".join(r.choice(VOCAB) for _ in range(n))


def system(seed):
    # The seed's words first: unique conversations share no block past the template's start.
    return words(seed, system_words) + ". You answer questions about operating systems."


async def turn(sess, messages):
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "logprobs": True, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter(); first = None; text = []; n = 0; usage = None; err = None
    try:
        async with sess.post(url + "/v1/chat/completions", json=body) as r:
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
                    if j.get("usage"):
                        usage = j["usage"]
                    for ch in j.get("choices") or []:
                        piece = (ch.get("delta") or {}).get("content")
                        if piece:
                            text.append(piece)
                        tokens = len(((ch.get("logprobs") or {}).get("content")) or [])
                        if tokens:
                            n += tokens
                            if first is None:
                                first = time.perf_counter()
    except Exception as e:  # a lost stream counts as an error
        err = f"{type(e).__name__}: {str(e)[:200]}"
    return {"ttft": (first - t0) if first else None, "n": n, "err": err, "text": "".join(text),
            "prompt": (usage or {}).get("prompt_tokens", 0),
            "cached": ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)}


async def conversation(sess, c, out):
    messages = [{"role": "system", "content": system(1)}]
    for t in range(turns):
        if mode == "unique":
            messages = [{"role": "system", "content": system(10_000 + 100 * c + t)}]
        messages.append({"role": "user", "content": f"Client {c}, question {t}: " + words(1000 * c + t, user_words)})
        res = await turn(sess, messages)
        res["turn"] = t
        out.append(res)
        if res["err"]:
            return
        messages.append({"role": "assistant", "content": res["text"]})


async def main():
    out = []
    timeout = aiohttp.ClientTimeout(total=1800)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0, force_close=True)) as sess:
        t0 = time.perf_counter()
        await asyncio.gather(*(conversation(sess, c, out) for c in range(clients)))
        wall = time.perf_counter() - t0
    ok = [o for o in out if not o["err"]]
    pct = lambda xs, q: (sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else None)
    ttft = [o["ttft"] for o in ok if o["ttft"] is not None]
    by_turn = {}
    for o in ok:
        if o["ttft"] is not None:
            by_turn.setdefault(o["turn"], []).append(o["ttft"])
    toks = sum(o["n"] for o in ok)
    print(json.dumps({
        "label": label, "mode": mode, "clients": clients, "turns": turns, "requests": len(out),
        "errors": len(out) - len(ok), "first_error": next((o["err"] for o in out if o["err"]), None),
        "wall_s": round(wall, 3), "output_tokens": toks, "tok_s": round(toks / wall, 1),
        "ttft_p50_ms": round(1e3 * pct(ttft, 0.5), 1) if ttft else None,
        "ttft_p99_ms": round(1e3 * pct(ttft, 0.99), 1) if ttft else None,
        "ttft_p50_ms_by_turn": {t: round(1e3 * pct(v, 0.5), 1) for t, v in sorted(by_turn.items())},
        "prompt_tokens": sum(o["prompt"] for o in ok), "cached_tokens": sum(o["cached"] for o in ok),
    }))


asyncio.run(main())
