#!/usr/bin/env python3
"""Train kiln's shipped target model and its draft, export both, and write their references.

    python3 scripts/train/train.py --data .train/data --out OUT [--target-seconds 220 ...]

Each model trains for a wall-clock budget (compilation included): after a short timing probe the
step count is fixed so that the cosine schedule ends when the budget does. Output, per model:
    OUT/<name>/hf/                HF folder (config.json, model.safetensors F16, tokenizer files)
    OUT/<name>/<name>-f16.gguf    the same F16 values in llama.cpp's layout
    OUT/<name>/reference.json     greedy continuations and logits by transformers in float32
    OUT/<name>/metrics.json       loss curve, throughput, final validation loss
    OUT/<name>/loss.png           training and validation loss against tokens seen
and OUT/README.md, the model card, built from the metrics and the corpus record.
"""

import argparse
import copy
import json
import lzma
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
import model_card  # noqa: E402
import plots  # noqa: E402
import reference  # noqa: E402
from model import DRAFT, TARGET, Llama, LlamaShape  # noqa: E402


def load_ids(path: Path, device: torch.device) -> torch.Tensor:
    raw = lzma.decompress(path.read_bytes())
    return torch.from_numpy(np.frombuffer(raw, dtype="<u2").astype(np.int32)).to(device)


def batch(data: torch.Tensor, b: int, t: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """b random windows of t+1 tokens: inputs and next-token targets."""
    starts = torch.randint(0, data.numel() - t - 1, (b,), generator=gen, device=data.device)
    win = data[starts[:, None] + torch.arange(t + 1, device=data.device)].long()
    return win[:, :-1], win[:, 1:]


def loss_fn(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(model: Llama, val: torch.Tensor, t: int, b: int, max_windows: int, amp) -> float:
    """Mean next-token loss over consecutive non-overlapping windows of the validation split."""
    model.eval()
    n = min((val.numel() - 1) // t, max_windows)
    total, count = 0.0, 0
    for i in range(0, n, b):
        starts = torch.arange(i, min(i + b, n), device=val.device) * t
        win = val[starts[:, None] + torch.arange(t + 1, device=val.device)].long()
        with amp():
            total += float(loss_fn(model, win[:, :-1], win[:, 1:])) * win.shape[0]
        count += win.shape[0]
    model.train()
    return total / max(count, 1)


def lr_at(step: int, total: int, warmup: int, peak: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_one(name: str, shape: LlamaShape, args, train: torch.Tensor, val: torch.Tensor, device) -> tuple[Llama, dict]:
    torch.manual_seed(args.seed)
    model = Llama(shape).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    peak = args.lr if name == "target" else args.draft_lr
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=peak, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda",
    )
    if device.type == "cuda":
        def amp():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        def amp():
            return torch.autocast("cpu", enabled=False)

    def eager_loss(x, y):
        with amp():
            return loss_fn(model, x, y)

    # Compiling the loss with the model fuses the float32 logits into the cross-entropy.
    step_loss = eager_loss
    if args.compile and device.type == "cuda":
        step_loss = torch.compile(eager_loss)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    budget = args.target_seconds if name == "target" else args.draft_seconds
    b, t = args.batch, args.seq_len
    warmup = args.warmup
    total = None  # fixed after the timing probe
    eval_every = 1
    curve, val_curve = [], []
    best = (float("inf"), None, 0)
    t0 = time.time()
    probe_start = None
    step = 0
    print(f"[{name}] {shape.params() / 1e6:.2f}M parameters, budget {budget:.0f}s, batch {b}x{t}", flush=True)
    while total is None or step < total:
        lr = lr_at(step, total or 10**9, warmup, peak)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(train, b, t, gen)
        try:
            loss = step_loss(x, y)
            loss.backward()
        except Exception as e:  # compilation can fail on an unusual stack; eager always works
            if step_loss is eager_loss:
                raise
            print(f"[{name}] torch.compile failed ({type(e).__name__}: {e}); continuing eagerly", flush=True)
            opt.zero_grad(set_to_none=True)
            step_loss = eager_loss
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step == 2:  # the first steps compile; time from here
            if device.type == "cuda":
                torch.cuda.synchronize()
            probe_start = time.time()
        if total is None and step == 2 + args.probe_steps:
            if device.type == "cuda":
                torch.cuda.synchronize()
            per_step = (time.time() - probe_start) / args.probe_steps
            # Evaluations take about 3% of the time; leave that and the final evaluation out.
            remaining = budget - (time.time() - t0)
            total = max(step + 1, step + int(0.95 * remaining / per_step))
            warmup = min(warmup, max(1, total // 20))
            print(f"[{name}] {b * t / per_step:,.0f} tokens/s, {total} steps", flush=True)
            eval_every = max(1, total // args.evals)
        if step % 10 == 0 or step == total:
            curve.append({"step": step, "tokens": step * b * t, "loss": loss.item(), "lr": lr})
        if total is not None and (step % eval_every == 0 or step == total):
            vl = evaluate(model, val, t, args.eval_batch, args.eval_windows // 4, amp)
            val_curve.append({"step": step, "tokens": step * b * t, "loss": vl})
            print(f"[{name}] step {step}/{total} train {loss.item():.3f} val {vl:.3f} lr {lr:.2e} "
                  f"{time.time() - t0:.0f}s", flush=True)
            if vl < best[0]:
                best = (vl, copy.deepcopy(model.state_dict()), step)
    elapsed = time.time() - t0
    model.load_state_dict(best[1])
    final_val = evaluate(model, val, t, args.eval_batch, args.eval_windows, amp)
    print(f"[{name}] done: {step} steps in {elapsed:.0f}s, best step {best[2]}, val loss {final_val:.4f}", flush=True)
    metrics = {
        "name": name, "shape": shape.to_dict(), "params": shape.params(), "steps": step,
        "best_step": best[2], "tokens_seen": step * b * t, "batch": [b, t], "peak_lr": peak,
        "seconds": round(elapsed, 1), "tokens_per_second": round(step * b * t / elapsed),
        "final_val_loss": round(final_val, 4), "val_tokens": int(min(val.numel() - 1, args.eval_windows * t)),
        "train_tokens": int(train.numel()), "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "precision": "bf16 autocast" if device.type == "cuda" else "float32",
        "compiled": step_loss is not eager_loss, "curve": curve, "val_curve": val_curve,
    }
    return model, metrics


def export_one(dirname: str, model: Llama, metrics: dict, args) -> dict:
    out = args.out / dirname
    hf = out / "hf"
    tensors = export.f16_tensors(model.hf_state_dict())
    export.write_hf(hf, model.shape, tensors, args.data / "tokenizer.json")
    gguf_path = out / f"{dirname}-f16.gguf"
    export.write_gguf(gguf_path, dirname, model.shape, tensors, args.data / "tokenizer.json")
    n = export.check_gguf_matches_hf(gguf_path, hf, model.shape)
    print(f"[{dirname}] GGUF and safetensors agree on all {n} tensors", flush=True)
    ref = reference.write_reference(hf, model.shape, out / "reference.json")
    for p in ref["prompts"]:
        print(f"[{dirname}] {p['prompt']!r} -> {p['greedy_text']!r}", flush=True)
    metrics["reference_own_vs_transformers"] = ref["own_vs_transformers_max_abs_diff"]
    metrics["samples"] = [{"prompt": p["prompt"], "greedy_text": p["greedy_text"]} for p in ref["prompts"]]
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    plots.loss_png(metrics, out / "loss.png")
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(".train/data"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--target-seconds", type=float, default=220)
    ap.add_argument("--draft-seconds", type=float, default=80)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--draft-lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--probe-steps", type=int, default=10)
    ap.add_argument("--evals", type=int, default=12, help="evaluations during training")
    ap.add_argument("--eval-windows", type=int, default=1024, help="validation windows at the end")
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    train = load_ids(args.data / "train.u16.xz", device)
    val = load_ids(args.data / "val.u16.xz", device)
    print(f"data: {train.numel() / 1e6:.2f}M train, {val.numel() / 1e6:.2f}M val tokens on {device}", flush=True)
    results = {}
    for name, dirname, shape in (("target", "kiln-4m", TARGET), ("draft", "kiln-4m-draft", DRAFT)):
        model, metrics = train_one(name, shape, args, train, val, device)
        model = model.float().cpu()
        results[dirname] = export_one(dirname, model, metrics, args)
    plots.both_png(results, args.out / "loss.png")
    meta = json.loads((args.data / "meta.json").read_text())
    sources = json.loads((args.data / "sources.json").read_text())
    (args.out / "README.md").write_text(model_card.render(results, meta, sources))
    print(f"all done in {time.time() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
