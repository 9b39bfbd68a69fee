"""Reference outputs of an exported model, computed by transformers' LlamaForCausalLM in float32.

The model is loaded from the exported HF folder (F16 values widened to F32), so the reference
describes exactly the shipped weights. kiln's tests compare their own forward pass against it.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

import tokenizer as tk
from model import Llama, LlamaShape

PROMPTS = (
    "The ls command lists",
    "In Python, a dictionary is",
    "To create a new branch in git,",
    tk.IM_START + "user\nWhat does the grep command do?" + tk.IM_END + "\n" + tk.IM_START + "assistant\n",
)
MAX_NEW_TOKENS = 48
STOP_IDS = (tk.SPECIAL_TOKENS.index(tk.IM_END), tk.SPECIAL_TOKENS.index(tk.ENDOFTEXT))


def _load_hf(folder: Path):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    return model.eval()


@torch.no_grad()
def greedy(model, ids: list[int]) -> tuple[list[int], list[float], torch.Tensor]:
    """Greedy continuation without a cache (one full forward per token, the plainest reference).
    Returns new ids, the top-1/top-2 logit gap at each step, and the prompt's last logits."""
    seq = list(ids)
    gaps = []
    first_logits = None
    for _ in range(MAX_NEW_TOKENS):
        logits = model(torch.tensor([seq])).logits[0, -1].float()
        if first_logits is None:
            first_logits = logits.clone()
        top = torch.topk(logits, 2)
        gaps.append(float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        seq.append(nxt)
        if nxt in STOP_IDS:
            break
    return seq[len(ids):], gaps, first_logits


def make_reference(folder: Path, shape: LlamaShape) -> dict:
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    hf_model = _load_hf(folder)
    own = Llama(shape)
    own.load_state_dict({k.removeprefix("model."): v.float() for k, v in load_file(str(folder / "model.safetensors")).items()})
    own.eval()
    entries = []
    worst = 0.0
    for prompt in PROMPTS:
        ids = tok.encode(prompt, add_special_tokens=False).ids
        new_ids, gaps, logits = greedy(hf_model, ids)
        with torch.no_grad():
            own_logits = own(torch.tensor([ids]))[0, -1]
        worst = max(worst, float((own_logits - logits).abs().max()))
        entries.append({
            "prompt": prompt,
            "prompt_ids": ids,
            "greedy_ids": new_ids,
            "greedy_text": tok.decode(new_ids, skip_special_tokens=False),
            "min_top2_gap": min(gaps),
            # Nine significant digits round-trip a float32 exactly and keep the file small.
            "last_prompt_logits": [float(f"{x:.9g}") for x in logits.tolist()],
        })
    # The training model and transformers must agree, or the exported weights mean something else.
    if worst > 1e-3:
        raise AssertionError(f"training model and LlamaForCausalLM differ by {worst} in logits")
    return {
        "computed_by": "transformers LlamaForCausalLM, float32, no KV cache, from the F16 safetensors",
        "max_new_tokens": MAX_NEW_TOKENS,
        "stop_ids": list(STOP_IDS),
        "own_vs_transformers_max_abs_diff": worst,
        "prompts": entries,
    }


def write_reference(folder: Path, shape: LlamaShape, out: Path) -> dict:
    ref = make_reference(folder, shape)
    out.write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    return ref
