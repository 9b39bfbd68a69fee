//! Kernel contract for attention: flash prefill (tensor cores), split-KV decode + combine, and the
//! reference kernel, against a float64 host reference. Paged K/V behind shuffled block tables,
//! slots no sequence owns poisoned with NaN, outputs poisoned, GQA 1/2/4/8/16, head dims
//! 16/32/64/128/256, windows smaller and larger than the sequences, KV up to 32k.

mod common;

use common::{from_bf16, gpu_or_skip, rb, round_bf16, timed, to_bf16, Checks, Rng};
use kiln_cuda::device::Gpu;
use kiln_cuda::kernels::{AttnInputs, KvView, DECODE_MAX_SPLITS};
use kiln_cuda::step_plan::{pack_step, StepLayout};
use kiln_step::ChunkInput;

const BS: usize = 16;

struct Case {
    n_q: usize,
    n_kv: usize,
    hd: usize,
    window: usize,
    /// (start_pos, tokens) per chunk; one token = a decode row.
    chunks: Vec<(usize, usize)>,
}

/// out[t][h][:] in float64 for flat token t at position `pos`, reading the host cache.
#[allow(clippy::too_many_arguments)]
fn attn_ref(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    table: &[u32],
    pos: usize,
    case: &Case,
    h: usize,
    scale: f64,
) -> Vec<f64> {
    let (hd, n_kv) = (case.hd, case.n_kv);
    let kvh = h / (case.n_q / n_kv);
    let lo = if case.window > 0 {
        (pos + 1).saturating_sub(case.window)
    } else {
        0
    };
    let at = |p: usize| ((table[p / BS] as usize * n_kv + kvh) * BS + p % BS) * hd;
    let scores: Vec<f64> = (lo..=pos)
        .map(|p| {
            (0..hd)
                .map(|i| q[i] as f64 * kc[at(p) + i] as f64)
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
                .map(|(p, w)| w * vc[at(p) + i] as f64)
                .sum::<f64>()
                / z
        })
        .collect()
}

fn run_case(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, case: &Case) {
    let (n_q, n_kv, hd) = (case.n_q, case.n_kv, case.hd);
    let name = format!("n_q={n_q} n_kv={n_kv} hd={hd} window={}", case.window);
    // Shuffled blocks, each sequence taking what it needs.
    let need: Vec<usize> = case
        .chunks
        .iter()
        .map(|&(s, n)| (s + n).div_ceil(BS))
        .collect();
    let num_blocks = need.iter().sum::<usize>() + 7;
    let mut pool: Vec<u32> = (0..num_blocks as u32).collect();
    rng.shuffle(&mut pool);
    let mut tables = Vec::new();
    let mut next = 0;
    for &b in &need {
        tables.push(pool[next..next + b].to_vec());
        next += b;
    }
    // K/V for every position below each chunk's end; everything else NaN.
    let cache_len = num_blocks * n_kv * BS * hd;
    let (mut kc, mut vc) = (vec![f32::NAN; cache_len], vec![f32::NAN; cache_len]);
    for (ci, &(s, n)) in case.chunks.iter().enumerate() {
        for p in 0..s + n {
            for h in 0..n_kv {
                let at = ((tables[ci][p / BS] as usize * n_kv + h) * BS + p % BS) * hd;
                for i in 0..hd {
                    kc[at + i] = rb(rng.uniform(-1.0, 1.0));
                    vc[at + i] = rb(rng.uniform(-1.0, 1.0));
                }
            }
        }
    }
    let tokens: Vec<Vec<u32>> = case.chunks.iter().map(|&(_, n)| vec![1u32; n]).collect();
    let chunks: Vec<ChunkInput<'_>> = case
        .chunks
        .iter()
        .enumerate()
        .map(|(i, &(s, _))| ChunkInput {
            tokens: &tokens[i],
            start_pos: s,
            block_table: &tables[i],
            want_logits: true,
        })
        .collect();
    let max_tokens: usize = case.chunks.iter().map(|c| c.1).sum();
    let max_ctx = case.chunks.iter().map(|&(s, n)| s + n).max().unwrap();
    let layout = StepLayout::new(max_tokens, chunks.len(), max_ctx, BS, num_blocks, 2);
    let mut packed = vec![0i32; layout.len];
    let plan = pack_step(&chunks, &layout, &mut packed).unwrap();
    // Flat token order as packed: decode chunks first.
    let order: Vec<usize> = (0..chunks.len())
        .filter(|&i| chunks[i].tokens.len() == 1)
        .chain((0..chunks.len()).filter(|&i| chunks[i].tokens.len() > 1))
        .collect();
    let t = plan.n_tokens;
    let q = round_bf16(&rng.vec(t * n_q * hd, 2.0));

    let step = gpu.alloc::<i32>(layout.len).unwrap();
    step.upload(0, &packed).unwrap();
    let (dq, dk, dv) = (
        gpu.alloc::<u16>(q.len()).unwrap(),
        gpu.alloc::<u16>(cache_len).unwrap(),
        gpu.alloc::<u16>(cache_len).unwrap(),
    );
    dq.upload(0, &to_bf16(&q)).unwrap();
    dk.upload(0, &to_bf16(&kc)).unwrap();
    dv.upload(0, &to_bf16(&vc)).unwrap();
    let kv = KvView {
        k: dk.ptr(),
        v: dv.ptr(),
        n_kv,
        block_size: BS,
    };
    let inp = AttnInputs {
        positions: step.at(layout.positions),
        token_seq: step.at(layout.token_seq),
        bt_start: step.at(layout.bt_start),
        block_tables: step.at(layout.block_tables),
    };
    let scale = 1.0 / (hd as f32).sqrt();
    let (fast, slow) = (
        gpu.alloc::<u16>(q.len()).unwrap(),
        gpu.alloc::<u16>(q.len()).unwrap(),
    );
    fast.fill_bytes(0xff).unwrap();
    slow.fill_bytes(0xff).unwrap();
    let rows = plan.n_decode.max(1);
    let (po, pm) = (
        gpu.alloc::<f32>(rows * n_q * DECODE_MAX_SPLITS * hd)
            .unwrap(),
        gpu.alloc::<f32>(rows * n_q * DECODE_MAX_SPLITS * 2)
            .unwrap(),
    );
    let t_dec = timed(gpu, || {
        gpu.decode_attn(
            dq.ptr(),
            kv,
            &inp,
            po.ptr(),
            pm.ptr(),
            fast.ptr(),
            plan.n_decode,
            n_q,
            hd,
            case.window,
            scale,
        )
    });
    let t_flash = timed(gpu, || {
        gpu.flash_attn_with(
            true,
            dq.ptr(),
            kv,
            step.at(layout.tiles),
            plan.n_tiles,
            &inp,
            fast.ptr(),
            n_q,
            hd,
            case.window,
            scale,
        )
    });
    // One query head per CTA must give the same bits as two heads sharing K/V tiles.
    let single = gpu.alloc::<u16>(q.len()).unwrap();
    single.fill_bytes(0xff).unwrap();
    let t_single = timed(gpu, || {
        gpu.flash_attn_with(
            false,
            dq.ptr(),
            kv,
            step.at(layout.tiles),
            plan.n_tiles,
            &inp,
            single.ptr(),
            n_q,
            hd,
            case.window,
            scale,
        )
    });
    let t_ref = timed(gpu, || {
        gpu.ref_attn(
            dq.ptr(),
            kv,
            &inp,
            slow.ptr(),
            t,
            n_q,
            hd,
            case.window,
            scale,
        )
    });
    let prefill_at = plan.n_decode * n_q * hd;
    c.identical(
        &format!(
            "flash_attn one head per CTA ({:.3}ms) == head pairs ({:.3}ms) {name}",
            t_single * 1e3,
            t_flash * 1e3
        ),
        &single
            .download(gpu, prefill_at, q.len() - prefill_at)
            .unwrap(),
        &fast
            .download(gpu, prefill_at, q.len() - prefill_at)
            .unwrap(),
    );
    let fast = from_bf16(&fast.download(gpu, 0, q.len()).unwrap());
    let slow = from_bf16(&slow.download(gpu, 0, q.len()).unwrap());

    let mut flat = 0;
    for &ci in &order {
        let (s, n) = case.chunks[ci];
        let (mut want, mut got_fast, mut got_slow) = (Vec::new(), Vec::new(), Vec::new());
        for j in 0..n {
            for h in 0..n_q {
                let at = ((flat + j) * n_q + h) * hd;
                want.extend(attn_ref(
                    &q[at..at + hd],
                    &kc,
                    &vc,
                    &tables[ci],
                    s + j,
                    case,
                    h,
                    scale as f64,
                ));
                got_fast.extend_from_slice(&fast[at..at + hd]);
                got_slow.extend_from_slice(&slow[at..at + hd]);
            }
        }
        let kind = if n == 1 {
            format!("decode_attn ({:.3}ms all rows)", t_dec * 1e3)
        } else {
            format!("flash_attn ({:.3}ms all tiles)", t_flash * 1e3)
        };
        c.close(
            &format!("{kind} {name} chunk start={s} rows={n}"),
            &got_fast,
            &want,
            8e-3,
            1e-2,
            0.0,
        );
        c.close(
            &format!(
                "ref_attn ({:.3}ms) {name} chunk start={s} rows={n}",
                t_ref * 1e3
            ),
            &got_slow,
            &want,
            8e-3,
            1e-2,
            0.0,
        );
        flat += n;
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn attention_contract() {
    let Some(gpu) = gpu_or_skip("attention_contract") else {
        return;
    };
    let mut rng = Rng::new("attention_contract");
    let mut c = Checks::new("attention");
    let common_chunks = vec![(0, 150), (1000, 77), (5, 2), (4999, 1), (0, 1), (700, 1)];
    for (n_q, n_kv, hd, window) in [
        (8, 8, 64, 0),
        (16, 4, 128, 0),
        (16, 2, 128, 100),
        (8, 2, 256, 0),
        (8, 8, 32, 100_000),
        (12, 3, 64, 37),
        (32, 2, 64, 0),
    ] {
        run_case(
            &gpu,
            &mut rng,
            &mut c,
            &Case {
                n_q,
                n_kv,
                hd,
                window,
                chunks: common_chunks.clone(),
            },
        );
    }
    // Long KV: a decode row at 32k and a short prefill chunk on top of 30k cached positions.
    run_case(
        &gpu,
        &mut rng,
        &mut c,
        &Case {
            n_q: 32,
            n_kv: 8,
            hd: 128,
            window: 0,
            chunks: vec![(31_999, 1), (30_000, 8), (16_383, 1)],
        },
    );
    run_case(
        &gpu,
        &mut rng,
        &mut c,
        &Case {
            n_q: 32,
            n_kv: 8,
            hd: 128,
            window: 4096,
            chunks: vec![(31_999, 1), (30_000, 8)],
        },
    );
    c.finish();
}
