"""Write a trained model as a Hugging Face folder and as a GGUF file holding identical F16 values.

The GGUF follows llama.cpp's convert_hf_to_gguf.py for LlamaForCausalLM: llama.cpp tensor names,
Q and K rows permuted for GGML's RoPE, 1-D norm weights widened to F32 (exactly the F16 values),
and the tokenizer as gpt2 BPE metadata. `check_gguf_matches_hf` reads both files back and
compares every tensor bit for bit.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

import tokenizer as tk
from model import LlamaShape

HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name: str) -> str:
    if hf_name in HF_TO_GGUF:
        return HF_TO_GGUF[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)  # model.layers.N.rest
    return f"blk.{layer}.{HF_TO_GGUF[rest]}"


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows to interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def f16_tensors(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The exported values: every tensor rounded once to F16."""
    return {k: v.detach().to("cpu", torch.float32).numpy().astype(np.float16) for k, v in state.items()}


def write_hf(folder: Path, shape: LlamaShape, tensors: dict[str, np.ndarray], tokenizer_json: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    eot, im_end = tk.SPECIAL_TOKENS.index(tk.ENDOFTEXT), tk.SPECIAL_TOKENS.index(tk.IM_END)
    save_file(dict(sorted(tensors.items())), str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = shape.hf_config(bos_id=eot, eos_ids=[im_end, eot])
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # kiln-4m's recommended sampling (greedy with a repetition penalty) is written into this file
    # and the GGUF afterwards, by scripts/train/set_sampling.py.
    gen = {"bos_token_id": eot, "eos_token_id": [im_end, eot], "pad_token_id": eot, "do_sample": False}
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    shutil.copyfile(tokenizer_json, folder / "tokenizer.json")
    tok_config = tk.tokenizer_config(shape.max_position)
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")


def write_gguf(path: Path, name: str, shape: LlamaShape, tensors: dict[str, np.ndarray], tokenizer_json: Path) -> None:
    import gguf
    from tokenizers import Tokenizer

    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(name)
    w.add_license("see models/README.md")
    w.add_context_length(shape.max_position)
    w.add_embedding_length(shape.hidden_size)
    w.add_block_count(shape.num_layers)
    w.add_feed_forward_length(shape.intermediate_size)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_head_count(shape.num_heads)
    w.add_head_count_kv(shape.num_kv_heads)
    w.add_layer_norm_rms_eps(shape.rms_norm_eps)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_vocab_size(shape.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    tokens, types, merges = tk.gguf_vocab(Tokenizer.from_file(str(tokenizer_json)))
    if len(tokens) != shape.vocab_size:
        raise ValueError(f"tokenizer has {len(tokens)} tokens, model {shape.vocab_size}")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(tk.GGUF_PRE)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eot, im_end = tk.SPECIAL_TOKENS.index(tk.ENDOFTEXT), tk.SPECIAL_TOKENS.index(tk.IM_END)
    w.add_bos_token_id(eot)
    w.add_eos_token_id(im_end)
    w.add_eot_token_id(im_end)
    w.add_pad_token_id(eot)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(tk.CHAT_TEMPLATE)

    for hf_name in sorted(tensors, key=_tensor_order):
        t = tensors[hf_name]
        if hf_name.endswith("q_proj.weight"):
            t = permute_qk(t, shape.num_heads)
        elif hf_name.endswith("k_proj.weight"):
            t = permute_qk(t, shape.num_kv_heads)
        if t.ndim == 1:
            t = t.astype(np.float32)  # llama.cpp keeps norms in F32; the widening is exact
        w.add_tensor(gguf_name(hf_name), np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _tensor_order(hf_name: str) -> tuple:
    """Embedding first, then layers in order, then the final norm (llama.cpp's file order)."""
    if hf_name == "model.embed_tokens.weight":
        return (0, 0, "")
    if hf_name == "model.norm.weight":
        return (2, 0, "")
    return (1, int(hf_name.split(".")[2]), gguf_name(hf_name))


def check_gguf_matches_hf(gguf_path: Path, hf_folder: Path, shape: LlamaShape) -> int:
    """Every GGUF tensor, un-permuted, equals its safetensors twin exactly; returns the count."""
    import gguf

    hf = load_file(str(hf_folder / "model.safetensors"))
    reader = gguf.GGUFReader(str(gguf_path))
    by_name = {t.name: t for t in reader.tensors}
    if len(by_name) != len(hf):
        raise AssertionError(f"GGUF has {len(by_name)} tensors, safetensors {len(hf)}")
    for hf_name, ref in hf.items():
        t = by_name[gguf_name(hf_name)]
        # GGUF lists dimensions innermost first; numpy wants them outermost first.
        data = np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)])
        if hf_name.endswith("q_proj.weight"):
            data = unpermute_qk(data, shape.num_heads)
        elif hf_name.endswith("k_proj.weight"):
            data = unpermute_qk(data, shape.num_kv_heads)
        if data.shape != ref.shape or not np.array_equal(data.astype(np.float32), ref.astype(np.float32)):
            raise AssertionError(f"{hf_name}: GGUF and safetensors values differ")
    return len(hf)
