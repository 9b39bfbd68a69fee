#!/usr/bin/env python3
"""Builds the parity fixtures under tests/fixtures: small random-initialised models of each
architecture kiln runs, saved both as a Hugging Face folder and as a GGUF of the same weights,
with reference logits from transformers for a fixed prompt and its greedy continuation.

Usage (CPU is enough; takes about a minute):
    python scripts/reference/make_fixtures.py [--out tests/fixtures] [--only NAME]
        [--llama-cpp DIR]

Needs torch, transformers==5.17.0, tokenizers and gguf (see scripts/reference/requirements.txt).
The Gemma 4 fixtures' GGUFs are made by llama.cpp's own converter: DIR (or $LLAMA_CPP) is a
llama.cpp source tree with convert_hf_to_gguf.py and gguf-py, such as vendor/llama.cpp of the
llama-cpp-python 0.3.36 sdist.

For each fixture NAME the script writes
    NAME/hf/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json}
    NAME/model.gguf       same weights in F32, llama.cpp's tensor names and Q/K row order,
                          tokenizer as gpt2 BPE metadata (not for HF_ONLY_FIXTURES); for
                          LLAMA_CPP_FIXTURES written by llama.cpp's convert_hf_to_gguf.py
    gemma4/multimodal/    the gemma4 text model inside a Gemma4ForConditionalGeneration
                          checkpoint (tiny vision and audio towers beside it)
    llama/model-q8_0.gguf the same with 2-D weights quantised to Q8_0
    NAME/logits.f32       little-endian f32 [steps, vocab]: row k holds the logits that choose
                          continuation token k (row 0 is the prompt's last position)
    NAME/reference.json   prompt ids, greedy continuation, each step's top-1 margin, and how far
                          transformers' own fp32 run is from the reference
The reference is computed in float64 (the model cast to double) and rounded to f32, so it is the
exact value of the network, not one float32 evaluation of it; `fp32_max_abs_err` records how far
transformers' float32 forward lands from it, the scale of honest float32 noise.

Random weights give flat logits, which would make greedy decoding a coin toss decided by rounding.
The initialisation below is scaled so logits spread over several units, and each model's seed is
the first that gives every greedy step a top-1 margin of at least MIN_MARGIN.
"""

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

from assistant_fixtures import ASSISTANT_FIXTURES, make_assistant_fixture
from fixture_common import BASE, VOCAB, first_seed, init_weights, save_fresh, write_reference

PROMPT_LEN = 40
STEPS = 32
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"

FIXTURES = {
    # GQA 4:2, untied, Llama 3.1 RoPE scaling with an original context short enough that the
    # low, smoothed and high frequency bands all occur among the 8 frequencies of a 16-wide head.
    "llama": dict(
        model_type="llama",
        tie_word_embeddings=False,
        rope_parameters=dict(
            rope_type="llama3",
            rope_theta=10000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=256,
        ),
    ),
    # GQA 4:1 and a 16-token window, shorter than the 40-token prompt.
    "mistral": dict(
        model_type="mistral",
        num_key_value_heads=1,
        sliding_window=16,
        tie_word_embeddings=False,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0),
    ),
    # QKV bias, tied embeddings, linear RoPE scaling.
    "qwen2": dict(
        model_type="qwen2",
        tie_word_embeddings=True,
        rope_parameters=dict(rope_type="linear", rope_theta=1000000.0, factor=2.0),
    ),
    # Q/K norm, head_dim (32) unlike hidden/heads (16), tied embeddings, YaRN scaling.
    "qwen3": dict(
        model_type="qwen3",
        head_dim=32,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        rope_parameters=dict(
            rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64
        ),
    ),
    # Per-layer windows: Qwen2's use_sliding_window with max_window_layers 1, so layer 0 attends
    # to everything and layer 1 through a 16-token window (shorter than the prompt).
    "qwen2_window": dict(
        model_type="qwen2",
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=1,
        tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0),
    ),
}

# Gemma 4 (transformers' gemma4_text): four layers, sliding (16-token window, shorter than the
# prompt, head dim 16, 2 KV heads) and full (head dim 32 via global_head_dim) in turn; the last
# two share the KV of layers 0 and 1. Its own tokenizer, in the style of Gemma's (which
# llama.cpp's converter needs).
GEMMA4_BASE = dict(
    model_type="gemma4_text",
    intermediate_size=64,
    head_dim=16,
    global_head_dim=32,
    layer_types=["sliding_attention", "full_attention"] * 2,
    num_hidden_layers=4,
    sliding_window=16,
    num_kv_shared_layers=2,
    vocab_size_per_layer_input=VOCAB,
    tie_word_embeddings=True,
    bos_token_id=2,
    eos_token_id=1,
    pad_token_id=0,
)
FIXTURES.update({
    # Per-layer inputs (8 per layer), soft-capped logits, proportional RoPE on full layers.
    "gemma4": dict(GEMMA4_BASE, hidden_size_per_layer_input=8, final_logit_softcapping=10.0),
    # The other options: full layers with V taken from K and one KV head, double-wide
    # feed-forwards on the KV-sharing layers; no per-layer inputs, no soft cap.
    "gemma4_kv": dict(
        GEMMA4_BASE,
        hidden_size_per_layer_input=0,
        attention_k_eq_v=True,
        num_global_key_value_heads=1,
        use_double_wide_mlp=True,
    ),
    # The released models' full-attention head: 512 wide (the GPU's wide attention kernels),
    # with per-layer inputs and the soft cap; two query heads and one KV head keep it small.
    "gemma4_wide": dict(
        GEMMA4_BASE,
        num_attention_heads=2,
        num_key_value_heads=1,
        global_head_dim=512,
        hidden_size_per_layer_input=8,
        final_logit_softcapping=10.0,
    ),
})

# Fixtures that also get a Q8_0 GGUF, to exercise dequantisation together with the Q/K un-permutation.
Q8_FIXTURES = {"llama"}
# Fixtures without a GGUF: llama.cpp's qwen2 metadata has no way to window some layers only;
# gemma4_wide's GGUF would prove nothing the other Gemma 4 ones do not, at twice the size.
HF_ONLY_FIXTURES = {"qwen2_window", "gemma4_wide"}
# Fixtures whose GGUF llama.cpp's own convert_hf_to_gguf.py writes from the HF folder.
LLAMA_CPP_FIXTURES = {"gemma4", "gemma4_kv"}
# Fixtures with the Gemma-style tokenizer.
GEMMA_FIXTURES = LLAMA_CPP_FIXTURES | {"gemma4_wide"}
# Fixtures that are also saved inside a multimodal checkpoint (NAME/multimodal).
MULTIMODAL_FIXTURES = {"gemma4"}
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]

# Training text for the tokenizer, and the source of the prompt.
CORPUS = """\
A kiln is an insulated chamber in which clay is fired until it becomes ceramic. The potter loads
the kiln with care, leaving room for the hot air to move between the pieces, and then raises the
temperature slowly through the first hours, because water left in the clay would turn to steam and
crack the walls of a pot. Later the heat climbs faster. At around six hundred degrees the clay
changes for good: it can no longer be softened with water. Glazes melt near the top of the firing,
running into a thin layer of glass that seals the surface and gives it colour.
Wood-fired kilns burn for days. The stokers feed the firebox every few minutes, day and night, and
the ash that rises with the flame settles on the shoulders of the pots, where it melts into green
and brown runs that no potter could paint by hand. Electric kilns are quieter: a controller follows
a written schedule, holds each temperature for as long as it is told, and switches off at the end.
Opening a kiln is the best and the worst moment of the work. Some pieces come out better than
anyone hoped, some are cracked or stuck to the shelf, and the potter writes everything down, the
schedule, the weather, the clay body and the glaze recipe, so that the next firing can be better.
Numbers matter as much as hands: 1,240 degrees for stoneware, 1,080 for earthenware, 8 hours up and
12 hours to cool. "Don't open it early," says every teacher, "or the cold air will crack the pots."
Café owners order mugs by the hundred; a good mug costs about €25 and lasts for years.
"""
PROMPT_TEXT = (
    "The potter loads the kiln with care, leaving room for the hot air to move between the "
    "pieces, and then raises the temperature slowly through the first hours of the firing."
)


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([line for line in CORPUS.splitlines()] * 4, trainer)
    assert tok.get_vocab_size() == VOCAB, f"tokenizer has {tok.get_vocab_size()} tokens, want {VOCAB}"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)]
    )
    return tok


def train_gemma_tokenizer() -> Tokenizer:
    """A tokenizer in the style of Gemma's tokenizer.json (what llama.cpp's Gemma 4 converter
    reads): BPE over text with spaces as `▁`, byte fallback through 256 `<0xXX>` tokens, ids
    0-3 `<pad>`, `<eos>`, `<bos>`, `<unk>`."""
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(GEMMA_SPECIALS) - len(bytes_), special_tokens=[], show_progress=False
    )
    tok.train_from_iterator([line for line in CORPUS.splitlines()] * 4, trainer)
    spec = json.loads(tok.to_str())
    learned = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for t in GEMMA_SPECIALS + bytes_ + [t for t, _ in learned]:
        vocab.setdefault(t, len(vocab))
    assert len(vocab) == VOCAB, f"gemma tokenizer has {len(vocab)} tokens, want {VOCAB}"
    spec["model"]["vocab"] = vocab
    spec["added_tokens"] = [
        dict(id=i, content=t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
        for i, t in enumerate(GEMMA_SPECIALS)
    ]
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ],
    }
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", 2)]
    )
    return tok


def greedy(model: torch.nn.Module, prompt: list[int]) -> tuple[list[int], np.ndarray]:
    """Greedy continuation by full forwards (no KV cache), returning the chosen ids and the
    logit rows that chose them."""
    ids = list(prompt)
    rows = []
    with torch.no_grad():
        for _ in range(STEPS):
            out = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
            rows.append(out.double().numpy())
            ids.append(int(out.argmax()))
    return ids[len(prompt):], np.stack(rows)


def build_model(spec: dict, seed: int) -> torch.nn.Module:
    cfg = dict(BASE)
    cfg.update(spec)
    config = AutoConfig.for_model(**cfg)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float64)
    init_weights(model, seed)
    model.tie_weights()
    return model.eval()


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half order to adjacent pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(rope: dict, head_dim: int) -> np.ndarray:
    """The per-frequency divisors llama.cpp's converter stores as rope_freqs.weight."""
    base = rope["rope_theta"]
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
GGUF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf: str) -> str:
    if hf in GGUF_NAMES:
        return GGUF_NAMES[hf]
    parts = hf.split(".")
    assert parts[:2] == ["model", "layers"], hf
    return f"blk.{parts[2]}." + GGUF_LAYER_NAMES[".".join(parts[3:])]


def write_gguf(path: Path, name: str, model: torch.nn.Module, tok: Tokenizer, q8: bool = False) -> None:
    """Writes the GGUF; with `q8`, 2-D weights are Q8_0 (norms and biases stay F32, as llama.cpp
    keeps them)."""
    c = model.config
    arch = "llama" if c.model_type in ("llama", "mistral") else c.model_type
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"kiln-fixture-{name}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(c.vocab_size)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    rope = c.rope_parameters
    w.add_rope_freq_base(rope["rope_theta"])
    if c.model_type == "mistral" and c.sliding_window:
        w.add_sliding_window(c.sliding_window)
    if rope["rope_type"] == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif rope["rope_type"] == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])

    # Tokenizer as llama.cpp's gpt2 BPE metadata.
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    specials = {BOS, EOS}
    merges = json.loads(tok.to_str())["model"]["merges"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(vocab[BOS])
    w.add_eos_token_id(vocab[EOS])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    if rope["rope_type"] == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_factors(rope, head_dim))
    permuted = arch == "llama"
    for hf, p in model.state_dict().items():
        if hf == "lm_head.weight" and c.tie_word_embeddings:
            continue
        t = p.detach().to(torch.float32).numpy()
        if permuted and hf.endswith("q_proj.weight"):
            t = permute(t, c.num_attention_heads)
        elif permuted and hf.endswith("k_proj.weight"):
            t = permute(t, c.num_key_value_heads)
        t = np.ascontiguousarray(t)
        if q8 and t.ndim == 2:
            qtype = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(gguf_name(hf), gguf.quants.quantize(t, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(hf), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert_with_llama_cpp(llama_cpp: Path, hf_dir: Path, out: Path, name: str) -> None:
    """llama.cpp's own converter, with its own gguf-py, in float32."""
    script = llama_cpp / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise SystemExit(f"{script} not found: give --llama-cpp (or $LLAMA_CPP) a llama.cpp source tree")
    env = dict(os.environ, PYTHONPATH=str(llama_cpp / "gguf-py"))
    subprocess.run(
        [sys.executable, str(script), str(hf_dir), "--outtype", "f32", "--outfile", str(out),
         "--model-name", f"kiln-fixture-{name}"],
        env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def save_multimodal(d: Path, model: torch.nn.Module, tok: Tokenizer, prompt: list[int], rows: np.ndarray) -> None:
    """The text model inside a Gemma4ForConditionalGeneration checkpoint with tiny random vision
    and audio towers; checks that transformers' float32 logits of it are the causal model's."""
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    text = model.config.to_dict()
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16, patch_size=4, position_embedding_size=64)
    audio = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                 subsampling_conv_channels=[8, 4], output_proj_dims=64)
    config = Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                          tie_word_embeddings=text["tie_word_embeddings"])
    torch.manual_seed(0)
    mm = Gemma4ForConditionalGeneration(config).to(torch.float32).eval()
    state = {f"model.language_model.{k[len('model.'):]}": v for k, v in model.state_dict().items()
             if k.startswith("model.")}
    missing, _ = mm.load_state_dict(state, strict=False)
    assert not [k for k in missing if k.startswith("model.language_model.")], missing
    with torch.no_grad():
        got = mm(input_ids=torch.tensor([prompt])).logits[0, -1].double().numpy()
    assert np.abs(got - rows[0]).max() < 1e-4 * np.abs(rows[0]).max(), "multimodal logits differ"
    mm.save_pretrained(d, safe_serialization=True)
    (d / "generation_config.json").unlink(missing_ok=True)
    save_tokenizer(d, tok, gemma=True)


def save_tokenizer(d: Path, tok: Tokenizer, gemma: bool) -> None:
    if gemma:
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                       pad_token="<pad>", unk_token="<unk>")
    else:
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS)
    fast.save_pretrained(d)


def make_fixture(out: Path, name: str, spec: dict, tok: Tokenizer, prompt: list[int],
                 llama_cpp: Path | None) -> dict:
    seed, cont, rows, m = first_seed(name, "greedy", lambda seed: greedy(build_model(spec, seed), prompt))

    # transformers' own float32 run: the tokens must agree and the error shows float32 noise.
    model32 = build_model(spec, seed).to(torch.float32)
    cont32, rows32 = greedy(model32, prompt)
    assert cont32 == cont, f"{name}: float32 greedy continuation differs from float64"
    fp32_err = float(np.abs(rows32 - rows).max())

    d = out / name
    save_fresh(model32, d, "hf")
    save_tokenizer(d / "hf", tok, name in GEMMA_FIXTURES)
    if name in LLAMA_CPP_FIXTURES:
        if llama_cpp is None:
            raise SystemExit(f"{name}: its GGUF needs llama.cpp's converter; give --llama-cpp DIR")
        convert_with_llama_cpp(llama_cpp, d / "hf", d / "model.gguf", name)
    elif name not in HF_ONLY_FIXTURES:
        write_gguf(d / "model.gguf", name, model32, tok)
    if name in MULTIMODAL_FIXTURES:
        save_multimodal(d / "multimodal", model32, tok, prompt, rows)
    if name in Q8_FIXTURES:
        write_gguf(d / "model-q8_0.gguf", name, model32, tok, q8=True)
    rows.astype("<f4").tofile(d / "logits.f32")
    return write_reference(d, {"name": name, "seed": seed}, {
        "prompt_text": PROMPT_TEXT,
        "prompt_ids": prompt,
        "continuation_ids": cont,
        "logits_file": "logits.f32",
        "logits_shape": [STEPS, VOCAB],
    }, rows, m, fp32_err)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "tests" / "fixtures")
    ap.add_argument("--only", action="append", help="build only this fixture (repeatable); the others stay")
    ap.add_argument("--llama-cpp", type=Path, default=os.environ.get("LLAMA_CPP"),
                    help="llama.cpp source tree whose convert_hf_to_gguf.py writes the Gemma 4 GGUFs")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    toks = {}
    for gemma, tok in [(False, train_tokenizer()), (True, train_gemma_tokenizer())]:
        prompt = tok.encode(PROMPT_TEXT).ids
        assert len(prompt) >= PROMPT_LEN, f"prompt has only {len(prompt)} tokens"
        toks[gemma] = (tok, prompt[:PROMPT_LEN])
    args.out.mkdir(parents=True, exist_ok=True)
    index = args.out / "index.json"
    summary = json.loads(index.read_text()) if args.only and index.exists() else {}
    for name, spec in FIXTURES.items():
        if args.only and name not in args.only:
            continue
        tok, prompt = toks[name in GEMMA_FIXTURES]
        ref = make_fixture(args.out, name, spec, tok, prompt, args.llama_cpp)
        summary[name] = {k: ref[k] for k in ("seed", "min_margin", "max_abs_logit", "fp32_max_abs_err")}
        print(f"{name}: seed {ref['seed']}, min margin {ref['min_margin']:.4f}, "
              f"max |logit| {ref['max_abs_logit']:.2f}, fp32 error {ref['fp32_max_abs_err']:.2e}")
    for name, spec in ASSISTANT_FIXTURES.items():
        if args.only and name not in args.only:
            continue
        ref = make_assistant_fixture(args.out, name, spec)
        summary[name] = {k: ref[k] for k in ("seed", "min_margin", "max_abs_logit", "fp32_max_abs_err")}
        print(f"{name}: seed {ref['seed']}, min margin {ref['min_margin']:.4f}, "
              f"max |logit| {ref['max_abs_logit']:.2f}, fp32 error {ref['fp32_max_abs_err']:.2e}")
    (args.out / "index.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
