#!/usr/bin/env python3
"""kiln serve under the recorded serving workload, with the engine's step overlap on and off, a
--max-batched-tokens sweep, an exactness check and `kiln bench` for the ratios. Run through
scripts/serve-gpu.sh (which documents the environment); standard library only, plus aiohttp for
scripts/serve_load.py.

For each server configuration: start `kiln serve`, check its output (overlap on and off must give
the same tokens, concurrent requests the tokens they give alone), run serve_load.py at each level,
scrape /metrics around each level for the engine's per-step split (host phases against the
device's busy and idle time), stop it. Logs and JSON under OUT; the summary is printed last."""

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT", os.path.join(ROOT, "serve-gpu-out"))
BIN = os.environ.get("KILN_BIN", os.path.join(ROOT, ".carry/bin/kiln"))
MODEL = sys.argv[1] if len(sys.argv) > 1 else "/tmp/kiln-bench/llama3-8b-f16.gguf"
PORT = int(os.environ.get("PORT", "8012"))
DEVICE = os.environ.get("DEVICE", "cuda")
MAX_SEQS = os.environ.get("MAX_SEQS", "256")
# clients:requests per level (the recorded workload: 400-word prompts, 128 tokens).
LEVELS = [tuple(map(int, l.split(":"))) for l in os.environ.get("LEVELS", "1:4 32:64 128:256 256:512").split()]
SWEEP = [int(b) for b in os.environ.get("BUDGETS", "1024 4096 8192").split()]
SWEEP_CLIENTS = int(os.environ.get("SWEEP_CLIENTS", "128"))
# --max-num-seqs values also run at SWEEP_CLIENTS with the default budget ("" for none).
SEQS_SWEEP = [int(n) for n in os.environ.get("SEQS", "").split()]
# The overlap-off server's levels ("0": only overlap on).
OVERLAP_OFF = os.environ.get("OVERLAP_OFF", "1") != "0"
WORDS = int(os.environ.get("PROMPT_WORDS", "400"))
MAX_TOKENS = int(os.environ.get("MAX_TOKENS", "128"))
BENCH = os.environ.get("BENCH", "1") != "0"
# Seconds the whole run may take: sweep servers that would start past it less 40 s are skipped.
BUDGET_S = float(os.environ.get("BUDGET_S", "330"))
# Arguments every server of the run gets (e.g. "--decode-gemm prefill-order").
SERVE_ARGS = os.environ.get("SERVE_ARGS", "").split()
# The bench's figures are the ratios' base, so it runs the model as the servers do
# (--quantize, --decode-gemm); BENCH_ARGS replaces them where SERVE_ARGS holds a serve-only flag.
BENCH_ARGS = os.environ.get("BENCH_ARGS", os.environ.get("SERVE_ARGS", "")).split()
URL = f"http://127.0.0.1:{PORT}"
PHASES = ["admit", "schedule", "launch", "wait", "sample", "output", "device_busy", "device_idle"]
HOST = ["admit", "schedule", "launch", "sample", "output"]

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def get(path, timeout=10):
    with urllib.request.urlopen(URL + path, timeout=timeout) as r:
        return r.read().decode()


def post(path, body, timeout=300):
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{path}: HTTP {e.code}: {e.read()[:300]!r}") from None


def metrics():
    """The engine's step counters from /metrics: {name or phase: value}."""
    text = get("/metrics")
    out = {}
    for line in text.splitlines():
        m = re.match(r'kiln_engine_step_phase_seconds_(sum|count)\{phase="(\w+)"\} (\S+)', line)
        if m:
            out[f"{m.group(2)}_{m.group(1)}"] = float(m.group(3))
            continue
        m = re.match(r"(kiln_engine_\w+|kiln_generation_tokens_total) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def split(before, after):
    """Per-step milliseconds of each phase between two scrapes, and the steps' mean size."""
    d = lambda k: after.get(k, 0.0) - before.get(k, 0.0)
    steps = d("kiln_engine_steps_launched_total")
    if steps <= 0:
        return {}
    s = {p: round(1e3 * d(f"{p}_sum") / steps, 3) for p in PHASES}
    s["host"] = round(sum(s[p] for p in HOST), 3)
    s["steps"] = int(steps)
    s["rows_per_step"] = round(d("kiln_engine_step_rows_total") / steps, 1)
    s["tokens_per_step"] = round(d("kiln_engine_step_tokens_total") / steps, 1)
    busy, idle = s["device_busy"], s["device_idle"]
    s["device_busy_pct"] = round(100 * busy / (busy + idle), 1) if busy + idle > 0 else None
    return s


class Server:
    def __init__(self, name, env=None, args=(), seqs=None):
        self.name = name
        self.log_path = os.path.join(OUT, f"serve-{name}.log")
        cmd = [BIN, "serve", "--model", MODEL, "--device", DEVICE, "--port", str(PORT),
               "--served-model-name", "kiln", "--max-num-seqs", str(seqs or MAX_SEQS),
               *SERVE_ARGS, *args]
        e = dict(os.environ, **(env or {}))
        e.setdefault("KILN_STEP_LOG_SECS", "5")
        log(f"{name}: {' '.join(cmd)} {env or ''}")
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT, env=e)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name}: the server exited:\n" + open(self.log_path).read()[-3000:])
            try:
                get("/health", timeout=2)
                log(f"{name}: up")
                return
            except Exception:
                time.sleep(0.5)
        raise RuntimeError(f"{name}: no answer after 300 s")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# The first prompt number of the next load: every load of the run gets prompts of its own, so
# none finds another's in the server's prefix cache (serve_load.py's prompts are a function of
# their number).
NEXT_PROMPT = [0]


def load(label, clients, requests):
    before = metrics()
    cmd = [sys.executable, os.path.join(ROOT, "scripts/serve_load.py"), URL, "kiln", str(clients),
           str(requests), str(WORDS), str(MAX_TOKENS), label]
    env = dict(os.environ, SERVE_LOAD_FIRST=str(NEXT_PROMPT[0]))
    NEXT_PROMPT[0] += requests
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"serve_load.py failed: {r.stderr[-2000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["split"] = split(before, metrics())
    log(f"{label}: {res['out_tok_s']} tok/s, TTFT p50 {res['ttft_p50_ms']} / p99 {res['ttft_p99_ms']} ms, "
        f"ITL p50 {res['itl_p50_ms']} ms, errors {res['errors']}; split {res['split']}")
    return res


WORDS_CHECK = ("time file system process memory kernel thread network packet socket buffer queue signal "
               "device driver module page table cache disk block inode mount user group shell").split()


def check_requests():
    """Requests of the kinds the engine treats differently: greedy, greedy with log-probabilities,
    seeded sampling (with log-probabilities), a penalty (sampled on the host), stop strings."""
    reqs = []
    for i in range(16):
        prompt = " ".join(WORDS_CHECK[(i * 7 + j * 3) % len(WORDS_CHECK)] for j in range(20 + 13 * i))
        body = {"model": "kiln", "prompt": prompt, "max_tokens": 40, "temperature": 0}
        if i % 4 == 1:
            body["logprobs"] = 2
        if i % 4 == 2:
            body.update(temperature=0.8, top_p=0.95, seed=100 + i, logprobs=1)
        if i == 3:
            body["repetition_penalty"] = 1.2
        if i == 7:
            body["stop"] = [" the", "\n"]
        reqs.append(body)
    return reqs


def answer(body):
    r = post("/v1/completions", body)
    c = r["choices"][0]
    lp = c.get("logprobs") or {}
    return {"text": c["text"], "finish": c["finish_reason"], "tokens": r["usage"]["completion_tokens"],
            "logprobs": lp.get("token_logprobs"), "top": lp.get("top_logprobs")}


def exactness(name):
    reqs = check_requests()
    with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
        together = list(pool.map(answer, reqs))
    alone = [answer(r) for r in reqs]
    with open(os.path.join(OUT, f"check-{name}.json"), "w") as f:
        json.dump({"together": together, "alone": alone}, f, indent=1)
    return together, alone


def same(a, b, tol=2e-5):
    """Equal text, finish and token count; log-probabilities within f32 rounding (a row sampled on
    the host beside a penalised request has its log-probability from the host's sum)."""
    for x, y in zip(a, b):
        if (x["text"], x["finish"], x["tokens"]) != (y["text"], y["finish"], y["tokens"]):
            return False
        if (x["logprobs"] is None) != (y["logprobs"] is None):
            return False
        for p, q in zip(x["logprobs"] or [], y["logprobs"] or []):
            if abs(p - q) > tol:
                return False
    return len(a) == len(b)


def run_bench(name, args):
    """`kiln bench` on MODEL with `args` (and BENCH_ARGS), its log and JSON under OUT as NAME.log
    and NAME.json; returns its rows ([] when it fails)."""
    path = os.path.join(OUT, f"{name}.json")
    cmd = [BIN, "bench", "--model", MODEL, "--device", DEVICE, *args, "--repeats", "2", "--json", path, *BENCH_ARGS]
    log(f"{name}: " + " ".join(cmd))
    with open(os.path.join(OUT, f"{name}.log"), "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=300)
    if r.returncode != 0:
        log(f"{name} failed (see {name}.log)")
        return []
    return json.load(open(path)).get("rows", [])


def bench():
    """Decode at batch 1 and 128 from depth 0: tok/s by batch, the ratios' base."""
    rows = run_bench("bench", ["--prefill", "none", "--decode", str(MAX_TOKENS), "--depth", "0",
                               "--concurrency", "1,128"])
    return {r["concurrency"]: r["tok_s"] for r in rows if r.get("test") == "decode"}


def bench_workload():
    """The served one-client workload's own work in `kiln bench`: a 512-token prompt (about the
    400 words' tokens), then MAX_TOKENS tokens decoded from depth 512. Returns the tok/s a
    client would see if the server added nothing: MAX_TOKENS over the prompt's TTFT plus
    MAX_TOKENS - 1 steps (0 when the bench fails)."""
    rows = run_bench("bench-workload", ["--prefill", "512", "--decode", str(MAX_TOKENS), "--depth", "512",
                                        "--concurrency", "1"])
    ttft = next((r["ttft_ms"] for r in rows if r.get("test") == "prefill"), None)
    step = next((r["step_ms"] for r in rows if r.get("test") == "decode"), None)
    if not ttft or not step:
        return 0.0
    return MAX_TOKENS / ((ttft + (MAX_TOKENS - 1) * step) / 1e3)


def main():
    os.makedirs(OUT, exist_ok=True)
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no kiln binary at {BIN}: set KILN_BIN or run scripts/build-gpu-carry.sh")
    results, checks = [], {}
    bench_rates = bench() if BENCH else {}
    workload_rate = bench_workload() if BENCH else 0.0
    configs = [("overlap-on", {}, [])] + ([("overlap-off", {"KILN_OVERLAP": "0"}, [])] if OVERLAP_OFF else [])
    for name, env, args in configs:
        srv = Server(name, env, args)
        try:
            checks[name] = exactness(name)
            for clients, requests in LEVELS:
                r = load(f"{name} c={clients}", clients, requests)
                r.update(config=name, max_batched_tokens=None)
                results.append(r)
        finally:
            srv.stop()
    sweeps = [(f"budget-{b}", ["--max-batched-tokens", str(b)], None, b) for b in SWEEP]
    sweeps += [(f"seqs-{n}", [], n, None) for n in SEQS_SWEEP]
    for name, args, seqs, budget in sweeps:
        if time.time() - T0 > BUDGET_S - 40:
            log(f"{name}: skipped, out of time")
            continue
        srv = Server(name, {}, args, seqs)
        try:
            r = load(f"{name} c={SWEEP_CLIENTS}", SWEEP_CLIENTS, 2 * SWEEP_CLIENTS)
            r.update(config=name, max_batched_tokens=budget, max_num_seqs=seqs or int(MAX_SEQS))
            results.append(r)
        finally:
            srv.stop()

    lines = []
    on, off = checks.get("overlap-on"), checks.get("overlap-off")
    ok = True
    for name, (together, alone) in checks.items():
        good = same(together, alone)
        ok &= good
        lines.append(f"exactness {name}: concurrent == alone: {'PASS' if good else 'FAIL'}")
    if on and off:
        good = same(on[1], off[1])
        ok &= good
        lines.append(f"exactness: overlap on == off: {'PASS' if good else 'FAIL'}")
    lines.append("")
    lines.append(f"{'config':<14} {'clients':>7} {'tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'err':>4} | "
                 f"{'steps':>6} {'rows':>6} {'dev busy':>9} {'dev idle':>9} {'host':>7} {'wait':>7}  host phases (ms a step)")
    for r in results:
        s = r.get("split") or {}
        phases = ", ".join(f"{p} {s.get(p, 0):.3f}" for p in HOST)
        lines.append(f"{r['config']:<14} {r['conc']:>7} {r['out_tok_s']:>9.1f} {r['ttft_p50_ms'] or 0:>9.1f} "
                     f"{r['ttft_p99_ms'] or 0:>9.1f} {r['itl_p50_ms'] or 0:>8.2f} {r['itl_p99_ms'] or 0:>8.2f} {r['errors']:>4} | "
                     f"{s.get('steps', 0):>6} {s.get('rows_per_step', 0):>6} {s.get('device_busy', 0):>9.3f} "
                     f"{s.get('device_idle', 0):>9.3f} {s.get('host', 0):>7.3f} {s.get('wait', 0):>7.3f}  {phases}")
    if bench_rates:
        lines.append("")
        lines.append(f"kiln bench decode: batch 1 {bench_rates.get(1, 0):.1f} tok/s, batch 128 {bench_rates.get(128, 0):.1f} tok/s")
        for r in results:
            base = bench_rates.get(r["conc"]) if r["config"].startswith("overlap") else None
            if base:
                lines.append(f"  {r['config']} {r['conc']} clients: {r['out_tok_s'] / base:.3f} of kiln bench at that batch")
    if workload_rate:
        lines.append(f"kiln bench of the one-client workload (512-token prompt, {MAX_TOKENS} tokens from depth 512): "
                     f"{workload_rate:.1f} tok/s")
        for r in results:
            if r["config"].startswith("overlap") and r["conc"] == 1:
                lines.append(f"  {r['config']} 1 client: {r['out_tok_s'] / workload_rate:.3f} of the same work in kiln bench")
    commit = open(os.path.join(ROOT, ".carry/commit.txt")).read().strip() if os.path.exists(
        os.path.join(ROOT, ".carry/commit.txt")) else "unknown"
    rows = [{"engine": "kiln", "test": "serve", "concurrency": r["conc"], "requests": r["requests"],
             "tok_s": r["out_tok_s"], "ttft_p50_ms": r["ttft_p50_ms"], "ttft_p99_ms": r["ttft_p99_ms"],
             "itl_p50_ms": r["itl_p50_ms"], "itl_p99_ms": r["itl_p99_ms"], "errors": r["errors"],
             "config": r["config"], "max_batched_tokens": r["max_batched_tokens"], "step_split_ms": r.get("split")}
            for r in results]
    rows += [{"engine": "kiln", "test": "decode", "concurrency": c, "tok_s": t} for c, t in bench_rates.items()]
    with open(os.path.join(OUT, "serve-results.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit, "model": MODEL,
                   "notes": f"scripts/serve-gpu.sh: serve_load.py, {WORDS}-word prompts, {MAX_TOKENS} tokens, "
                            f"--max-num-seqs {MAX_SEQS}", "rows": rows,
                   # One client's tok/s from kiln bench's own 512-token prefill and steps at depth 512.
                   "workload_bench_tok_s": workload_rate or None}, f, indent=1)
    summary = "\n".join([f"serve-gpu summary ({time.time() - T0:.0f} s, model {MODEL}, commit {commit})"] + lines)
    with open(os.path.join(OUT, "summary.txt"), "w") as f:
        f.write(summary + "\n")
    print("\n" + summary, flush=True)
    sys.exit(0 if ok and all(r["errors"] == 0 for r in results) else 1)


if __name__ == "__main__":
    main()
