//! The row kernels and qkv_prepare in a storage type other than bf16.

use kiln_cuda::device::Gpu;
use kiln_cuda::kernels::{KvView, QkvKind};
use kiln_cuda::store::StoreBuf;

use super::common::{f32_bits, timed, Checks, Rng};
use super::reference::{qkv_ref, rmsnorm_ref, silu_mul_ref, QkvShape};
use super::{rounded, stored_vec};

fn upload(gpu: &Gpu, v: &[f32]) -> StoreBuf {
    let d = gpu.alloc_store(v.len()).unwrap();
    d.upload_f32(0, v).unwrap();
    d
}

fn poisoned(gpu: &Gpu, len: usize) -> StoreBuf {
    let d = gpu.alloc_store(len).unwrap();
    d.fill_bytes(0xff).unwrap();
    d
}

pub fn row_kernels(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    let store = gpu.store;
    let (atol, rtol) = rounded(store);

    // Embedding gather: exact.
    let (vocab, hidden, t) = (1003, 520, 37);
    let emb = stored_vec(rng, store, vocab * hidden, 1.0);
    let tokens: Vec<i32> = (0..t).map(|_| rng.below(vocab) as i32).collect();
    let d_emb = upload(gpu, &emb);
    let d_tok = gpu.alloc::<i32>(t).unwrap();
    d_tok.upload(0, &tokens).unwrap();
    let d_x = gpu.alloc::<f32>(t * hidden).unwrap();
    d_x.fill_bytes(0xff).unwrap();
    let secs = timed(gpu, || {
        gpu.embed_gather(d_x.ptr(), d_emb.ptr(), d_tok.ptr(), t, hidden, 1.0)
    });
    let want: Vec<f64> = tokens
        .iter()
        .flat_map(|&tk| emb[tk as usize * hidden..(tk as usize + 1) * hidden].iter())
        .map(|&v| v as f64)
        .collect();
    let got = d_x.download(gpu, 0, t * hidden).unwrap();
    c.close("embed_gather", &got, &want, 0.0, 0.0, secs);

    // RMSNorm with the residual add, and the final norm of selected rows.
    for (rows, hidden) in [(1, 4096), (7, 1000), (33, 8192), (3, 72)] {
        let x = rng.vec(rows * hidden, 2.0);
        let delta = rng.vec(rows * hidden, 2.0);
        let w = stored_vec(rng, store, hidden, 1.5);
        let (dx, dd) = (
            gpu.alloc::<f32>(x.len()).unwrap(),
            gpu.alloc::<f32>(x.len()).unwrap(),
        );
        dx.upload(0, &x).unwrap();
        dd.upload(0, &delta).unwrap();
        let (dw, dout) = (upload(gpu, &w), poisoned(gpu, x.len()));
        let eps = 1e-5;
        let secs = timed(gpu, || {
            gpu.rmsnorm_residual(dx.ptr(), dd.ptr(), dw.ptr(), dout.ptr(), rows, hidden, eps)
        });
        let sum: Vec<f64> = x.iter().zip(&delta).map(|(a, b)| (a + b) as f64).collect();
        let case = format!("rows={rows} hidden={hidden}");
        let got = dx.download(gpu, 0, x.len()).unwrap();
        c.close(
            &format!("rmsnorm_residual x {case}"),
            &got,
            &sum,
            1e-6,
            1e-6,
            secs,
        );
        let want: Vec<f64> = sum
            .chunks(hidden)
            .flat_map(|r| rmsnorm_ref(r, &w, eps))
            .collect();
        let got = dout.download_f32(gpu, 0, x.len()).unwrap();
        c.close(
            &format!("rmsnorm_residual out {case}"),
            &got,
            &want,
            atol,
            rtol,
            secs,
        );

        let sel: Vec<i32> = (0..rows).rev().step_by(2).map(|r| r as i32).collect();
        let dsel = gpu.alloc::<i32>(sel.len()).unwrap();
        dsel.upload(0, &sel).unwrap();
        let dfo = poisoned(gpu, sel.len() * hidden);
        dx.upload(0, &x).unwrap();
        let secs = timed(gpu, || {
            gpu.final_norm_rows(
                dx.ptr(),
                dd.ptr(),
                dsel.ptr(),
                dw.ptr(),
                dfo.ptr(),
                sel.len(),
                hidden,
                eps,
            )
        });
        let want: Vec<f64> = sel
            .iter()
            .flat_map(|&r| rmsnorm_ref(&sum[r as usize * hidden..][..hidden], &w, eps))
            .collect();
        let got = dfo.download_f32(gpu, 0, sel.len() * hidden).unwrap();
        c.close(
            &format!("final_norm_rows {case}"),
            &got,
            &want,
            atol,
            rtol,
            secs,
        );
    }

    // SwiGLU.
    let (rows, inter) = (19, 1336);
    let gu = rng.vec(rows * 2 * inter, 6.0);
    let dgu = gpu.alloc::<f32>(gu.len()).unwrap();
    dgu.upload(0, &gu).unwrap();
    let dact = poisoned(gpu, rows * inter);
    let secs = timed(gpu, || gpu.swiglu(dgu.ptr(), dact.ptr(), inter, rows));
    let want: Vec<f64> = (0..rows * inter)
        .map(|i| {
            let (r, j) = (i / inter, i % inter);
            silu_mul_ref(gu[r * 2 * inter + j], gu[r * 2 * inter + inter + j])
        })
        .collect();
    let got = dact.download_f32(gpu, 0, rows * inter).unwrap();
    c.close("swiglu", &got, &want, atol, rtol, secs);

    // f32 -> storage rounds to nearest even as the host does (f16 overflows to infinity,
    // subnormals survive); storage -> f32 is exact.
    let mut v = rng.vec(100_003, 3.0);
    v.extend([
        70_000.0,
        -65_520.0,
        65_504.0,
        1e-7,
        -3e-5,
        0.0,
        -0.0,
        f32::INFINITY,
    ]);
    let src = gpu.alloc::<f32>(v.len()).unwrap();
    src.upload(0, &v).unwrap();
    let dst = poisoned(gpu, v.len());
    gpu.f32_to_store(dst.ptr(), src.ptr(), v.len()).unwrap();
    let got = dst.download_f32(gpu, 0, v.len()).unwrap();
    let want: Vec<f32> = v.iter().map(|&x| store.round(x)).collect();
    c.identical("f32_to_store_copy", &f32_bits(&got), &f32_bits(&want));
    let back = gpu.alloc::<f32>(v.len()).unwrap();
    back.fill_bytes(0xff).unwrap();
    gpu.store_to_f32(back.ptr(), dst.ptr(), v.len()).unwrap();
    let back = back.download(gpu, 0, v.len()).unwrap();
    c.identical("store_to_f32_copy", &f32_bits(&back), &f32_bits(&want));

    // Dummy weights: the host's function rounded to the format, bit for bit; fills exact.
    let n = 1_000_003;
    let seed =
        kiln_model::dummy::dummy_seed(kiln_model::TensorId::layer(3, kiln_model::Role::Down));
    let d = poisoned(gpu, n);
    let secs = timed(gpu, || gpu.dummy_fill(d.ptr(), n, seed));
    let got = d.download_f32(gpu, 0, n).unwrap();
    let want: Vec<f32> = (0..n as u64)
        .map(|i| store.round(kiln_model::dummy::dummy_value(seed, i)))
        .collect();
    c.identical(
        &format!("dummy_fill n={n} ({:.3}ms)", secs * 1e3),
        &f32_bits(&got),
        &f32_bits(&want),
    );
    gpu.fill_store(d.ptr(), 1001, 1.0).unwrap();
    let got = d.download_f32(gpu, 0, 1002).unwrap();
    c.check(
        got[..1001].iter().all(|&x| x == 1.0) && got[1001] == want[1001],
        "fill_store 1.0 writes exactly its range".into(),
    );
}

pub fn qkv_prepare(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    let store = gpu.store;
    let (_, rtol) = rounded(store);
    // RoPE at positions up to 40k cancels: an absolute floor of a few ulps of the inputs.
    let atol = if store == kiln_cuda::StoreType::F32 {
        1e-5
    } else {
        1e-3
    };
    // (n_q, n_kv, hd, neox, bias, qk_norm, attention factor)
    for (n_q, n_kv, hd, neox, with_bias, qk_norm, af) in [
        (8, 8, 64, true, false, false, 1.0f32),
        (32, 8, 128, true, true, false, 1.0),
        (16, 2, 128, false, false, true, 1.0),
        (8, 1, 256, true, true, true, 1.2),
        (4, 2, 32, false, false, false, 1.0),
        (4, 2, 16, true, true, true, 1.0),
    ] {
        let (t, block_size, num_blocks, max_pos) = (23usize, 16usize, 64usize, 40_000usize);
        let heads = n_q + 2 * n_kv;
        let qkv = rng.vec(t * heads * hd, 3.0);
        let bias = with_bias.then(|| stored_vec(rng, store, heads * hd, 1.0));
        let qn = qk_norm.then(|| stored_vec(rng, store, hd, 1.5));
        let kn = qk_norm.then(|| stored_vec(rng, store, hd, 1.5));
        let theta = 10_000f64 + rng.uniform(0.0, 490_000.0) as f64;
        let inv_freq: Vec<f32> = (0..hd / 2)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / hd as f64)) as f32)
            .collect();
        let positions: Vec<i32> = (0..t).map(|_| rng.below(max_pos) as i32).collect();
        let mut slots: Vec<i32> = (0..(num_blocks * block_size) as i32).collect();
        rng.shuffle(&mut slots);
        slots.truncate(t);

        let up = |v: &Option<Vec<f32>>| v.as_ref().map(|v| upload(gpu, v));
        let (d_bias, d_qn, d_kn) = (up(&bias), up(&qn), up(&kn));
        let p = |d: &Option<StoreBuf>| d.as_ref().map_or(0, |d| d.ptr());
        let d_qkv = gpu.alloc::<f32>(qkv.len()).unwrap();
        d_qkv.upload(0, &qkv).unwrap();
        let d_freq = gpu.alloc::<f32>(hd / 2).unwrap();
        d_freq.upload(0, &inv_freq).unwrap();
        let d_rope = gpu.alloc::<f32>(max_pos * hd).unwrap();
        gpu.rope_table_build(d_rope.ptr(), d_freq.ptr(), max_pos, hd / 2, af)
            .unwrap();
        let (d_pos, d_slot) = (gpu.alloc::<i32>(t).unwrap(), gpu.alloc::<i32>(t).unwrap());
        d_pos.upload(0, &positions).unwrap();
        d_slot.upload(0, &slots).unwrap();
        let cache_len = num_blocks * n_kv * block_size * hd;
        let d_q = poisoned(gpu, t * n_q * hd);
        let (d_k, d_v) = (poisoned(gpu, cache_len), poisoned(gpu, cache_len));
        let kv = KvView {
            k: d_k.ptr(),
            v: d_v.ptr(),
            n_kv,
            block_size,
        };
        let eps = 1e-6;
        let secs = timed(gpu, || {
            gpu.qkv_prepare(
                d_qkv.ptr(),
                p(&d_bias),
                p(&d_qn),
                p(&d_kn),
                d_rope.ptr(),
                d_pos.ptr(),
                d_slot.ptr(),
                d_q.ptr(),
                kv,
                t,
                n_q,
                hd,
                neox,
                eps,
                QkvKind::Full,
                false,
            )
        });
        let q = d_q.download_f32(gpu, 0, t * n_q * hd).unwrap();
        let kc = d_k.download_f32(gpu, 0, cache_len).unwrap();
        let vc = d_v.download_f32(gpu, 0, cache_len).unwrap();
        let shape = QkvShape {
            n_q,
            n_kv,
            hd,
            neox,
            eps,
            af,
            inv_freq: &inv_freq,
        };
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for tok in 0..t {
            let row = &qkv[tok * heads * hd..(tok + 1) * heads * hd];
            let pos = positions[tok] as usize;
            want.extend(qkv_ref(
                row,
                bias.as_deref(),
                qn.as_deref(),
                kn.as_deref(),
                pos,
                &shape,
            ));
            got.extend_from_slice(&q[tok * n_q * hd..(tok + 1) * n_q * hd]);
            let slot = slots[tok] as usize;
            for cache in [&kc, &vc] {
                for h in 0..n_kv {
                    let at = ((slot / block_size * n_kv + h) * block_size + slot % block_size) * hd;
                    got.extend_from_slice(&cache[at..at + hd]);
                }
            }
        }
        let case = format!(
            "n_q={n_q} n_kv={n_kv} hd={hd} neox={neox} bias={with_bias} qk_norm={qk_norm} af={af}"
        );
        c.close(
            &format!("qkv_prepare {case}"),
            &got,
            &want,
            atol,
            rtol,
            secs,
        );
        let written: std::collections::HashSet<usize> =
            slots.iter().map(|&s| s as usize / block_size).collect();
        let untouched = (0..num_blocks)
            .filter(|b| !written.contains(b))
            .all(|b| kc[b * n_kv * block_size * hd].is_nan());
        c.check(
            untouched,
            format!("qkv_prepare {case}: blocks without a written slot left poisoned"),
        );
    }
}
