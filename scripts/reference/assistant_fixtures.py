"""The Gemma 4 assistant fixtures (make_fixtures.py builds them after their targets): a random
`gemma4_assistant` drafting for a target fixture, with transformers' drafts and their logits at
fixed points of the target's greedy continuation."""

import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from fixture_common import BASE, VOCAB, first_seed, init_weights, save_fresh, write_reference

# Gemma 4 assistants (transformers' gemma4_assistant), each drafting for a target fixture above:
# three layers of width 32 (two sliding with the target's 16-token window, one full), the
# target's KV heads, GeGLU of 48. "gemma4_assistant" has an ordered LM head (16 centroids, the
# tokens of the best 4 scored) and drafts for gemma4; "gemma4_assistant_plain" a full LM head and
# drafts for gemma4_kv (full layers' V taken from K, one KV head).
ASSISTANT_TEXT = dict(
    model_type="gemma4_text",
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    global_head_dim=32,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
    sliding_window=16,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=0,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    bos_token_id=2,
    eos_token_id=1,
    pad_token_id=0,
)
ASSISTANT_FIXTURES = {
    "gemma4_assistant": dict(target="gemma4", text=ASSISTANT_TEXT, ordered=True),
    "gemma4_assistant_plain": dict(
        target="gemma4_kv",
        text=dict(ASSISTANT_TEXT, attention_k_eq_v=True, num_global_key_value_heads=1),
        ordered=False,
    ),
}
# Draft points: the sequence holds tokens 0..n of prompt + continuation, the KV cache positions
# below n, and the assistant drafts DRAFT_STEPS tokens after token n, all at position n.
DRAFT_POINTS = [40, 45, 58, 71]
DRAFT_STEPS = 4


def build_assistant(spec: dict, seed: int) -> torch.nn.Module:
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    config = Gemma4AssistantConfig(
        text_config=dict(spec["text"]), backbone_hidden_size=BASE["hidden_size"],
        use_ordered_embeddings=spec["ordered"], num_centroids=16, centroid_intermediate_top_k=4,
    )
    config._attn_implementation = "eager"
    config.get_text_config()._attn_implementation = "eager"
    model = Gemma4AssistantForCausalLM(config).to(torch.float64)
    init_weights(model, seed)
    if spec["ordered"]:
        g = torch.Generator().manual_seed(10_000 + seed)
        model.masked_embedding.token_ordering.copy_(torch.randperm(VOCAB, generator=g))
    model.tie_weights()
    return model.eval()


def draft_rows(target: torch.nn.Module, assistant: torch.nn.Module, ids: list[int]) -> tuple[list, np.ndarray]:
    """The assistant's drafts at each point, as transformers' SinglePositionMultiTokenCandidate-
    Generator makes them: the target's KV of the positions before n and its final-normed hidden
    state at n - 1, then DRAFT_STEPS steps at position n, each fed the token and hidden state
    the one before gave. Returns the drafted ids per point and their logits rows."""
    dtype = next(assistant.parameters()).dtype
    drafts, rows = [], []
    with torch.no_grad():
        for n in DRAFT_POINTS:
            out = target.model(input_ids=torch.tensor([ids[:n]]), use_cache=False,
                               return_shared_kv_states=True)
            kv = dict(out.shared_kv_states)
            hidden = out.last_hidden_state[:, n - 1:n]
            token, point = ids[n], []
            for _ in range(DRAFT_STEPS):
                embed = target.model.embed_tokens(torch.tensor([[token]]))
                a = assistant(inputs_embeds=torch.cat([embed, hidden], dim=-1).to(dtype),
                              position_ids=torch.tensor([[n]]), shared_kv_states=kv, use_cache=False)
                logits = a.logits[0, -1]
                rows.append(logits.double().numpy())
                token, hidden = int(logits.argmax()), a.last_hidden_state
                point.append(token)
            drafts.append(point)
    return drafts, np.stack(rows)


def load_target(out: Path, name: str, dtype: torch.dtype) -> torch.nn.Module:
    d = out / name / "hf"
    if not (d / "config.json").is_file():
        raise SystemExit(f"the assistant's target {d} is missing: build it first (--only {name})")
    return AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager").eval()


def make_assistant_fixture(out: Path, name: str, spec: dict) -> dict:
    ref_target = json.loads((out / spec["target"] / "reference.json").read_text())
    ids = ref_target["prompt_ids"] + ref_target["continuation_ids"]
    target64 = load_target(out, spec["target"], torch.float64)
    seed, drafts, rows, m = first_seed(
        name, "draft", lambda seed: draft_rows(target64, build_assistant(spec, seed), ids))
    assistant32 = build_assistant(spec, seed).to(torch.float32)
    drafts32, rows32 = draft_rows(load_target(out, spec["target"], torch.float32), assistant32, ids)
    assert drafts32 == drafts, f"{name}: float32 drafts differ from float64"
    fp32_err = float(np.abs(rows32 - rows).max())

    d = out / name
    save_fresh(assistant32, d, "assistant")
    rows.astype("<f4").tofile(d / "drafts.f32")
    return write_reference(d, {"name": name, "target": spec["target"], "seed": seed}, {
        "tokens": ids,
        "points": DRAFT_POINTS,
        "draft_ids": drafts,
        "logits_file": "drafts.f32",
        "logits_shape": [len(DRAFT_POINTS) * DRAFT_STEPS, VOCAB],
    }, rows, m, fp32_err)
