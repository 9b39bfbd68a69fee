"""Write a random-weight GGUF that every engine of a side-by-side run reads.

The hyper-parameters and vocabulary come from a vocab-only GGUF (ggml-vocab-llama-bpe.gguf: Llama-3-8B),
optionally reshaped to one of kiln's dummy presets (--preset tiny | llama3-1b | llama3-8b), so that
`kiln bench --model FILE` and llama.cpp run the same shapes and the same bytes. Weights are N(0, 0.02),
norms 1.0. A preset with a smaller vocabulary keeps the first tokens of the vocabulary (with the merges
among them) and two control tokens at the end for BOS and EOS.

Usage: python make_random_gguf.py --vocab VOCAB.gguf --out OUT.gguf --gguf-py DIR [--preset NAME]
       [--dtype f16|bf16|f32|q8_0|q4_0] [--layers N] [--ctx N]

With q8_0 or q4_0 every matrix is quantised by gguf-py (as llama.cpp's quantizer would store it); norms
stay F32.
"""
import argparse
import sys

import numpy as np

# kiln's dummy presets (crates/kiln-model/src/presets.rs): dims, heads, vocab, tied head, rope base.
PRESETS = {
    "tiny": dict(dim=256, ff=768, layers=4, heads=8, kv_heads=2, head_dim=32, vocab=512, tie=False,
                 rope_base=10_000.0, ctx=4096),
    "llama3-1b": dict(dim=2048, ff=8192, layers=16, heads=32, kv_heads=8, head_dim=64, vocab=None, tie=True,
                      rope_base=500_000.0, ctx=131_072),
    "llama3-8b": dict(dim=4096, ff=14336, layers=32, heads=32, kv_heads=8, head_dim=128, vocab=None, tie=False,
                      rope_base=500_000.0, ctx=131_072),
}

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--vocab", required=True, help="vocab-only GGUF giving the tokenizer (and the shape without --preset)")
ap.add_argument("--out", required=True)
ap.add_argument("--gguf-py", default=".", help="folder of llama.cpp's gguf-py package")
ap.add_argument("--preset", choices=sorted(PRESETS), help="reshape to a kiln dummy preset")
ap.add_argument("--ctx", type=int, default=0, help="context_length to write (0: the preset's, else 131072)")
ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32", "q8_0", "q4_0"])
ap.add_argument("--layers", type=int, default=0, help="override block_count (0: keep)")
a = ap.parse_args()
sys.path.insert(0, a.gguf_py)
import gguf  # noqa: E402  (found through --gguf-py)

r = gguf.GGUFReader(a.vocab)
arch = r.get_field("general.architecture").contents()
if arch != "llama":
    sys.exit(f"{a.vocab}: architecture {arch!r}; this writer only knows llama tensors")
g = lambda k: r.get_field(f"{arch}.{k}").contents()  # noqa: E731
shape = dict(dim=g("embedding_length"), ff=g("feed_forward_length"), layers=g("block_count"),
             heads=g("attention.head_count"), kv_heads=g("attention.head_count_kv"), vocab=None, tie=False,
             rope_base=None, ctx=131_072)
shape["head_dim"] = shape["dim"] // shape["heads"]
if a.preset:
    shape.update(PRESETS[a.preset])
if a.layers:
    shape["layers"] = a.layers
if a.ctx:
    shape["ctx"] = a.ctx
d, ff, nl, nh, nkv, hd = (shape[k] for k in ("dim", "ff", "layers", "heads", "kv_heads", "head_dim"))

tokens_field = r.get_field("tokenizer.ggml.tokens")
n_vocab_file = len(tokens_field.data)
V = shape["vocab"] or n_vocab_file


def vocab_overrides():
    """Keys rewritten when the vocabulary is cut to V tokens: the kept tokens, their merges, BOS/EOS."""
    if V >= n_vocab_file:
        return {}
    toks = [str(t) for t in tokens_field.contents()[: V - 2]] + ["<|begin_of_text|>", "<|end_of_text|>"]
    types = list(r.get_field("tokenizer.ggml.token_type").contents()[: V - 2]) + [3, 3]
    kept = set(toks)
    merges = []
    for m in r.get_field("tokenizer.ggml.merges").contents():
        left, _, right = str(m).partition(" ")
        if left in kept and right in kept and left + right in kept:
            merges.append(str(m))
    return {"tokenizer.ggml.tokens": toks, "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": V - 2, "tokenizer.ggml.eos_token_id": V - 1}


over = vocab_overrides()
over.update({
    f"{arch}.context_length": shape["ctx"], f"{arch}.block_count": nl, f"{arch}.embedding_length": d,
    f"{arch}.feed_forward_length": ff, f"{arch}.attention.head_count": nh, f"{arch}.attention.head_count_kv": nkv,
    f"{arch}.rope.dimension_count": hd, f"{arch}.vocab_size": V,
    "general.file_type": {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}[a.dtype],
})
if shape["rope_base"]:
    over[f"{arch}.rope.freq_base"] = shape["rope_base"]
if a.preset:
    over["general.name"] = f"random {a.preset}"

w = gguf.GGUFWriter(a.out, arch)
written = set()
for f in r.fields.values():
    if f.name == "general.architecture" or f.name.startswith("GGUF."):
        continue
    vt = f.types[0]
    st = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
    w.add_key_value(f.name, over.get(f.name, f.contents()), vt, sub_type=st)
    written.add(f.name)
for k in (f"{arch}.rope.dimension_count", f"{arch}.vocab_size"):
    if k not in written:
        w.add_key_value(k, over[k], gguf.GGUFValueType.UINT32)

rng = np.random.default_rng(0)
pool = rng.standard_normal(1 << 26, dtype=np.float32) * 0.02
qt = {"f16": gguf.GGMLQuantizationType.F16, "bf16": gguf.GGMLQuantizationType.BF16,
      "f32": gguf.GGMLQuantizationType.F32, "q8_0": gguf.GGMLQuantizationType.Q8_0,
      "q4_0": gguf.GGMLQuantizationType.Q4_0}[a.dtype]
quantized = a.dtype in ("q8_0", "q4_0")
np_type = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32}.get(a.dtype, np.uint8)
elt = 4 if a.dtype == "f32" else 2


def conv(x):
    if a.dtype == "f16":
        return x.astype(np.float16)
    if a.dtype == "f32":
        return x
    if quantized:
        return gguf.quants.quantize(x, qt)
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # truncating bf16


def stored(shp):
    """The shape and byte count a matrix is declared with."""
    if quantized:
        block, block_bytes = gguf.GGML_QUANT_SIZES[qt]
        row_bytes = shp[-1] // block * block_bytes
        return (shp[0], row_bytes), shp[0] * row_bytes
    return shp, int(np.prod(shp)) * elt


def rnd(shape):
    n = int(np.prod(shape))
    off = int(rng.integers(0, pool.size))
    return conv(np.resize(np.roll(pool, off), n).reshape(shape))


tensors = [("token_embd.weight", (V, d), True), ("output_norm.weight", (d,), False)]
if not shape["tie"]:
    tensors.append(("output.weight", (V, d), True))
for i in range(nl):
    tensors += [(f"blk.{i}.attn_norm.weight", (d,), False), (f"blk.{i}.attn_q.weight", (nh * hd, d), True),
                (f"blk.{i}.attn_k.weight", (nkv * hd, d), True), (f"blk.{i}.attn_v.weight", (nkv * hd, d), True),
                (f"blk.{i}.attn_output.weight", (d, nh * hd), True), (f"blk.{i}.ffn_norm.weight", (d,), False),
                (f"blk.{i}.ffn_gate.weight", (ff, d), True), (f"blk.{i}.ffn_up.weight", (ff, d), True),
                (f"blk.{i}.ffn_down.weight", (d, ff), True)]
for name, shp, mat in tensors:
    if mat:
        decl, nbytes = stored(shp)
        w.add_tensor_info(name, decl, np_type, nbytes, qt)
    else:
        w.add_tensor_info(name, shp, np.float32, int(np.prod(shp)) * 4, gguf.GGMLQuantizationType.F32)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_ti_data_to_file()
for name, shp, mat in tensors:
    w.write_tensor_data(rnd(shp) if mat else np.ones(shp, np.float32))
w.close()
print("wrote", a.out, arch, a.preset or "(vocab file's shape)", nl, "layers", d, "dim", V, "vocab", a.dtype)
