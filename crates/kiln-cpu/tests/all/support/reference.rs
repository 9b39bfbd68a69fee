//! A float64 forward pass written from the model definitions, sharing no code with the
//! backend: naive loops over whole sequences, no cache, no packing. The ground truth the
//! backend's logits are compared with.

use kiln_model::{ModelConfig, Role, RopeStyle, TensorId, WeightSource};

fn load(src: &dyn WeightSource, id: TensorId) -> Vec<f64> {
    src.load_f32(id)
        .unwrap()
        .data
        .into_iter()
        .map(f64::from)
        .collect()
}

/// `w` is `[out, in]`.
fn linear(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn rmsnorm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, g)| v * inv * g).collect()
}

/// Rotates each head; the angle is rounded to f32 as reference implementations compute it.
fn rope(x: &mut [f64], cfg: &ModelConfig, pos: usize) {
    let inv_freq = cfg.rope_inv_freq();
    let factor = cfg.rope_attention_factor() as f64;
    let half = cfg.head_dim / 2;
    for head in x.chunks_exact_mut(cfg.head_dim) {
        for (i, &f) in inv_freq.iter().enumerate() {
            let angle = (pos as f32 * f) as f64;
            let (c, s) = (angle.cos() * factor, angle.sin() * factor);
            let (a, b) = match cfg.rope_style {
                RopeStyle::Neox => (i, i + half),
                RopeStyle::Normal => (2 * i, 2 * i + 1),
            };
            let (xa, xb) = (head[a], head[b]);
            head[a] = xa * c - xb * s;
            head[b] = xb * c + xa * s;
        }
    }
}

/// Logits at every position of `tokens`, one row of `vocab_size` each.
pub fn reference_logits(src: &dyn WeightSource, tokens: &[u32]) -> Vec<Vec<f64>> {
    let cfg = src.config().clone();
    let (h, hd, eps) = (cfg.hidden_size, cfg.head_dim, cfg.rms_norm_eps as f64);
    let embd = load(src, TensorId::global(Role::TokenEmbd));
    let mut x: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| embd[t as usize * h..][..h].to_vec())
        .collect();
    let group = cfg.num_heads / cfg.num_kv_heads;

    for l in 0..cfg.num_layers {
        let w = |role| load(src, TensorId::layer(l, role));
        let (wq, wk, wv, wo) = (w(Role::Q), w(Role::K), w(Role::V), w(Role::O));
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, row) in x.iter().enumerate() {
            let xn = rmsnorm(row, &w(Role::AttnNorm), eps);
            let (mut q, mut k, mut v) = (linear(&wq, &xn), linear(&wk, &xn), linear(&wv, &xn));
            if cfg.qkv_bias {
                for (t, role) in [
                    (&mut q, Role::QBias),
                    (&mut k, Role::KBias),
                    (&mut v, Role::VBias),
                ] {
                    for (a, b) in t.iter_mut().zip(w(role)) {
                        *a += b;
                    }
                }
            }
            if cfg.qk_norm {
                let (qn, kn) = (w(Role::QNorm), w(Role::KNorm));
                q = q
                    .chunks_exact(hd)
                    .flat_map(|head| rmsnorm(head, &qn, eps))
                    .collect();
                k = k
                    .chunks_exact(hd)
                    .flat_map(|head| rmsnorm(head, &kn, eps))
                    .collect();
            }
            rope(&mut q, &cfg, pos);
            rope(&mut k, &cfg, pos);
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        for (pos, row) in x.iter_mut().enumerate() {
            let lo = cfg
                .sliding_window
                .map_or(0, |win| (pos + 1).saturating_sub(win));
            let mut attn = vec![0.0; cfg.num_heads * hd];
            for head in 0..cfg.num_heads {
                let kvh = head / group;
                let q = &qs[pos][head * hd..][..hd];
                let scores: Vec<f64> = (lo..=pos)
                    .map(|j| {
                        let k = &ks[j][kvh * hd..][..hd];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for (j, e) in (lo..=pos).zip(&exps) {
                    let v = &vs[j][kvh * hd..][..hd];
                    for d in 0..hd {
                        attn[head * hd + d] += e / sum * v[d];
                    }
                }
            }
            for (a, b) in row.iter_mut().zip(linear(&wo, &attn)) {
                *a += b;
            }
            let xn = rmsnorm(row, &w(Role::FfnNorm), eps);
            let (gate, up) = (linear(&w(Role::Gate), &xn), linear(&w(Role::Up), &xn));
            let act: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            for (a, b) in row.iter_mut().zip(linear(&w(Role::Down), &act)) {
                *a += b;
            }
        }
    }
    let norm = load(src, TensorId::global(Role::OutputNorm));
    let head = if cfg.tie_embeddings {
        embd
    } else {
        load(src, TensorId::global(Role::Output))
    };
    x.iter()
        .map(|row| linear(&head, &rmsnorm(row, &norm, eps)))
        .collect()
}
