"""transformers (PyTorch, eager, SDPA) on the weights of a llama GGUF or a Hugging Face folder, for side-by-side
runs (`kiln bench --vs transformers` and scripts/bench-gpu.sh run it).

--gguf: builds a LlamaForCausalLM of the GGUF's shape and copies the GGUF's tensors into it (Q and K rows put
back in the Hugging Face order that llama.cpp's converter permutes), in float16 by default so that the weights
are exactly the file's (--weights random skips the copy). --hf: loads the folder with AutoModelForCausalLM.
Measures prefill tok/s of one prompt per length (median of --repeats after a warm-up) and decode tok/s of
`generate` after a prompt of each --prompt length at each batch size (the difference of a long and a short
generation, so the prompt's prefill cancels out; a length of 0 is run as 1 and reported as 0).
Writes {"versions", "date", "rows": [{test, tokens, concurrency, tok_s, ...}]} to --out.

Usage: python hf_bench.py (--gguf FILE [--gguf-py DIR] | --hf DIR) --out FILE [--prefill 2048,8192,32768]
       [--decode 128] [--batch 1,8,32] [--prompt 512] [--repeats 3] [--weights gguf|random]
       [--dtype float16|bfloat16|float32] [--device cuda|cpu] [--threads N]
"""
import argparse
import datetime
import json
import sys
import time


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
src = ap.add_mutually_exclusive_group(required=True)
src.add_argument("--gguf", help="a llama-architecture GGUF file (F16/F32 tensors)")
src.add_argument("--hf", help="a Hugging Face model folder")
ap.add_argument("--gguf-py", help="folder of llama.cpp's gguf-py package (default: the installed gguf package)")
ap.add_argument("--out", required=True)
ap.add_argument("--prefill", type=ints, default=[2048, 8192, 32768])
ap.add_argument("--decode", type=int, default=128)
ap.add_argument("--batch", type=ints, default=[1, 8, 32])
ap.add_argument("--prompt", type=ints, default=[512], help="prompt lengths before the decode figures")
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--weights", choices=["gguf", "random"], default="gguf")
ap.add_argument("--dtype", choices=["float16", "bfloat16", "float32"],
                help="default: float16 on the GPU, float32 on the CPU")
ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
ap.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
a = ap.parse_args()
if a.gguf_py:
    sys.path.insert(0, a.gguf_py)
try:
    import numpy as np  # noqa: E402
    import torch  # noqa: E402
    import transformers  # noqa: E402
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402
except ImportError as e:
    sys.exit(f"hf_bench.py: {e}; install them with: pip install torch transformers numpy")

dev = torch.device(a.device)
if a.device == "cuda" and not torch.cuda.is_available():
    sys.exit("hf_bench.py: torch sees no CUDA device; run with --device cpu")
if a.threads:
    torch.set_num_threads(a.threads)
dtype = getattr(torch, a.dtype or ("float16" if a.device == "cuda" else "float32"))
device_name = torch.cuda.get_device_name() if a.device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
versions = f"torch {torch.__version__}, transformers {transformers.__version__}, {device_name}"
print(versions, flush=True)
t_start = time.time()


def sync():
    if a.device == "cuda":
        torch.cuda.synchronize()


def unpermute(w, heads):
    # Inverse of convert_hf_to_gguf's LlamaModel.permute (GGUF rows are rope pairs interleaved).
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def from_gguf(path):
    try:
        import gguf
    except ImportError:
        sys.exit("hf_bench.py: reading a GGUF needs the gguf package: pip install gguf (or give --gguf-py)")
    r = gguf.GGUFReader(path)
    arch = r.get_field("general.architecture").contents()
    if arch != "llama":
        sys.exit(f"hf_bench.py: {path} is a '{arch}' GGUF; only llama GGUF files are rebuilt here, give the "
                 "model's Hugging Face folder with --hf")
    # GGUF scalars come back as numpy types, which transformers' config validation refuses.
    g = lambda k: r.get_field(f"{arch}.{k}").contents()  # noqa: E731
    tensors = {t.name: t for t in r.tensors}
    n_head, n_kv, dim = int(g("attention.head_count")), int(g("attention.head_count_kv")), int(g("embedding_length"))
    vocab = int(tensors["token_embd.weight"].shape[-1])
    hd_field = r.get_field(f"{arch}.rope.dimension_count")
    cfg = LlamaConfig(hidden_size=dim, intermediate_size=int(g("feed_forward_length")),
                      num_hidden_layers=int(g("block_count")),
                      num_attention_heads=n_head, num_key_value_heads=n_kv, vocab_size=vocab,
                      head_dim=int(hd_field.contents()) if hd_field else dim // n_head,
                      max_position_embeddings=int(g("context_length")), rope_theta=float(g("rope.freq_base")),
                      rms_norm_eps=float(g("attention.layer_norm_rms_epsilon")),
                      tie_word_embeddings="output.weight" not in tensors,
                      torch_dtype=str(dtype).removeprefix("torch."), attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(dev):
        torch.set_default_dtype(dtype)
        model = LlamaForCausalLM(cfg).eval()
    if a.weights == "random":
        return model, vocab
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
                 "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, t in tensors.items():
            if name.startswith("blk."):
                _, i, kind, _ = name.split(".")
                hf = f"model.layers.{i}.{per_layer[kind]}.weight"
            else:
                hf = names[name]
            if t.tensor_type not in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32):
                sys.exit(f"{name}: {t.tensor_type.name} tensors are not supported here (F16/F32 only)")
            w = np.asarray(t.data)
            if name.endswith("attn_q.weight"):
                w = unpermute(w, n_head)
            elif name.endswith("attn_k.weight"):
                w = unpermute(w, n_kv)
            dst = params[hf]
            if tuple(dst.shape) != w.shape:
                sys.exit(f"{name}: shape {w.shape} does not fit {hf} {tuple(dst.shape)}")
            dst.copy_(torch.from_numpy(np.ascontiguousarray(w)).to(dst.device, dst.dtype))
    return model, vocab


if a.gguf:
    model, V = from_gguf(a.gguf)
else:
    model = AutoModelForCausalLM.from_pretrained(a.hf, dtype=dtype, attn_implementation="sdpa").to(dev).eval()
    V = model.config.vocab_size
sync()
print(f"model ready in {time.time() - t_start:.1f} s ({a.weights if a.gguf else 'hf'} weights, {dtype})", flush=True)


def timed(fn, reps):
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return ts


rows = []
with torch.inference_mode():
    for L in a.prefill:
        ids = torch.randint(0, V, (1, L), device=dev)
        ts = timed(lambda: model(ids, use_cache=False, logits_to_keep=1), a.repeats)
        rates = sorted(L / t for t in ts)
        rows.append({"test": "prefill", "tokens": L, "concurrency": 1, "tok_s": rates[len(rates) // 2],
                     "tok_s_min": rates[0], "tok_s_max": rates[-1]})
        print(f"prefill {L}: {rates[len(rates) // 2]:.0f} tok/s", flush=True)
    for prompt in a.prompt if a.decode > 0 else []:
        for bs in a.batch:
            ids = torch.randint(0, V, (bs, max(prompt, 1)), device=dev)

            def gen(n):
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, pad_token_id=0)
                sync()

            short = min(16, a.decode)
            gen(4)
            t0 = time.perf_counter()
            gen(short)
            t_short = time.perf_counter() - t0
            t0 = time.perf_counter()
            gen(short + a.decode)
            t_long = time.perf_counter() - t0
            tok_s = bs * a.decode / max(t_long - t_short, 1e-9)
            rows.append({"test": "decode", "tokens": prompt, "concurrency": bs, "tok_s": tok_s, "generated": a.decode})
            print(f"decode after {prompt} x{bs}: {tok_s:.1f} tok/s", flush=True)

date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
with open(a.out, "w") as f:
    json.dump({"versions": versions, "date": date, "weights": a.weights if a.gguf else "hf",
               "dtype": str(dtype).removeprefix("torch."), "rows": rows}, f, indent=1)
print(f"written {a.out} in {time.time() - t_start:.0f} s", flush=True)
