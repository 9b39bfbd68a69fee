"""models/README.md, the model card, filled in from the training metrics and the corpus record."""

import math

import tokenizer as tk


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def _shape_rows(results: dict) -> str:
    rows = []
    for dirname, m in results.items():
        s = m["shape"]
        rows.append(
            f"| {dirname} | {m['params'] / 1e6:.2f}M | {s['num_layers']} | {s['hidden_size']} | "
            f"{s['intermediate_size']} | {s['num_heads']} / {s['num_kv_heads']} | "
            f"{s['hidden_size'] // s['num_heads']} | {s['max_position']} |"
        )
    return "\n".join(rows)


def _training_rows(results: dict, val_bytes_per_token: float) -> str:
    rows = []
    for dirname, m in results.items():
        bpb = m["final_val_loss"] / math.log(2) / val_bytes_per_token
        rows.append(
            f"| {dirname} | {m['steps']} | {m['tokens_seen'] / 1e6:.0f}M | {m['batch'][0]}x{m['batch'][1]} | "
            f"{m['peak_lr']:g} | {m['seconds']:.0f} s | {m['tokens_per_second'] / 1e6:.2f}M/s | "
            f"**{m['final_val_loss']:.3f}** | {bpb:.3f} |"
        )
    return "\n".join(rows)


def _source_rows(sources: dict) -> str:
    rows = []
    for name, s in sources.items():
        if name in ("chat", "total_bytes"):
            continue
        rows.append(f"| {name} | `{s['package']}` {s['version']} | {s['licence']} | {s['documents']} | {_mb(s['bytes'])} |")
    return "\n".join(rows)


def _samples(results: dict) -> str:
    out = []
    for dirname, m in results.items():
        out.append(f"**{dirname}**\n")
        for s in m["samples"]:
            prompt = s["prompt"].replace("\n", "\\n")
            text = s["greedy_text"].replace("\n", "\\n")
            out.append(f"- `{prompt}` → `{text}`")
        out.append("")
    return "\n".join(out)


def render(results: dict, meta: dict, sources: dict) -> str:
    target, draft = results["kiln-4m"], results["kiln-4m-draft"]
    train, val = meta["splits"]["train"], meta["splits"]["val"]
    chat = sources.get("chat", {})
    return f"""# kiln-4m and kiln-4m-draft

kiln's default model: a small Llama-architecture language model trained from scratch on free
software documentation, and a draft model about a tenth of its size for speculative decoding.
Both share one tokenizer. They exist so that `kiln generate` and `kiln serve` produce real text on a
fresh machine with no download, and so that tests and speculative decoding have a model whose
predictions mean something. **Intended use: demonstrations and testing.** They know a little about
Unix commands, C, Python, Perl, Git and PostgreSQL, and they are often wrong; do not rely on
anything they say.

## Files

| path | what |
| --- | --- |
| `kiln-4m/hf/` | Hugging Face folder: `config.json` (LlamaForCausalLM), `model.safetensors` (F16), `tokenizer.json`, `tokenizer_config.json` (ChatML template), `generation_config.json` |
| `kiln-4m/kiln-4m-f16.gguf` | the same weights as GGUF F16 (llama.cpp names, Q/K rows permuted as convert_hf_to_gguf.py does, norms as F32) |
| `kiln-4m/reference.json` | greedy continuations (ids and text) of fixed prompts and the logits at the last prompt position, computed by transformers in float32 from the F16 safetensors |
| `kiln-4m/metrics.json`, `kiln-4m/loss.png` | loss curve and training record |
| `kiln-4m-draft/...` | the same for the draft |
| `loss.png` | both loss curves |

The GGUF and the safetensors hold identical values: each tensor was rounded to F16 once and written
to both, and the export reads both files back and compares every tensor bit for bit. So kiln must
produce identical logits from either file.

## Architecture

| model | parameters | layers | hidden | FFN (SwiGLU) | heads / KV heads | head dim | context |
| --- | --- | --- | --- | --- | --- | --- | --- |
{_shape_rows(results)}

RMSNorm (eps 1e-5), rotate-half RoPE (theta 10000), grouped-query attention, tied input and output
embeddings, no biases, vocabulary {meta['vocab_size']}.

**Why 4M parameters, not 10-30M.** The repository travels whole to the GPU machine (64 MiB with the
binary), so `models/` is held under 20 MB. Each model is stored twice (GGUF and safetensors) at 16 bits
so that the two formats can be compared exactly: 4 bytes per parameter, 18 MB for the pair.
A 10M target would need Q8_0 in the GGUF, which the safetensors side cannot match bit for bit;
kiln can ship such a file later when that identity is no longer required. Head dim 64 suits every
attention kernel kiln has.

## Tokenizer

Byte-level BPE with {meta['vocab_size']} tokens, trained with Hugging Face `tokenizers` on the training split:
GPT-2 pre-tokenizer regex (GGUF `tokenizer.ggml.pre = "{tk.GGUF_PRE}"`), no normaliser, no BOS added.
Special tokens: `<|endoftext|>` (0, separates documents; BOS and padding), `<|im_start|>` (1),
`<|im_end|>` (2, end of a chat turn; EOS and EOT in the GGUF). Generation should stop at either 0 or 2
(`generation_config.json` lists both). Chat template: ChatML, an optional system message, and
`<|im_start|>assistant\\n` as the generation prompt.

## Training data

{_mb(sources['total_bytes'])} MB of English text from Debian documentation packages (Debian main), gathered by
`scripts/train/corpus.py` (sources and licences also in `scripts/train/SOURCES.md`):

| source | Debian package | licence | documents | MB |
| --- | --- | --- | --- | --- |
{_source_rows(sources)}

Plus {chat.get('conversations', 0)} ChatML conversations ({_mb(chat.get('bytes', 0))} MB) built by
`scripts/train/chat.py` from the same text: template questions ("What does the grep command do?")
answered with a page's own one-line summary and first paragraph, fortunes, and a few greetings. They
teach the turn format and when to end a turn, not knowledge.

One document in {64} (chosen by a hash of its text) is held out for validation:
{train['tokens'] / 1e6:.1f}M training tokens, {val['tokens'] / 1e6:.2f}M validation tokens, {train['bytes_per_token']} bytes per token.

## Training and loss

`scripts/train/train.py` on {target['device']} (PyTorch {target['torch']}, {target['precision']},
torch.compile {'on' if target['compiled'] else 'off'}), AdamW (betas 0.9/0.95, weight decay 0.1), cosine schedule to 10% of the peak
after a linear warm-up, gradient clipping 1.0, random windows of {target['batch'][1]} tokens. Each model
trains for a fixed wall-clock budget; the weights kept are those of the best validation loss.

| model | steps | tokens seen | batch | peak LR | time | throughput | final validation loss (nats/token) | bits/byte |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{_training_rows(results, val['bytes_per_token'])}

![loss curves](loss.png)

## Greedy samples (from `reference.json`)

{_samples(results)}
## Licence

The weights are released with kiln under the repository's licence (MIT OR Apache-2.0). They were
trained on the documents listed above, each under its own free licence, several of them copyleft
(GPL, CC-BY-SA). Whether such licences reach a model trained on the text is unsettled; the sources
are listed so that anyone redistributing the weights can judge for themselves. A model this small
can still reproduce short passages of its training text verbatim.

## Reproducing

Needs `apt-get`, `dpkg`, `groff` and `pod2text` (Debian) and Python with torch, transformers,
tokenizers, safetensors, gguf and matplotlib.

```
python3 scripts/train/corpus.py --out corpus     # downloads and extracts the packages (about 100 MB)
python3 scripts/train/prepare.py                 # tokenizer + .train/data/*.u16.xz
pip download gguf==0.19.0 --no-deps -d .train/whl  # the GPU machine lacks the gguf package
bash scripts/train/run_on_gpu.sh                 # on the GPU machine: trains, exports to $OUT
```
Draft: {draft['params'] / 1e6:.2f}M parameters, {draft['params'] / target['params']:.2f} of the target.
"""
