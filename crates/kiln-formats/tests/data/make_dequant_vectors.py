#!/usr/bin/env python3
"""Writes dequantisation test vectors with the `gguf` package (llama.cpp's gguf-py).

For each type, dequant/<type>.bin holds the encoded bytes of 4 rows of 256 values and
dequant/<type>.f32 the f32 values gguf.quants.dequantize gives for them (little-endian).
Q8_0 and Q4_0 are quantised from random data; gguf-py cannot quantise the K-quants, so their
blocks are random bytes with a controlled f16 scale, which also covers every bit pattern of the
packed fields. Float types include the special values (zeros, infinities, NaN, subnormals).

Run: python3 make_dequant_vectors.py   (needs `pip install gguf numpy`)
"""
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 4, 256
OUT = Path(__file__).resolve().parent / "dequant"
rng = np.random.default_rng(20240601)


def save(name: str, encoded: np.ndarray, values: np.ndarray) -> None:
    values = np.ascontiguousarray(values, dtype="<f4").reshape(ROWS, COLS)
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.bin").write_bytes(np.ascontiguousarray(encoded).tobytes())
    (OUT / f"{name}.f32").write_bytes(values.tobytes())


def random_weights() -> np.ndarray:
    # Rows at different scales, with an outlier, as real weight rows have.
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x *= np.array([[0.02], [1.0], [37.0], [1e-3]], dtype=np.float32)
    x[1, 7] = 12.5
    return x


def quantised(name: str, qtype: T) -> None:
    q = quants.quantize(random_weights(), qtype)
    save(name, q, quants.dequantize(q, qtype))


def random_blocks(name: str, qtype: T, d_offsets: list[int]) -> None:
    """Random K-quant blocks; the f16 scale fields at `d_offsets` get finite, moderate values."""
    n_blocks = ROWS * COLS // 256
    block_bytes = quants.GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in d_offsets:
        d = (rng.uniform(-0.05, 0.05, size=n_blocks)).astype(np.float16)
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    encoded = blocks.reshape(ROWS, -1)
    save(name, encoded, quants.dequantize(encoded, qtype))


def floats() -> None:
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, -65504.0, 6e-8, -6e-8,
                         6.1e-5, 1.0, -1.0, 0.1, 1e-30, 3.0e38], dtype=np.float64)
    x = rng.standard_normal(ROWS * COLS) * 10.0
    x[: len(specials)] = specials
    x = x.reshape(ROWS, COLS)

    with np.errstate(over="ignore"):  # values past the f16 range become infinities
        h = x.astype(np.float16)
    save("f16", h, quants.dequantize(h.view(np.uint8), T.F16))

    b = quants.quantize(x.astype(np.float32), T.BF16)
    save("bf16", b, quants.dequantize(b, T.BF16))

    # gguf-py has no F64 codec; ggml converts with a plain C cast, as numpy does.
    save("f64", x.astype("<f8"), x.astype(np.float32))


def main() -> None:
    quantised("q8_0", T.Q8_0)
    quantised("q4_0", T.Q4_0)
    random_blocks("q4_k", T.Q4_K, [0, 2])
    random_blocks("q6_k", T.Q6_K, [208])
    floats()
    # Added later, after the others so that their vectors stay as they were.
    quantised("q4_1", T.Q4_1)
    quantised("q5_0", T.Q5_0)
    quantised("q5_1", T.Q5_1)
    random_blocks("q5_k", T.Q5_K, [0, 2])
    for f in sorted(OUT.iterdir()):
        print(f.name, f.stat().st_size)


if __name__ == "__main__":
    main()
