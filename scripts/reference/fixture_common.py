"""What the fixture scripts share (make_fixtures.py, assistant_fixtures.py): the vocabulary size,
the shape every fixture starts from, the random initialisation and the greedy margins."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import torch
import transformers

VOCAB = 512
MIN_MARGIN = 0.1

# Shared shape: two layers, hidden 64. Each fixture changes what its architecture is about.
BASE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    bos_token_id=0,
    eos_token_id=1,
)


def init_weights(model: torch.nn.Module, seed: int) -> None:
    """Draws every parameter afresh. Linear weights get std 1/sqrt(fan_in) so activations stay
    near unit scale; embeddings std 0.5 so logits spread over several units; norm weights and
    biases are random too, so that a backend that ignores them cannot pass."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64))
            elif "lm_head" in name:
                p.copy_(4.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=g, dtype=torch.float64))
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(p.shape[1]))
            # The files hold float32: the float64 reference must use exactly those values.
            p.copy_(p.to(torch.float32).to(p.dtype))
        # Gemma 4's layer_scalar is a saved buffer (1.0 in transformers' init): random too.
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_((0.6 + 0.8 * torch.rand(b.shape, generator=g, dtype=torch.float64)).to(torch.float32))


def margins(rows: np.ndarray) -> list[float]:
    top2 = np.sort(rows, axis=1)[:, -2:]
    return [float(m) for m in top2[:, 1] - top2[:, 0]]


def first_seed(name: str, what: str, run) -> tuple[int, list[int], np.ndarray, list[float]]:
    """The first seed below 1000 whose `run(seed)` (chosen ids, their logit rows) gives every row
    a top-1 margin of at least MIN_MARGIN, with its ids, rows and margins."""
    for seed in range(1000):
        ids, rows = run(seed)
        m = margins(rows)
        if min(m) >= MIN_MARGIN:
            return seed, ids, rows, m
    raise SystemExit(f"{name}: no seed below 1000 gives every {what} margin >= {MIN_MARGIN}")


def save_fresh(model: torch.nn.Module, d: Path, sub: str) -> None:
    """Replaces the folder d with a new one holding `model` in d/sub as safetensors, without the
    generation_config.json transformers writes beside it."""
    if d.exists():
        shutil.rmtree(d)
    (d / sub).mkdir(parents=True)
    model.save_pretrained(d / sub, safe_serialization=True)
    (d / sub / "generation_config.json").unlink(missing_ok=True)


def write_reference(d: Path, head: dict, body: dict, rows: np.ndarray, m: list[float], fp32_err: float) -> dict:
    """Writes d/reference.json: `head` (name, seed), the versions that made it, `body` (what the
    fixture holds), then the logits' margins and scale and the float32 run's distance from them."""
    ref = {
        **head,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        **body,
        "margins": [round(x, 6) for x in m],
        "min_margin": round(min(m), 6),
        "max_abs_logit": round(float(np.abs(rows).max()), 6),
        "fp32_max_abs_err": fp32_err,
    }
    (d / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref
