"""Write a random-weight Gemma 4 (`gemma4`) GGUF that every engine of a side-by-side run reads.

The tokenizer comes from a vocab-only GGUF (ggml-vocab-gemma-4.gguf); the shape is transformers 5.17's
`Gemma4TextConfig` defaults (the dense text model: 30 layers, hidden 2304, 5 sliding : 1 full layers,
head dim 256 sliding / 512 full, per-layer inputs 256 wide), with flags to change what the defaults
leave out (KV sharing, soft cap). Tensor names and metadata are those llama.cpp's convert_hf_to_gguf.py
writes for a Hugging Face `Gemma4ForCausalLM` (tests/fixtures/gemma4/model.gguf is one), so that
`kiln bench --model FILE` and llama.cpp run the same shapes and the same bytes. Weights are N(0, 0.02),
norms 1.0, layer output scales 1.0.

Usage: python make_random_gemma4_gguf.py --vocab ggml-vocab-gemma-4.gguf --out OUT.gguf --gguf-py DIR
       [--layers N] [--kv-shared N] [--softcap X] [--dtype f16|bf16|f32] [--ctx N]
"""
import argparse
import sys

import numpy as np

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--vocab", required=True, help="ggml-vocab-gemma-4.gguf (the tokenizer)")
ap.add_argument("--out", required=True)
ap.add_argument("--gguf-py", default=".", help="folder of llama.cpp's gguf-py package")
ap.add_argument("--layers", type=int, default=30)
ap.add_argument("--hidden", type=int, default=2304)
ap.add_argument("--ff", type=int, default=9216)
ap.add_argument("--heads", type=int, default=8)
ap.add_argument("--kv-heads", type=int, default=4)
ap.add_argument("--head-dim", type=int, default=256, help="sliding layers' head dim")
ap.add_argument("--full-head-dim", type=int, default=512, help="full layers' head dim")
ap.add_argument("--window", type=int, default=512)
ap.add_argument("--full-every", type=int, default=6, help="every Nth layer is a full-attention layer")
ap.add_argument("--per-layer", type=int, default=256, help="hidden_size_per_layer_input (0: none)")
ap.add_argument("--kv-shared", type=int, default=0, help="num_kv_shared_layers")
ap.add_argument("--softcap", type=float, default=0.0, help="final_logit_softcapping (0: none)")
ap.add_argument("--partial-rotary", type=float, default=0.25, help="full layers' partial_rotary_factor")
ap.add_argument("--ctx", type=int, default=131072)
ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32"])
a = ap.parse_args()
sys.path.insert(0, a.gguf_py)
import gguf  # noqa: E402  (found through --gguf-py)

ARCH = "gemma4"
r = gguf.GGUFReader(a.vocab)
if r.get_field("general.architecture").contents() != ARCH:
    sys.exit(f"{a.vocab}: not a gemma4 vocabulary")
V = len(r.get_field("tokenizer.ggml.tokens").data)
d, ff, nl, nh, nkv, ple = a.hidden, a.ff, a.layers, a.heads, a.kv_heads, a.per_layer
full = [(i + 1) % a.full_every == 0 for i in range(nl)]
head_dim = [a.full_head_dim if f else a.head_dim for f in full]
first_shared = nl - a.kv_shared

w = gguf.GGUFWriter(a.out, ARCH)
for f in r.fields.values():
    # The tokenizer and general keys of the vocabulary; the architecture's keys are written below.
    if f.name == "general.architecture" or f.name.startswith("GGUF.") or f.name.startswith(ARCH + "."):
        continue
    vt = f.types[0]
    st = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
    val = f.contents()
    if f.name == "general.file_type":
        val = {"f32": 0, "f16": 1, "bf16": 32}[a.dtype]
    if f.name in ("general.name", "general.finetune"):
        val = "random gemma4 text"
    w.add_key_value(f.name, val, vt, sub_type=st)
U32, F32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
keys = [
    ("block_count", nl, U32), ("context_length", a.ctx, U32), ("embedding_length", d, U32),
    ("feed_forward_length", ff, U32), ("attention.head_count", nh, U32), ("attention.head_count_kv", nkv, U32),
    ("rope.freq_base", 1e6, F32), ("rope.freq_base_swa", 1e4, F32),
    ("attention.layer_norm_rms_epsilon", 1e-6, F32),
    ("attention.key_length", a.full_head_dim, U32), ("attention.value_length", a.full_head_dim, U32),
    ("attention.key_length_swa", a.head_dim, U32), ("attention.value_length_swa", a.head_dim, U32),
    ("rope.dimension_count", a.full_head_dim, U32), ("rope.dimension_count_swa", a.head_dim, U32),
    ("attention.sliding_window", a.window, U32), ("attention.shared_kv_layers", a.kv_shared, U32),
    ("embedding_length_per_layer_input", ple, U32),
]
if a.softcap:
    keys.append(("final_logit_softcapping", a.softcap, F32))
for k, v, t in keys:
    w.add_key_value(f"{ARCH}.{k}", v, t)
w.add_key_value(f"{ARCH}.attention.sliding_window_pattern", [not f for f in full], gguf.GGUFValueType.ARRAY,
                sub_type=gguf.GGUFValueType.BOOL)

# Full layers' proportional RoPE: the first partial_rotary_factor of the pairs turn (factor 1), the
# others stand still (factor 1e30, as the converter writes it).
pairs = a.full_head_dim // 2
turning = int(pairs * a.partial_rotary)
rope_freqs = np.array([1.0] * turning + [1e30] * (pairs - turning), np.float32)

tensors = [("token_embd.weight", (V, d), True), ("output_norm.weight", (d,), False)]
if ple:
    tensors += [("per_layer_token_embd.weight", (V, nl * ple), True),
                ("per_layer_model_proj.weight", (nl * ple, d), True), ("per_layer_proj_norm.weight", (ple,), False)]
for i in range(nl):
    hd, b = head_dim[i], f"blk.{i}."
    tensors += [(b + "attn_norm.weight", (d,), False), (b + "attn_q.weight", (nh * hd, d), True),
                (b + "attn_q_norm.weight", (hd,), False)]
    if i < first_shared:
        tensors += [(b + "attn_k.weight", (nkv * hd, d), True), (b + "attn_v.weight", (nkv * hd, d), True),
                    (b + "attn_k_norm.weight", (hd,), False)]
    tensors += [(b + "attn_output.weight", (d, nh * hd), True), (b + "post_attention_norm.weight", (d,), False),
                (b + "ffn_norm.weight", (d,), False), (b + "ffn_gate.weight", (ff, d), True),
                (b + "ffn_up.weight", (ff, d), True), (b + "ffn_down.weight", (d, ff), True),
                (b + "post_ffw_norm.weight", (d,), False), (b + "layer_output_scale.weight", (1,), False)]
    if ple:
        tensors += [(b + "inp_gate.weight", (ple, d), True), (b + "proj.weight", (d, ple), True),
                    (b + "post_norm.weight", (d,), False)]

qt = {"f16": gguf.GGMLQuantizationType.F16, "bf16": gguf.GGMLQuantizationType.BF16,
      "f32": gguf.GGMLQuantizationType.F32}[a.dtype]
np_type = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32}[a.dtype]
elt = 4 if a.dtype == "f32" else 2
rng = np.random.default_rng(0)
pool = rng.standard_normal(1 << 26, dtype=np.float32) * 0.02


def rnd(shape):
    n = int(np.prod(shape))
    x = np.resize(np.roll(pool, int(rng.integers(0, pool.size))), n).reshape(shape)
    if a.dtype == "f16":
        return x.astype(np.float16)
    if a.dtype == "f32":
        return x
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # truncating bf16


w.add_tensor_info("rope_freqs.weight", rope_freqs.shape, np.float32, rope_freqs.nbytes, gguf.GGMLQuantizationType.F32)
for name, shp, mat in tensors:
    if mat:
        w.add_tensor_info(name, shp, np_type, int(np.prod(shp)) * elt, qt)
    else:
        w.add_tensor_info(name, shp, np.float32, int(np.prod(shp)) * 4, gguf.GGMLQuantizationType.F32)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_ti_data_to_file()
w.write_tensor_data(rope_freqs)
for name, shp, mat in tensors:
    w.write_tensor_data(rnd(shp) if mat else np.ones(shp, np.float32))
w.close()
params = sum(int(np.prod(s)) for _, s, _ in tensors)
print(f"wrote {a.out}: gemma4, {nl} layers ({sum(full)} full), hidden {d}, vocab {V}, {params / 1e9:.2f}B parameters, "
      f"{a.dtype}")
