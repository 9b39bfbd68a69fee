//! Attention in a storage type other than bf16, as the backend runs it there: every row,
//! prefill or decode, through the split-KV kernel in windows of rows (and the reference kernel),
//! against float64. Paged K/V behind shuffled block tables, slots no sequence owns poisoned with
//! NaN, GQA 1 to 16, head dims 16 to 256, windows smaller and larger than the sequences.

use kiln_cuda::device::Gpu;
use kiln_cuda::kernels::{AttnCall, AttnInputs, KvView, Partials, DECODE_MAX_SPLITS};
use kiln_cuda::step_plan::{pack_step, StepLayout};
use kiln_cuda::StoreType;
use kiln_step::ChunkInput;

use super::common::{f32_bits, timed, Checks, Rng};
use super::reference::{attn_ref, PagedKv};
use super::stored_vec;

const BS: usize = 16;

struct Case {
    n_q: usize,
    n_kv: usize,
    hd: usize,
    window: usize,
    /// (start_pos, tokens) per chunk; one token = a decode row.
    chunks: Vec<(usize, usize)>,
}

/// Runs the split-KV kernel over rows 0..t in windows of `step` rows, as the backend does.
#[allow(clippy::too_many_arguments)]
fn split_rows(
    gpu: &Gpu,
    q: &kiln_cuda::store::StoreBuf,
    out: &kiln_cuda::store::StoreBuf,
    kv: KvView,
    inp: &AttnInputs,
    t: usize,
    step: usize,
    case: &Case,
    scale: f32,
) {
    let width = case.n_q * case.hd;
    let po = gpu
        .alloc::<f32>(step * case.n_q * DECODE_MAX_SPLITS * case.hd)
        .unwrap();
    let pm = gpu
        .alloc::<f32>(step * case.n_q * DECODE_MAX_SPLITS * 2)
        .unwrap();
    let part = Partials {
        o: po.ptr(),
        ml: pm.ptr(),
    };
    for r0 in (0..t).step_by(step) {
        let call = AttnCall {
            q: q.dev_ptr().row(r0, width).addr(),
            kv,
            inp: &inp.from_row(r0),
            out: out.dev_ptr().row(r0, width).addr(),
            n_q: case.n_q,
            hd: case.hd,
            window: case.window,
            scale,
        };
        gpu.decode_attn(call, part, step.min(t - r0)).unwrap();
    }
}

fn run_case(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, case: &Case) {
    let store = gpu.store;
    let (n_q, n_kv, hd) = (case.n_q, case.n_kv, case.hd);
    let name = format!("n_q={n_q} n_kv={n_kv} hd={hd} window={}", case.window);
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
                    kc[at + i] = store.round(rng.uniform(-1.0, 1.0));
                    vc[at + i] = store.round(rng.uniform(-1.0, 1.0));
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
    let q = stored_vec(rng, store, t * n_q * hd, 2.0);

    let step = gpu.alloc::<i32>(layout.len).unwrap();
    step.upload(0, &packed).unwrap();
    let (dq, dk, dv) = (
        gpu.alloc_store(q.len()).unwrap(),
        gpu.alloc_store(cache_len).unwrap(),
        gpu.alloc_store(cache_len).unwrap(),
    );
    dq.upload_f32(0, &q).unwrap();
    dk.upload_f32(0, &kc).unwrap();
    dv.upload_f32(0, &vc).unwrap();
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
        old_keys_ready: true,
    };
    let scale = 1.0 / (hd as f32).sqrt();
    let outs: Vec<_> = (0..3)
        .map(|_| {
            let o = gpu.alloc_store(q.len()).unwrap();
            o.fill_bytes(0xff).unwrap();
            o
        })
        .collect();
    // Windows of 5 rows (several launches, rows split across them) and all rows at once.
    let t_split = timed(gpu, || {
        split_rows(gpu, &dq, &outs[0], kv, &inp, t, 5, case, scale);
        Ok(())
    });
    split_rows(gpu, &dq, &outs[1], kv, &inp, t, t, case, scale);
    let t_ref = timed(gpu, || {
        let call = AttnCall {
            q: dq.ptr(),
            kv,
            inp: &inp,
            out: outs[2].ptr(),
            n_q,
            hd,
            window: case.window,
            scale,
        };
        gpu.ref_attn(call, t)
    });
    let split = outs[0].download_f32(gpu, 0, q.len()).unwrap();
    let whole = outs[1].download_f32(gpu, 0, q.len()).unwrap();
    c.identical(
        &format!("decode_attn {name}: rows in windows of 5 == all rows in one launch"),
        &f32_bits(&split),
        &f32_bits(&whole),
    );
    let slow = outs[2].download_f32(gpu, 0, q.len()).unwrap();
    let (atol, rtol) = match store {
        StoreType::F32 => (5e-5, 5e-5),
        _ => (1e-3, 2e-3),
    };
    let host_kv = PagedKv {
        k: &kc,
        v: &vc,
        n_kv,
        hd,
        block_size: BS,
    };
    let mut flat = 0;
    for &ci in &order {
        let (s, n) = case.chunks[ci];
        let (mut want, mut got_split, mut got_ref) = (Vec::new(), Vec::new(), Vec::new());
        for j in 0..n {
            for h in 0..n_q {
                let at = ((flat + j) * n_q + h) * hd;
                let q_row = &q[at..at + hd];
                want.extend(attn_ref(
                    q_row,
                    &host_kv,
                    &tables[ci],
                    s + j,
                    n_q,
                    h,
                    case.window,
                    scale as f64,
                ));
                got_split.extend_from_slice(&split[at..at + hd]);
                got_ref.extend_from_slice(&slow[at..at + hd]);
            }
        }
        let rows = format!("{name} chunk start={s} rows={n}");
        let ms = |s: f64| s * 1e3;
        let split_case = format!("decode_attn every row ({:.3}ms) {rows}", ms(t_split));
        c.close(&split_case, &got_split, &want, atol, rtol, 0.0);
        let ref_case = format!("ref_attn ({:.3}ms) {rows}", ms(t_ref));
        c.close(&ref_case, &got_ref, &want, atol, rtol, 0.0);
        flat += n;
    }
}

pub fn attention(gpu: &Gpu, rng: &mut Rng, c: &mut Checks) {
    let chunks = vec![(0, 150), (1000, 77), (5, 2), (4999, 1), (0, 1), (700, 1)];
    for (n_q, n_kv, hd, window) in [
        (8, 8, 64, 0),
        (16, 4, 128, 0),
        (16, 2, 128, 100),
        (8, 2, 256, 0),
        (8, 8, 32, 100_000),
        (12, 3, 64, 37),
        (32, 2, 64, 0),
        (4, 2, 16, 9),
    ] {
        let case = Case {
            n_q,
            n_kv,
            hd,
            window,
            chunks: chunks.clone(),
        };
        run_case(gpu, rng, c, &case);
    }
    // Long KV: a decode row at 16k and a short prefill chunk on top of 14k cached positions.
    let long = Case {
        n_q: 32,
        n_kv: 8,
        hd: 128,
        window: 0,
        chunks: vec![(16_383, 1), (14_000, 8)],
    };
    run_case(gpu, rng, c, &long);
}
