#!/usr/bin/env python3
"""Soak test for `kiln serve`: hostile and ordinary clients together for a bounded time.

Starts `kiln serve` on a free loopback port (or uses --url and --pid of a running one) and runs,
all at once until --duration is up:

  normal      streaming completions and chats at temperature 0, each checked token for token
              against the answer the same request got alone before the soak (lost: no 200, an
              error event, no [DONE]; corrupted: different text or finish reason)
  disconnect  streams closed after their first few chunks
  oversized   prompts just under the body limit (must be 400 context_length_exceeded)
  malformed   broken JSON, wrong types, unknown fields, impossible `n` (must be 4xx)
  half-open   connections that send half a header and stall (the server must close them)

The server's resident memory is sampled every few seconds; after the soak the clients stop,
the server idles for a while and its memory is read again. Everything goes into a JSON report.
Loopback only; every loop is bounded by the duration.

    python3 scripts/soak.py --kiln target/release/kiln --duration 600 --out soak.json

Standard library only.
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

PROMPTS = [
    "Once upon a time",
    "The lighthouse keeper opened the bottle and read",
    "List three colours:",
    "def fibonacci(n):",
]
CHAT = [[{"role": "user", "content": "Say something about the sea."}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def post(port, path, body, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def stream(port, path, body, timeout=120, stop_after=None):
    """Streams one request; returns (status, text, finish_reason, done)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return resp.status, resp.read().decode(errors="replace"), None, False
        text, finish, chunks = [], None, 0
        while True:
            line = resp.readline()
            if not line:
                return 200, "".join(text), finish, False
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line[6:] == b"[DONE]":
                return 200, "".join(text), finish, True
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return 200, "error: " + chunk["error"]["message"], None, False
            chunks += 1
            if stop_after is not None and chunks >= stop_after:
                return 200, "", None, False
            for c in chunk.get("choices", []):
                piece = c.get("text")
                if piece is None:
                    piece = (c.get("delta") or {}).get("content") or ""
                text.append(piece)
                finish = c.get("finish_reason") or finish
    finally:
        conn.close()


def normal_requests(max_tokens):
    reqs = [("/v1/completions", {"prompt": p, "max_tokens": max_tokens, "temperature": 0,
                                 "ignore_eos": True, "stream": True}) for p in PROMPTS]
    reqs += [("/v1/chat/completions", {"messages": m, "max_tokens": max_tokens, "temperature": 0,
                                       "ignore_eos": True, "stream": True}) for m in CHAT]
    return reqs


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.examples = {}

    def add(self, key, example=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if example is not None and key not in self.examples:
                self.examples[key] = str(example)[:300]


def run(args, port, pid):
    tally = Tally()
    reqs = normal_requests(args.max_tokens)
    reference = {}
    for path, body in reqs:
        status, text, finish, done = stream(port, path, body)
        assert status == 200 and done, f"reference request failed: {status} {text[:200]}"
        reference[json.dumps(body, sort_keys=True)] = (text, finish)
    deadline = time.time() + args.duration

    def normal(seed):
        rnd = random.Random(seed)
        while time.time() < deadline:
            path, body = rnd.choice(reqs)
            try:
                status, text, finish, done = stream(port, path, body)
            except Exception as e:  # noqa: BLE001 - counted as lost
                tally.add("normal_lost", e)
                continue
            if status != 200 or not done:
                tally.add("normal_lost", f"{status} {text[:200]}")
            elif (text, finish) != reference[json.dumps(body, sort_keys=True)]:
                tally.add("normal_corrupted", text[:200])
            else:
                tally.add("normal_ok")

    def disconnect(seed):
        rnd = random.Random(seed)
        while time.time() < deadline:
            path, body = rnd.choice(reqs)
            body = dict(body, max_tokens=400)
            try:
                stream(port, path, body, stop_after=rnd.randint(1, 5))
                tally.add("disconnect_done")
            except Exception as e:  # noqa: BLE001
                tally.add("disconnect_error", e)

    big_prompt = json.dumps({"prompt": "the quick brown fox jumps over the lazy dog " * 190_000,
                             "max_tokens": 4}).encode()
    big_chat = json.dumps({"messages": [{"role": "user", "content": "lorem ipsum dolor " * 460_000}]}).encode()

    def oversized(_seed):
        while time.time() < deadline:
            for path, body in (("/v1/completions", big_prompt), ("/v1/chat/completions", big_chat)):
                try:
                    status, raw = post(port, path, body)
                    ok = status == 400 and b"context_length_exceeded" in raw
                    tally.add("oversized_refused" if ok else "oversized_unexpected", f"{status} {raw[:200]!r}")
                except Exception as e:  # noqa: BLE001
                    tally.add("oversized_error", e)

    bad_bodies = [
        b'{"prompt": "x", ', b'', b'[]', b'{"prompt": 5}', b'{"prompt": "x", "temperature": "hot"}',
        b'{"prompt": "x", "n": 100000}', b'{"prompt": "x", "max_tokens": -1}',
        b'{"messages": [{"role": "wizard", "content": "x"}]}', b'{"messages": []}',
        b'{"prompt": "x", "skip_special_tokens": false}', b'{"messages": [{"role": "user", "content": "x"}], "functions": []}',
        b'{"prompt": ["a", "b", "c", "d", "e", "f", "g", "h", "i"], "n": 128}',
        b'{"prompt": [1, 2, 99999999]}', b'\xff\xfe\x00garbage',
    ]

    def malformed(seed):
        rnd = random.Random(seed)
        while time.time() < deadline:
            body = rnd.choice(bad_bodies)
            path = rnd.choice(["/v1/completions", "/v1/chat/completions"])
            try:
                status, raw = post(port, path, body)
                ok = 400 <= status < 500 and b'"error"' in raw
                tally.add("malformed_refused" if ok else "malformed_unexpected", f"{status} {body[:60]!r} {raw[:200]!r}")
            except Exception as e:  # noqa: BLE001
                tally.add("malformed_error", e)
            time.sleep(0.01)

    def half_open(_seed):
        socks = []
        while time.time() < deadline:
            while len(socks) < args.half_open:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
                socks.append(s)
                tally.add("half_open_opened")
            time.sleep(1)
            still = []
            for s in socks:
                s.setblocking(False)
                try:
                    closed = s.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    tally.add("half_open_closed_by_server")
                    s.close()
                else:
                    still.append(s)
            socks = still
        for s in socks:
            s.close()

    samples = []

    def sample_memory(_seed):
        while time.time() < deadline:
            samples.append((round(time.time() - start, 1), rss_kb(pid)))
            time.sleep(5)

    start = time.time()
    rss_start = rss_kb(pid)
    workers = [threading.Thread(target=normal, args=(i,)) for i in range(args.normal)]
    workers += [threading.Thread(target=disconnect, args=(100 + i,)) for i in range(args.disconnect)]
    workers += [threading.Thread(target=f, args=(200,)) for f in (oversized, malformed, half_open, sample_memory)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    time.sleep(args.idle)
    rss_end = rss_kb(pid)
    with urllib_open(port, "/metrics") as text:
        metrics = text
    return {
        "duration_s": args.duration,
        "clients": {"normal": args.normal, "disconnect": args.disconnect, "oversized": 1,
                    "malformed": 1, "half_open_connections": args.half_open},
        "max_tokens": args.max_tokens,
        "counts": tally.counts,
        "examples": tally.examples,
        "rss_kb": {"start": rss_start, "max": max(s[1] for s in samples), "end_after_idle": rss_end,
                   "samples": samples},
        "kv_blocks_used_after": metric(metrics, "kiln_kv_blocks_used"),
        "requests_running_after": metric(metrics, "kiln_requests_running"),
    }


class urllib_open:
    def __init__(self, port, path):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.path = path

    def __enter__(self):
        self.conn.request("GET", self.path)
        return self.conn.getresponse().read().decode()

    def __exit__(self, *exc):
        self.conn.close()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", help="the kiln binary to start (else --port and --pid of a running server)")
    ap.add_argument("--model", default=None, help="--model for kiln serve (default: the shipped model)")
    ap.add_argument("--port", type=int)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--idle", type=float, default=15, help="seconds of quiet before the last memory reading")
    ap.add_argument("--normal", type=int, default=8)
    ap.add_argument("--disconnect", type=int, default=2)
    ap.add_argument("--half-open", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", default="soak.json")
    args = ap.parse_args()

    server = None
    if args.kiln:
        port = free_port()
        cmd = [args.kiln, "serve", "--host", "127.0.0.1", "--port", str(port), "--header-timeout-secs", "5"]
        if args.model:
            cmd += ["--model", args.model]
        log = open(args.out + ".log", "w")
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        pid = server.pid
        for _ in range(300):
            try:
                with urllib_open(port, "/health"):
                    break
            except OSError:
                if server.poll() is not None:
                    sys.exit("kiln serve exited before it was healthy")
                time.sleep(0.2)
    else:
        if not (args.port and args.pid):
            sys.exit("give --kiln, or --port and --pid of a server on this machine")
        port, pid = args.port, args.pid
    try:
        report = run(args, port, pid)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=60)
    if server is not None:
        report["exit_code_after_sigterm"] = code
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    c = report["counts"]
    rss = report["rss_kb"]
    print(json.dumps(c, indent=1, sort_keys=True))
    print(f"rss MB: start {rss['start'] / 1024:.1f}, max {rss['max'] / 1024:.1f}, "
          f"end after idle {rss['end_after_idle'] / 1024:.1f}")
    bad = sum(c.get(k, 0) for k in ("normal_lost", "normal_corrupted", "oversized_unexpected",
                                     "malformed_unexpected", "oversized_error", "malformed_error"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
