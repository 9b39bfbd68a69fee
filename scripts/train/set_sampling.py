"""Writes a shipped model's recommended sampling into both of its files: `generation_config.json` of the
Hugging Face folder (as transformers and vLLM read it) and `general.sampling.*` keys of the GGUF (as llama.cpp
and kiln read them). The tensors and every other key are copied as they are, so the GGUF and the safetensors
still hold identical weights (crates/kiln/tests/all/shipped_model.rs checks it).

kiln-4m decodes greedily into loops ("The file descriptor is a non-blocking file descriptor." again and again);
greedy decoding with a repetition penalty of 1.3 over the whole sequence (transformers' and kiln's penalty;
llama.cpp's with penalty_last_n -1) reads as text and stays reproducible.

Usage: python3 scripts/train/set_sampling.py models/kiln-4m [--repetition-penalty 1.3]
Standard library only.
"""
import argparse
import json
import os
import struct

# GGUF value types (gguf.md).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SIZES = {U8: 1, I8: 1, U16: 2, I16: 2, U32: 4, I32: 4, F32: 4, BOOL: 1, U64: 8, I64: 8, F64: 8}


def skip_value(buf, at, kind):
    if kind in SIZES:
        return at + SIZES[kind]
    if kind == STR:
        (n,) = struct.unpack_from("<Q", buf, at)
        return at + 8 + n
    if kind == ARR:
        sub, n = struct.unpack_from("<IQ", buf, at)
        at += 12
        if sub in SIZES:
            return at + n * SIZES[sub]
        for _ in range(n):
            at = skip_value(buf, at, sub)
        return at
    raise ValueError(f"unknown GGUF value type {kind}")


def string(buf, at):
    (n,) = struct.unpack_from("<Q", buf, at)
    return buf[at + 8:at + 8 + n].decode(), at + 8 + n


def kv_bytes(key, kind, value):
    k = key.encode()
    fmt = {F32: "<f", I32: "<i"}[kind]
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", kind) + struct.pack(fmt, value)


def set_gguf(path, keys):
    """Rewrites `path` with `keys` ({name: (type, value)}) set: existing ones replaced, new ones appended."""
    buf = open(path, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version < 2:
        raise SystemExit(f"{path}: not a GGUF v2/v3 file")
    at, kvs, alignment = 24, [], 32
    for _ in range(n_kv):
        start = at
        key, at = string(buf, at)
        (kind,) = struct.unpack_from("<I", buf, at)
        at = skip_value(buf, at + 4, kind)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, at - 4)
        if key not in keys:
            kvs.append(buf[start:at])
    infos_start = at
    for _ in range(n_tensors):
        _, at = string(buf, at)
        (n_dims,) = struct.unpack_from("<I", buf, at)
        at += 4 + 8 * n_dims + 4 + 8
    infos = buf[infos_start:at]
    data_start = (at + alignment - 1) // alignment * alignment
    kvs += [kv_bytes(k, t, v) for k, (t, v) in keys.items()]
    head = struct.pack("<4sIQQ", b"GGUF", version, n_tensors, len(kvs)) + b"".join(kvs) + infos
    pad = (-len(head)) % alignment
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(head + b"\0" * pad + buf[data_start:])
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", help="e.g. models/kiln-4m (holds hf/ and NAME-f16.gguf)")
    ap.add_argument("--repetition-penalty", type=float, default=1.3)
    a = ap.parse_args()
    name = os.path.basename(os.path.normpath(a.model_dir))
    gen_path = os.path.join(a.model_dir, "hf", "generation_config.json")
    gen = json.load(open(gen_path))
    gen.update({"do_sample": False, "repetition_penalty": a.repetition_penalty})
    with open(gen_path, "w") as f:
        f.write(json.dumps(gen, indent=2) + "\n")
    set_gguf(os.path.join(a.model_dir, f"{name}-f16.gguf"), {
        "general.sampling.temp": (F32, 0.0),
        "general.sampling.penalty_repeat": (F32, a.repetition_penalty),
        "general.sampling.penalty_last_n": (I32, -1),
    })
    print(f"{name}: greedy, repetition penalty {a.repetition_penalty} in {gen_path} and the GGUF")


if __name__ == "__main__":
    main()
