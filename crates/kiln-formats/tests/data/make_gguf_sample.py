#!/usr/bin/env python3
"""Writes gguf_py_sample.gguf with llama.cpp's own writer (the `gguf` package), so the reader is
checked against files it did not write itself.

Metadata covers every value type; tensors cover every type kiln dequantises, in 2-D shapes.
gguf_py_sample.f32 holds gguf.quants.dequantize of each tensor, concatenated in file order
(little-endian f32). Run: python3 make_gguf_sample.py   (needs `pip install gguf numpy`)
"""
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as VT
from gguf import GGUFWriter, quants

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(7)


def k_quant_blocks(qtype: T, n_blocks: int, d_offsets: list[int]) -> np.ndarray:
    """Random K-quant blocks with finite f16 scales (gguf-py cannot quantise K-quants)."""
    size = quants.GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in d_offsets:
        d = rng.uniform(-0.05, 0.05, size=n_blocks).astype(np.float16)
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def main() -> None:
    w = GGUFWriter(HERE / "gguf_py_sample.gguf", "llama")
    w.add_uint8("sample.u8", 250)
    w.add_int8("sample.i8", -7)
    w.add_uint16("sample.u16", 60000)
    w.add_int16("sample.i16", -30000)
    w.add_uint32("sample.u32", 3_000_000_000)
    w.add_int32("sample.i32", -2_000_000_000)
    w.add_float32("sample.f32", 0.125)
    w.add_bool("sample.bool", True)
    w.add_string("sample.string", "héllo ▁wörld")
    w.add_uint64("sample.u64", 2**63 + 5)
    w.add_int64("sample.i64", -(2**62))
    w.add_float64("sample.f64", -2.5e-300)
    w.add_array("sample.strings", ["<s>", "</s>", "▁a"])
    w.add_key_value("sample.u32s", [1, 2, 3], VT.ARRAY, sub_type=VT.UINT32)
    w.add_array("sample.floats", [0.5, -1.5])
    w.add_array("sample.nested", [[1, 2], [3]])

    x = (np.arange(2 * 256, dtype=np.float32).reshape(2, 256) - 200.0) / 37.0
    tensors = [
        ("t.f32", x[:, :5].copy(), None),
        ("t.f16", x[:, :8].astype(np.float16), None),
        ("t.bf16", quants.quantize(x[:, :8], T.BF16), T.BF16),
        ("t.f64", x[:, :3].astype(np.float64), None),
        ("t.q8_0", quants.quantize(x[:, :64], T.Q8_0), T.Q8_0),
        ("t.q4_0", quants.quantize(x[:, :32], T.Q4_0), T.Q4_0),
        ("t.q4_k", k_quant_blocks(T.Q4_K, 2, [0, 2]), T.Q4_K),
        ("t.q6_k", k_quant_blocks(T.Q6_K, 2, [208]), T.Q6_K),
    ]
    expected = []
    for name, data, qtype in tensors:
        if qtype in (T.Q4_K, T.Q6_K):
            data = data.reshape(2, -1)  # one block per row
        w.add_tensor(name, data, raw_dtype=qtype)
        if qtype is None:
            expected.append(data.astype(np.float32).ravel())
        else:
            expected.append(quants.dequantize(data, qtype).ravel())

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    np.concatenate(expected).astype("<f4").tofile(HERE / "gguf_py_sample.f32")


if __name__ == "__main__":
    main()
