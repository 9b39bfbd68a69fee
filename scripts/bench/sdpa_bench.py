#!/usr/bin/env python3
"""torch's scaled_dot_product_attention on the shapes of `cuda_bench PRESET attn`, for the
attention figures beside kiln's in the same call (scripts/attn-gpu.sh).

- Prefill: causal attention over a whole prompt of 2k, 8k and 32k tokens, 32 query heads over
  8 KV heads (GQA), head dims 64, 128, 256 and 512, bf16, with each SDPA backend that takes the
  shape: TFLOP/s counted as kiln counts them (4 * hd * heads per key a row sees).
- Decode: one query row per sequence over a KV cache of `depth` keys (contiguous, not paged),
  batch 1 and 8 at depth 8k, 32k and 128k, head dim 128: KV bytes read per second.

Human lines on stderr (`SDPA ...`), one JSON object on stdout.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

N_Q, N_KV = 32, 8
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def sdpa(q, k, v, causal):
    """GQA natively where torch has it, else K/V repeated to every query head."""
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    except TypeError:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    for hd in (64, 128, 256, 512):
        for length in (2048, 8192, 32768):
            q, k, v = rand(1, N_Q, length, hd), rand(1, N_KV, length, hd), rand(1, N_KV, length, hd)
            flops = 4.0 * hd * N_Q * length * (length + 1) / 2
            for name, backend in BACKENDS.items():
                try:
                    with sdpa_kernel([backend]):
                        secs = timed(lambda: sdpa(q, k, v, True), 3 if length > 8192 else 10)
                except Exception as e:  # a backend that does not take the shape
                    log(f"SDPA {name} hd {hd} causal {length}: unsupported ({str(e).splitlines()[0][:80]})")
                    continue
                tf = flops / secs / 1e12
                log(f"SDPA {name} hd {hd} causal {length}: {tf:.1f} TFLOP/s ({secs * 1e3:.2f} ms)")
                out[f"sdpa_{name}_hd{hd}_{length}_tflops"] = round(tf, 1)
            del q, k, v
    hd = 128
    for depth in (8192, 32768, 131072):
        for batch in (1, 8):
            q = rand(batch, N_Q, 1, hd)
            k, v = rand(batch, N_KV, depth + 1, hd), rand(batch, N_KV, depth + 1, hd)
            nbytes = 2.0 * k.numel() * k.element_size()
            for name, backend in BACKENDS.items():
                try:
                    with sdpa_kernel([backend]):
                        secs = timed(lambda: sdpa(q, k, v, False), 20)
                except Exception:
                    continue
                tbs = nbytes / secs / 1e12
                log(f"SDPA decode {name} batch {batch} depth {depth}: {secs * 1e6:.1f} us, {tbs:.2f} TB/s")
                out[f"sdpa_decode_{name}_b{batch}_d{depth}_tbs"] = round(tbs, 3)
            del q, k, v
    print(json.dumps(out))


if __name__ == "__main__":
    main()
