//! float64 host references of the row kernels and attention, shared by the contract tests of
//! the typed kernels (every storage type runs the same references).
#![allow(dead_code)]

pub fn rmsnorm_ref(x: &[f64], w: &[f32], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter().zip(w).map(|(v, &g)| v * inv * g as f64).collect()
}

pub fn silu_mul_ref(g: f32, u: f32) -> f64 {
    let g = g as f64;
    g / (1.0 + (-g).exp()) * u as f64
}

/// The head shape and RoPE of a qkv_prepare case.
pub struct QkvShape<'a> {
    pub n_q: usize,
    pub n_kv: usize,
    pub hd: usize,
    pub neox: bool,
    pub eps: f32,
    /// The attention factor RoPE's cos and sin are scaled by.
    pub af: f32,
    pub inv_freq: &'a [f32],
}

/// qkv_prepare of one token at `pos`: [q heads, k heads, v heads], each hd wide.
pub fn qkv_ref(
    row: &[f32],
    bias: Option<&[f32]>,
    qn: Option<&[f32]>,
    kn: Option<&[f32]>,
    pos: usize,
    s: &QkvShape<'_>,
) -> Vec<f64> {
    let (n_q, n_kv, hd) = (s.n_q, s.n_kv, s.hd);
    let heads = n_q + 2 * n_kv;
    let mut out = Vec::with_capacity(heads * hd);
    for h in 0..heads {
        let mut v: Vec<f64> = (0..hd)
            .map(|i| row[h * hd + i] as f64 + bias.map_or(0.0, |b| b[h * hd + i] as f64))
            .collect();
        let norm = if h < n_q {
            qn
        } else if h < n_q + n_kv {
            kn
        } else {
            None
        };
        if let Some(w) = norm {
            v = rmsnorm_ref(&v, w, s.eps);
        }
        if h < n_q + n_kv {
            let mut r = v.clone();
            for (i, &f) in s.inv_freq.iter().enumerate() {
                let (i1, i2) = if s.neox {
                    (i, i + hd / 2)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let a = pos as f64 * f as f64;
                let (cs, sn) = (a.cos() * s.af as f64, a.sin() * s.af as f64);
                r[i1] = v[i1] * cs - v[i2] * sn;
                r[i2] = v[i2] * cs + v[i1] * sn;
            }
            v = r;
        }
        out.extend(v);
    }
    out
}

/// A paged KV cache on the host: [block][kv_head][block_size][head_dim].
pub struct PagedKv<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub n_kv: usize,
    pub hd: usize,
    pub block_size: usize,
}

impl PagedKv<'_> {
    fn at(&self, table: &[u32], p: usize, kvh: usize) -> usize {
        let bs = self.block_size;
        ((table[p / bs] as usize * self.n_kv + kvh) * bs + p % bs) * self.hd
    }
}

/// Causal (and windowed, when window > 0) softmax attention of one query head `h` of n_q at
/// position `pos` over its sequence's cache (block table `table`).
#[allow(clippy::too_many_arguments)]
pub fn attn_ref(
    q: &[f32],
    kv: &PagedKv<'_>,
    table: &[u32],
    pos: usize,
    n_q: usize,
    h: usize,
    window: usize,
    scale: f64,
) -> Vec<f64> {
    let hd = kv.hd;
    let kvh = h / (n_q / kv.n_kv);
    let lo = if window > 0 {
        (pos + 1).saturating_sub(window)
    } else {
        0
    };
    let scores: Vec<f64> = (lo..=pos)
        .map(|p| {
            let at = kv.at(table, p, kvh);
            (0..hd)
                .map(|i| q[i] as f64 * kv.k[at + i] as f64)
                .sum::<f64>()
                * scale
        })
        .collect();
    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
    let z: f64 = e.iter().sum();
    (0..hd)
        .map(|i| {
            (lo..=pos)
                .zip(&e)
                .map(|(p, w)| w * kv.v[kv.at(table, p, kvh) + i] as f64)
                .sum::<f64>()
                / z
        })
        .collect()
}
