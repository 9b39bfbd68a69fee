#!/usr/bin/env python3
"""Train the tokenizer and tokenise the corpus into compressed uint16 token files.

    python3 scripts/train/prepare.py [--corpus corpus] [--out .train/data]

Writes to --out (an ignored folder carried to the GPU machine):
    tokenizer.json          the byte-level BPE (tokenizer.py)
    train.u16.xz, val.u16.xz  token ids, little-endian uint16, documents separated by <|endoftext|>
    meta.json               counts per source, vocabulary size, checksums
Validation documents are chosen by a hash of their text, so the split does not depend on order.
"""

import argparse
import hashlib
import json
import lzma
import random
import sys
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chat  # noqa: E402
import tokenizer as tk  # noqa: E402

VAL_MODULUS = 64  # one document in 64 goes to validation


def load_documents(corpus: Path) -> list[tuple[str, str]]:
    """(source, text) for every document and rendered conversation."""
    docs = []
    for path in sorted((corpus / "text").glob("*.jsonl")):
        with path.open() as f:
            docs += [(path.stem, json.loads(line)["text"]) for line in f]
    chat_path = corpus / "chat.jsonl"
    if chat_path.exists():
        with chat_path.open() as f:
            docs += [("chat", chat.to_chatml(json.loads(line)["messages"])) for line in f]
    if not docs:
        raise SystemExit(f"no documents under {corpus}/text; run scripts/train/corpus.py first")
    return docs


def is_val(text: str) -> bool:
    return zlib.crc32(text.encode()) % VAL_MODULUS == 0


def encode(tok, docs: list[tuple[str, str]]) -> tuple[np.ndarray, dict]:
    """Concatenate documents, each followed by <|endoftext|>; returns ids and tokens per source."""
    eot = tok.token_to_id(tk.ENDOFTEXT)
    encs = tok.encode_batch([t for _, t in docs], add_special_tokens=False)
    per_source: dict[str, int] = {}
    parts = []
    for (src, _), enc in zip(docs, encs):
        ids = enc.ids + [eot]
        per_source[src] = per_source.get(src, 0) + len(ids)
        parts.append(np.asarray(ids, dtype=np.uint16))
    return np.concatenate(parts), per_source


def write_ids(path: Path, ids: np.ndarray) -> tuple[int, str]:
    raw = ids.astype("<u2").tobytes()
    path.write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
    return path.stat().st_size, hashlib.sha256(raw).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("corpus"))
    ap.add_argument("--out", type=Path, default=Path(".train/data"))
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.vocab_size > 65536:
        raise SystemExit("--vocab-size must fit uint16")
    args.out.mkdir(parents=True, exist_ok=True)

    docs = load_documents(args.corpus)
    random.Random(args.seed).shuffle(docs)
    train_docs = [d for d in docs if not is_val(d[1])]
    val_docs = [d for d in docs if is_val(d[1])]
    print(f"{len(train_docs)} train / {len(val_docs)} val documents, "
          f"{sum(len(t.encode()) for _, t in docs) / 1e6:.1f} MB of text")

    tok = tk.train_tokenizer((t for _, t in train_docs), args.vocab_size)
    tok.save(str(args.out / "tokenizer.json"))
    print(f"tokenizer: {tok.get_vocab_size()} tokens")

    meta = {"vocab_size": tok.get_vocab_size(), "dtype": "uint16-le", "compression": "xz", "splits": {}}
    for name, split in (("train", train_docs), ("val", val_docs)):
        ids, per_source = encode(tok, split)
        size, sha = write_ids(args.out / f"{name}.u16.xz", ids)
        text_bytes = sum(len(t.encode()) for _, t in split)
        meta["splits"][name] = {
            "documents": len(split), "tokens": int(ids.size), "text_bytes": text_bytes,
            "bytes_per_token": round(text_bytes / ids.size, 3), "compressed_bytes": size,
            "sha256": sha, "tokens_per_source": dict(sorted(per_source.items())),
        }
        print(f"{name}: {ids.size / 1e6:.2f}M tokens, {text_bytes / ids.size:.2f} bytes/token, "
              f"{size / 1e6:.2f} MB compressed")
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    # The corpus record (packages, versions, licences) travels with the data for the model card.
    (args.out / "sources.json").write_text((args.corpus / "stats.json").read_text())


if __name__ == "__main__":
    main()
