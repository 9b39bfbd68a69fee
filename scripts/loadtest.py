#!/usr/bin/env python3
"""Load test for a running `kiln serve`: N concurrent streaming clients for a bounded time.

Loopback only (the script refuses any other host). For each concurrency level it runs clients
that send streaming completions back to back until the time is up (or a request cap is reached),
then reports requests/s, generated tokens/s, time to first token, inter-token latency and
end-to-end latency percentiles, and writes everything as JSON.

    python3 scripts/loadtest.py --url http://127.0.0.1:8000 --concurrency 1,8,32,128 \
        --duration 20 --max-tokens 64 --out loadtest.json

Standard library only, so it runs anywhere Python 3.9+ does.
"""

import argparse
import http.client
import ipaddress
import json
import socket
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request


def loopback_only(url):
    parsed = urllib.parse.urlparse(url)
    host = parsed.hostname or ""
    try:
        addrs = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as e:
        sys.exit(f"cannot resolve {host}: {e}")
    if not addrs or not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs):
        sys.exit(f"refusing to load-test {host}: only loopback addresses are allowed")
    return parsed.hostname, parsed.port or 80


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(host, port, body, timeout):
    """Sends one streaming completion. Returns (ttft, token_times, completion_tokens, end)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    start = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        token_times, tokens = [], None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            choice = chunk["choices"][0] if chunk.get("choices") else {}
            if choice.get("text") or choice.get("logprobs"):
                token_times.append(time.perf_counter())
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
        end = time.perf_counter()
    finally:
        conn.close()
    ttft = token_times[0] - start if token_times else None
    return start, ttft, token_times, tokens or 0, end


def run_level(host, port, concurrency, args):
    body = {
        "prompt": args.prompt,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.logprobs:
        # Every token then gets a chunk (tokens whose text is held back or empty get none
        # otherwise), so first-token and inter-token times are measured per token. It also
        # sends every step's logits to the host, which costs at high concurrency.
        body["logprobs"] = 0
    body = json.dumps(body)
    deadline = time.perf_counter() + args.duration
    lock = threading.Lock()
    results, errors = [], []
    budget = [args.max_requests]

    def client():
        while time.perf_counter() < deadline:
            with lock:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            try:
                r = one_request(host, port, body, args.timeout)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.duration + args.timeout)
    wall = time.perf_counter() - t0

    ttfts = [r[1] for r in results if r[1] is not None]
    latencies = [r[4] - r[0] for r in results]
    itls = [b - a for r in results for a, b in zip(r[2], r[2][1:])]
    tokens = sum(r[3] for r in results)

    def pcts(xs):
        return {f"p{p}": percentile(xs, p) for p in (50, 90, 99)} | {
            "mean": statistics.fmean(xs) if xs else None
        }

    return {
        "concurrency": concurrency,
        "wall_s": wall,
        "requests": len(results),
        "errors": len(errors),
        "first_errors": errors[:3],
        "requests_per_s": len(results) / wall,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / wall,
        "ttft_s": pcts(ttfts),
        "inter_token_latency_s": pcts(itls),
        "latency_s": pcts(latencies),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--concurrency", default="1,8,32,128", help="comma-separated client counts")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per concurrency level")
    ap.add_argument("--max-requests", type=int, default=10_000, help="cap per level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt", default="Write a short story about a lighthouse keeper who finds a message in a bottle.")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    ap.add_argument("--no-logprobs", dest="logprobs", action="store_false",
                    help="leave logprobs out of the requests (inter-token times are then per chunk)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--out", default="loadtest.json")
    args = ap.parse_args()

    host, port = loopback_only(args.url)
    with urllib.request.urlopen(f"{args.url}/v1/models", timeout=10) as r:
        model = json.load(r)["data"][0]
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    report = {
        "url": args.url,
        "model": model["id"],
        "max_model_len": model.get("max_model_len"),
        "max_tokens": args.max_tokens,
        "logprobs": args.logprobs,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "duration_s": args.duration,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "levels": [],
    }
    print(f"{'clients':>8} {'req/s':>8} {'tok/s':>9} {'ttft p50':>9} {'ttft p99':>9} "
          f"{'itl p50':>8} {'lat p50':>8} {'lat p99':>8} {'errors':>6}")
    for c in levels:
        lvl = run_level(host, port, c, args)
        report["levels"].append(lvl)

        def ms(x):
            return f"{x * 1000:.0f}ms" if x is not None else "-"

        print(f"{c:>8} {lvl['requests_per_s']:>8.2f} {lvl['tokens_per_s']:>9.1f} "
              f"{ms(lvl['ttft_s']['p50']):>9} {ms(lvl['ttft_s']['p99']):>9} "
              f"{ms(lvl['inter_token_latency_s']['p50']):>8} {ms(lvl['latency_s']['p50']):>8} "
              f"{ms(lvl['latency_s']['p99']):>8} {lvl['errors']:>6}", flush=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
