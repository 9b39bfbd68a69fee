//! Kernel contract for attention: every prefill family (mma.sync flash_attn one head and two
//! heads per CTA; wgmma flash_sm90 plain and overlapped, on sm_90), both decode families
//! (decode_attn on CUDA cores, decode_mma on tensor cores) and the reference kernel, against
//! a float64 host reference. Paged K/V behind shuffled block tables, slots no sequence owns
//! poisoned with NaN, outputs poisoned, odd lengths, GQA 1/2/3/4/8/16, head dims 16-256 and 512
//! (the wide kernels of Gemma 4's full layers), windows smaller and larger than the sequences,
//! KV up to 128k, the rows of a speculative verify step.
//! Bit for bit: the variants of a family agree; a decode row alone == in its batch (and in its
//! verify step); a prefill chunk split in two == whole. `planted_bugs_fail` loads kernels with a
//! bug planted in their text and checks that this contract catches each one.

use crate::common;
use crate::common::attn;

use attn::{Case, Chunk, Setup, Step};
use common::{from_bf16, gpu_or_skip, Checks, Rng};
use kiln_cuda::attn_launch::{
    DecodeKernel, FlashKernel, DECODE_MMAT_HEAD_DIMS, DECODE_MMA_DEEP_HEAD_DIMS,
    DECODE_MMA_HEAD_DIMS, FLASH_SM90_HEAD_DIMS,
};
use kiln_cuda::attn_wide::WIDE_HEAD_DIMS;
use kiln_cuda::device::Gpu;
use kiln_cuda::kernels::{AttnCall, Partials};
use kiln_cuda::switches::DecodeFold;

mod cases;
mod planted;

use cases::cases;

/// One kernel family and variant.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Ref,
    Decode(DecodeKernel),
    Flash(FlashKernel),
    /// flash_wide.cu for 512-wide heads, in the split variant (the default) or the one that
    /// recomputes the scores in each half (KILN_FLASH_WIDE=recompute), each named explicitly:
    /// `Flash` at a wide head runs whichever the switch selects.
    FlashWide {
        split: bool,
    },
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Ref => "ref_attn".into(),
            Kind::Decode(DecodeKernel::Simt) => "decode_attn".into(),
            Kind::Decode(DecodeKernel::Mma {
                fold,
                early,
                ahead,
                cols,
                tr,
                deep,
            }) => {
                format!(
                    "decode_mma{}{} fold={fold:?} early={} ahead={} cols={}",
                    if tr { "t" } else { "" },
                    if deep { " deep" } else { "" },
                    early as u8,
                    ahead as u8,
                    cols as u8
                )
            }
            Kind::Flash(FlashKernel::Sm80 { pairs }) => format!("flash_attn pairs={}", pairs as u8),
            Kind::FlashWide { split: true } => "flash_wide split".into(),
            Kind::FlashWide { split: false } => "flash_wide recompute".into(),
            Kind::Flash(FlashKernel::Sm90 {
                overlap,
                pingpong,
                kv_group,
            }) => {
                format!(
                    "flash_sm90 overlap={} pingpong={} kv_group={kv_group}",
                    overlap as u8, pingpong as u8
                )
            }
        }
    }

    /// Whether this kind runs on the rows of a chunk of `rows` tokens.
    fn serves(self, rows: usize) -> bool {
        match self {
            Kind::Ref => true,
            Kind::Decode(_) => rows == 1,
            Kind::Flash(_) | Kind::FlashWide { .. } => rows > 1,
        }
    }
}

/// flash_sm90 as named by its three choices.
fn sm90(overlap: bool, pingpong: bool, kv_group: usize) -> Kind {
    Kind::Flash(FlashKernel::Sm90 {
        overlap,
        pingpong,
        kv_group,
    })
}

/// The kernels one test process checks (a kernel that faults takes its process's context
/// with it, so each new family runs in a test of its own).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    /// ref_attn, decode_attn and flash_attn: the kernels that ran before.
    First,
    DecodeMma,
    FlashSm90,
}

/// decode_mma through the combine that gives a thread each column (`KILN_COMBINE_COLS=0`).
const ROWS_COMBINE: Kind = Kind::Decode(DecodeKernel::Mma {
    fold: DecodeFold::Never,
    early: true,
    ahead: false,
    cols: false,
    tr: false,
    deep: false,
});

/// decode_mma with deep rings (`KILN_DECODE_DEEP=1`), the transposed step or the first form.
fn deep(fold: DecodeFold, tr: bool) -> Kind {
    Kind::Decode(DecodeKernel::Mma {
        fold,
        early: true,
        ahead: false,
        cols: true,
        tr,
        deep: true,
    })
}

/// decode_mma's transposed step (`KILN_DECODE_TRANSPOSE=1`) with the fold given.
fn mmat(fold: DecodeFold) -> Kind {
    Kind::Decode(DecodeKernel::Mma {
        fold,
        early: true,
        ahead: false,
        cols: true,
        tr: true,
        deep: false,
    })
}

/// The kinds of `family` that can run `case` on this GPU.
fn kinds(gpu: &Gpu, case: &Case, family: Family) -> Vec<Kind> {
    let mut k = Vec::new();
    if family == Family::First {
        k.extend([
            Kind::Ref,
            Kind::Decode(DecodeKernel::Simt),
            Kind::Flash(FlashKernel::Sm80 { pairs: true }),
            Kind::Flash(FlashKernel::Sm80 { pairs: false }),
        ]);
        if WIDE_HEAD_DIMS.contains(&case.hd) {
            k.extend([true, false].map(|split| Kind::FlashWide { split }));
        }
    }
    let wide_mma = WIDE_HEAD_DIMS.contains(&case.hd);
    if family == Family::DecodeMma && (DECODE_MMA_HEAD_DIMS.contains(&case.hd) || wide_mma) {
        // The launcher's choice, then the variants by name (512-wide heads never fold, nor
        // take the early loads or the scores ahead), the combine a thread a column among
        // them: the same bits all of them.
        k.push(Kind::Decode(DecodeKernel::Mma {
            fold: DecodeFold::Auto,
            early: true,
            ahead: false,
            cols: true,
            tr: false,
            deep: false,
        }));
        k.push(ROWS_COMBINE);
        if !wide_mma {
            // Each fold by name, the combine's way with every load after the wait, and with the
            // scores one step ahead (taken by launches that do not fold, at head dims that have
            // the entry: elsewhere the plain kernel runs and the comparison holds trivially).
            for (fold, early, ahead) in [
                (DecodeFold::Always, true, false),
                (DecodeFold::Never, true, false),
                (DecodeFold::Never, false, false),
                (DecodeFold::Never, true, true),
            ] {
                k.push(Kind::Decode(DecodeKernel::Mma {
                    fold,
                    early,
                    ahead,
                    cols: true,
                    tr: false,
                    deep: false,
                }));
            }
        }
    }
    // The transposed step (its own bits): the launcher's choice and each fold by name.
    if family == Family::DecodeMma
        && DECODE_MMAT_HEAD_DIMS.contains(&case.hd)
        && gpu.has_func(&format!("decode_mmat_hd{}", case.hd))
    {
        k.extend([DecodeFold::Auto, DecodeFold::Always, DecodeFold::Never].map(mmat));
    }
    // Deep rings, both forms (launches that fold keep the shallow ones).
    if family == Family::DecodeMma
        && DECODE_MMA_DEEP_HEAD_DIMS.contains(&case.hd)
        && gpu.has_func(&format!("decode_mma_deep_hd{}", case.hd))
    {
        k.extend([
            deep(DecodeFold::Never, false),
            deep(DecodeFold::Never, true),
        ]);
    }
    let even = (case.n_q / case.n_kv).is_multiple_of(2);
    let sm90_here = gpu.has_func(&format!("flash_sm90_hd{}", case.hd));
    if family == Family::FlashSm90 && wide_mma && sm90_here {
        // 512-wide heads: one kernel (flash_sm90_wide.cu, one head a CTA, any group), in
        // one group and in groups of one KV head.
        k.push(sm90(false, false, 0));
        if case.n_kv > 1 {
            k.push(sm90(false, false, 1));
        }
    } else if family == Family::FlashSm90
        && even
        && FLASH_SM90_HEAD_DIMS.contains(&case.hd)
        && sm90_here
    {
        // Plain, overlapped, overlapped with the grid in groups of one KV head (the order
        // KILN_FLASH_L2 picks for long spans: every tile and pair still run once), and (last:
        // a scheduling bug would hang rather than miscompute) the warpgroups taking turns.
        k.extend([sm90(false, false, 0), sm90(true, false, 0)]);
        if case.n_kv > 1 {
            k.push(sm90(true, false, 1));
        }
        k.push(sm90(true, true, 0));
    }
    k
}

/// Runs `kind` over the rows of `step` it serves (its output elsewhere stays poisoned).
fn run(gpu: &Gpu, s: &Setup, step: &Step, kind: Kind) -> (Vec<u16>, f64) {
    let hd = s.case.hd;
    let inp = step.inputs();
    let (po, pm) = step.partials(gpu);
    let part = Partials {
        o: po.ptr(),
        ml: pm.ptr(),
    };
    step.run(gpu, |out| {
        let call = AttnCall {
            q: step.dq.ptr(),
            kv: s.kv(),
            inp: &inp,
            out,
            n_q: s.case.n_q,
            hd,
            window: s.case.window,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        match kind {
            Kind::Ref => gpu.ref_attn(call, step.flat.len()),
            Kind::Decode(k) => gpu.decode_attn_with(k, call, part, step.n_decode()),
            Kind::FlashWide { split } => gpu.flash_attn_wide_with(split, call, step.tiles()),
            Kind::Flash(k) => gpu.flash_attn_kernel(k, call, step.tiles()),
        }
    })
}

/// The float64 reference of every row of chunks 0..n (rows x heads x hd per chunk).
fn references(s: &Setup, n: usize) -> Vec<Vec<f64>> {
    let chunk = |ci: usize| -> Vec<f64> {
        (0..s.case.chunks[ci].rows)
            .flat_map(|j| (0..s.case.n_q).flat_map(move |h| s.reference(ci, j, h)))
            .collect()
    };
    // Chunks on every core: the long cases' references (128k keys) are most of the test's time.
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(n.max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::OnceLock<Vec<f64>>> = (0..n).map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let ci = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if ci >= n {
                    break;
                }
                let _ = slots[ci].set(chunk(ci));
            });
        }
    });
    slots
        .into_iter()
        .map(|r| r.into_inner().expect("every chunk's reference"))
        .collect()
}

/// Compares `kind`'s output for the chunks it serves with float64; one line per chunk.
fn against_f64(
    s: &Setup,
    refs: &[Vec<f64>],
    step: &Step,
    kind: Kind,
    out: &[u16],
    secs: f64,
) -> Vec<(bool, String)> {
    let (n_q, hd) = (s.case.n_q, s.case.hd);
    let got = from_bf16(out);
    let mut lines = Vec::new();
    let mut chunks: Vec<usize> = step.flat.iter().map(|&(ci, _)| ci).collect();
    chunks.dedup();
    for ci in chunks {
        let c = s.case.chunks[ci];
        if !kind.serves(c.rows) {
            continue;
        }
        let mut worst = 0f64;
        let mut bad = 0usize;
        for j in 0..c.rows {
            let f = step.flat_of(ci, j).unwrap();
            for h in 0..n_q {
                let want = &refs[ci][(j * n_q + h) * hd..(j * n_q + h + 1) * hd];
                let at = (f * n_q + h) * hd;
                for (i, &w) in want.iter().enumerate() {
                    let g = got[at + i] as f64;
                    let err = (g - w).abs();
                    if !g.is_finite() || err > 8e-3 + 1e-2 * w.abs() {
                        bad += 1;
                    }
                    worst = if g.is_finite() {
                        worst.max(err)
                    } else {
                        f64::INFINITY
                    };
                }
            }
        }
        lines.push((
            bad == 0,
            format!(
                "{} ({:.3}ms) {} chunk start={} rows={}: max_err={worst:.3e} bad={bad}",
                kind.name(),
                secs * 1e3,
                s.case.name(),
                c.start,
                c.rows
            ),
        ));
    }
    lines
}

/// Every check of one case.
fn run_case(gpu: &Gpu, rng: &mut Rng, c: &mut Checks, case: &Case, family: Family) {
    let kinds = kinds(gpu, case, family);
    if kinds.is_empty() {
        return;
    }
    // Each prefill chunk of 4 rows or more also split in two (halves of 2 rows or more), its
    // halves packed together into a step of their own.
    let mut case = case.clone();
    let main = case.chunks.len();
    let mut halves = Vec::new();
    for ci in 0..main {
        let Chunk { start, rows, table } = case.chunks[ci];
        if rows >= 4 {
            let a = (rows / 3).max(2) | 1;
            let a = if rows - a < 2 { 2 } else { a };
            halves.push((ci, case.chunks.len(), a));
            case.chunks.push(Chunk {
                start,
                rows: a,
                table,
            });
            case.chunks.push(Chunk {
                start: start + a,
                rows: rows - a,
                table,
            });
        }
    }
    let s = Setup::new(gpu, rng, &case);
    let all: Vec<usize> = (0..main).collect();
    let step = s.step(gpu, &all);
    let name = case.name();
    let refs = references(&s, main);
    let mut outs = Vec::new();
    for &kind in &kinds {
        let (out, secs) = run(gpu, &s, &step, kind);
        for (ok, line) in against_f64(&s, &refs, &step, kind, &out, secs) {
            c.check(ok, line);
        }
        outs.push((kind, out));
    }
    // Variants of one family: the same bits on the rows they serve.
    let prefill_at = step.n_decode() * case.n_q * case.hd;
    let mma = |fold| {
        Kind::Decode(DecodeKernel::Mma {
            fold,
            early: true,
            ahead: false,
            cols: true,
            tr: false,
            deep: false,
        })
    };
    let late = Kind::Decode(DecodeKernel::Mma {
        fold: DecodeFold::Never,
        early: false,
        ahead: false,
        cols: true,
        tr: false,
        deep: false,
    });
    let ahead = |fold| {
        Kind::Decode(DecodeKernel::Mma {
            fold,
            early: true,
            ahead: true,
            cols: true,
            tr: false,
            deep: false,
        })
    };
    for (a, b) in [
        (
            Kind::Flash(FlashKernel::Sm80 { pairs: true }),
            Kind::Flash(FlashKernel::Sm80 { pairs: false }),
        ),
        (sm90(true, false, 0), sm90(false, false, 0)),
        (sm90(true, false, 1), sm90(false, false, 0)),
        (sm90(true, true, 0), sm90(false, false, 0)),
        // decode_mma folding its splits itself and through the combine.
        (mma(DecodeFold::Always), mma(DecodeFold::Never)),
        (mma(DecodeFold::Auto), mma(DecodeFold::Never)),
        // Its first K/V steps before the wait or after it.
        (mma(DecodeFold::Never), late),
        // The scores one step ahead or in their own step.
        (ahead(DecodeFold::Never), mma(DecodeFold::Never)),
        // The combine a thread a column or a thread a (column, chain) (512-wide heads: the
        // launcher's choice is the latter, the other pair finds no such kind).
        (ROWS_COMBINE, mma(DecodeFold::Never)),
        (ROWS_COMBINE, mma(DecodeFold::Auto)),
        // The transposed step folding its splits itself and through the combine.
        (mmat(DecodeFold::Always), mmat(DecodeFold::Never)),
        (mmat(DecodeFold::Auto), mmat(DecodeFold::Never)),
        // Deep rings or shallow ones.
        (deep(DecodeFold::Never, false), mma(DecodeFold::Never)),
        (deep(DecodeFold::Never, true), mmat(DecodeFold::Never)),
    ] {
        // The rows the kind serves: the decode rows first, then the prefill rows.
        let find = |k: Kind| {
            outs.iter().find(|(kk, _)| *kk == k).map(|(_, o)| match k {
                Kind::Decode(_) => &o[..prefill_at],
                _ => &o[prefill_at..],
            })
        };
        if let (Some(x), Some(y)) = (find(a), find(b)) {
            c.identical(&format!("{} == {} {name}", a.name(), b.name()), x, y);
        }
    }
    // A decode row alone gives the bits it gives in the batch (with its verify neighbours);
    // the late loads, the scores ahead and the other combine are checked against their base
    // kinds above, on the whole batch, and skip this (a row alone per kind is most of the
    // test's launches).
    let alone_checked = |k: &Kind| match k {
        Kind::Decode(DecodeKernel::Mma {
            early, ahead, cols, ..
        }) => *early && !*ahead && *cols,
        Kind::Decode(_) => true,
        _ => false,
    };
    for (kind, out) in outs.iter().filter(|(k, _)| alone_checked(k)) {
        let mut same = true;
        let mut rows = 0;
        for ci in (0..main).filter(|&ci| case.chunks[ci].rows == 1) {
            let alone = s.step(gpu, &[ci]);
            let (o, _) = run(gpu, &s, &alone, *kind);
            same &= alone.row(&o, 0) == step.row(out, step.flat_of(ci, 0).unwrap());
            rows += 1;
        }
        c.check(
            same,
            format!(
                "{} {rows} decode rows alone == in the batch {name}",
                kind.name()
            ),
        );
    }
    // A prefill chunk split in two gives the bits of the whole chunk.
    if !halves.is_empty() {
        let which: Vec<usize> = halves.iter().flat_map(|&(_, h, _)| [h, h + 1]).collect();
        let split = s.step(gpu, &which);
        let flash = |k: &Kind| matches!(k, Kind::Flash(_) | Kind::FlashWide { .. });
        for (kind, out) in outs.iter().filter(|(k, _)| flash(k)) {
            let (o, _) = run(gpu, &s, &split, *kind);
            let mut same = true;
            for &(ci, h, a) in &halves {
                for j in 0..case.chunks[ci].rows {
                    let (hc, hj) = if j < a { (h, j) } else { (h + 1, j - a) };
                    same &= split.row(&o, split.flat_of(hc, hj).unwrap())
                        == step.row(out, step.flat_of(ci, j).unwrap());
                }
            }
            c.check(
                same,
                format!(
                    "{} {} chunks split in two == whole {name}",
                    kind.name(),
                    halves.len()
                ),
            );
        }
    }
}

fn contract(test: &str, family: Family) {
    let Some(gpu) = gpu_or_skip(test) else {
        return;
    };
    if family == Family::FlashSm90 && !gpu.has_func("flash_sm90_hd128") {
        eprintln!("SKIP {test}: flash_sm90 is built for sm_90 devices only");
        return;
    }
    let mut rng = Rng::new(test);
    let mut c = Checks::new(test);
    for case in cases().into_iter().filter(|c| head_dim_wanted(c.hd)) {
        run_case(&gpu, &mut rng, &mut c, &case, family);
    }
    c.finish();
}

/// KILN_ATTN_HEAD_DIMS=512,256 limits the GPU tests to cases (and planted bugs) of those head
/// dims, for a short call about some kernels (gemma-gpu.sh: the wide ones); unset: all.
fn head_dim_wanted(hd: usize) -> bool {
    match std::env::var("KILN_ATTN_HEAD_DIMS") {
        Ok(v) => v.split(',').any(|d| d.trim().parse() == Ok(hd)),
        Err(_) => true,
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn attention_contract() {
    contract("attention_contract", Family::First);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn attention_contract_decode_mma() {
    contract("attention_contract_decode_mma", Family::DecodeMma);
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn attention_contract_flash_sm90() {
    contract("attention_contract_flash_sm90", Family::FlashSm90);
}
