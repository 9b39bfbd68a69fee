//! The attention contract's planted bugs: each planted in a kernel's text, the module built with
//! it, and the contract run on a case where the bug shows; every one must be caught.

use super::cases::verify;
use super::*;
use crate::common::planted::{planted_module, sources_with};
use kiln_cuda::kernel_sources::KernelSource;

/// Modules with one planted bug each: (module, text, replacement).
const PLANTED: &[(&str, &str, &str)] = &[
    // A decode row also sees the key just past its own position.
    (
        "decode_mma",
        "(kp < len_a && kp >= first_a)",
        "(kp <= len_a && kp >= first_a)",
    ),
    // A warp serving several splits skips every other one of its share (seen folding, on the
    // batch of 128 decode rows, and through the combine at batch 1 deep in the cache).
    (
        "decode_mma",
        "stride = (int)gridDim.x * DM_WARPS;",
        "stride = 2 * (int)gridDim.x * DM_WARPS;",
    ),
    // The fold scales a split's partial by the running state's factor (decode_split.cuh, so
    // in the kernel's fold and the combine's alike).
    ("decode_mma", "__fmul_rn(part, f.b)", "__fmul_rn(part, f.a)"),
    // The combine a thread a column (the contract's `cols=0` kind) folds each split of a
    // full batch with its neighbour's partial.
    (
        "decode_mma",
        "dm_fold(O[j % DM_CHAINS], v[j],",
        "dm_fold(O[j % DM_CHAINS], v[j ^ 1],",
    ),
    // A warp's ring hands out a stage before every lane has read it: the load of the step
    // NST - 1 ahead goes into the stage being computed.
    (
        "decode_mma",
        "bf16_t* sk = sk0 + (issued % NST) * 2 * DM_STEP * LD;",
        "bf16_t* sk = sk0 + ((issued + 1) % NST) * 2 * DM_STEP * LD;",
    ),
    // A lean step (DM_LEAN) reads every KV head's rows from the first head's.
    (
        "decode_mma_lean",
        "table[k0 >> bs_shift] * (u32)n_kv + (u32)kvh)",
        "table[k0 >> bs_shift] * (u32)n_kv)",
    ),
    // A split's short last step is scored unmasked, as if the rows saw all of its keys.
    ("decode_mma_lean", "k0 + DM_STEP <= in_hi;", "k0 < in_hi;"),
    // The column-wise combine's prefix maxima stop at four splits of a chain.
    (
        "decode_mma",
        "off = DM_CHAINS; off < 32;",
        "off = DM_CHAINS; off < 16;",
    ),
    // The column-wise combine folds each split's maximum into L in place of its sum.
    (
        "decode_mma",
        "L = dm_fold(L, s_ml[s].y, f);",
        "L = dm_fold(L, s_ml[s].x, f);",
    ),
    // The transposed step (decode_mmat.cuh) gives keys 8-15 the probabilities of keys 0-7.
    (
        "decode_mma",
        "movmatrix_trans(pack_bf16x2(s[2], s[3]))",
        "movmatrix_trans(pack_bf16x2(s[0], s[1]))",
    ),
    // The transposed step sums each slot's l over half of its column's lanes.
    (
        "decode_mma",
        "x < (TR ? 32 : 4); x <<= 1)",
        "x < (TR ? 16 : 4); x <<= 1)",
    ),
    // A prefill row no longer sees its own key.
    (
        "flash_sm90",
        "const bool ok = kp <= qp &&",
        "const bool ok = kp < qp &&",
    ),
    // The copy into shared memory forgets the swizzle wgmma reads.
    ("flash_sm90", "(((c & 7) ^ (r & 7)) << 4)", "((c & 7) << 4)"),
    // Q's register fragments take row ra's columns for row rb in the first half of each slice.
    (
        "flash_sm90",
        "qf[4 * kk + 1] = ok_b ? row_b[8 * kk + t] : 0u;",
        "qf[4 * kk + 1] = ok_b ? row_a[8 * kk + t] : 0u;",
    ),
    // The wgmma kernel of 512-wide heads adds its own half's scores twice, not the other's
    // (a pseudo-module: flash_sm90 run on the wide case).
    (
        "flash_sm90_wide",
        "const float4 x = other[j * 128 + tid];",
        "const float4 x = mine[j * 128 + tid];",
    ),
    // The wgmma kernel of 512-wide heads copies the second half of each K and V row over
    // the first.
    (
        "flash_sm90_wide",
        "cp_async_16f(d + SECOND, a + 512);",
        "cp_async_16f(d + SECOND, a);",
    ),
    // The second half of a 512-wide head's columns reads the first half of V.
    (
        "flash_wide",
        "vc + head + (ok ? col0 + c * 8 : 0)",
        "vc + head + (ok ? c * 8 : 0)",
    ),
    // The split wide flash kernel forgets the second half of the head's scores.
    (
        "flash_wide",
        "__fadd_rn(first_half[at], second_half[at])",
        "first_half[at]",
    ),
    // The wide tensor-core decode keeps only the first quarter of the head in its scores.
    (
        "decode_mma_wide",
        "for (int w = 1; w < DMW_WARPS; ++w) v = __fadd_rn(v, sp[w * 16 * DMW_LDS + at]);",
        "",
    ),
    // A CTA of the CUDA-core decode serving several splits skips every other one of its share.
    (
        "decode_attn",
        "split += gridDim.x)",
        "split += 2 * gridDim.x)",
    ),
    // A CTA of the wide decode serving several splits skips every other one of its share.
    (
        "decode_wide",
        "split += gridDim.x)",
        "split += 2 * gridDim.x)",
    ),
    // Keys past a wide decode split's end (the last key, loaded again) are counted.
    (
        "decode_wide",
        "s[h][j] = (k0 + j < hi) ? d : KILN_NEG_INF;",
        "s[h][j] = d;",
    ),
];

/// `body` with only those lines invoking the entry macro `mac` that contain `keep`: a planted
/// module compiles only the entries its case runs (a fraction of NVRTC's time).
fn keep_entries(body: &str, mac: &str, keep: &str) -> String {
    body.lines()
        .filter(|l| !l.starts_with(mac) || l.contains(keep))
        .flat_map(|l| [l, "\n"])
        .collect()
}

/// Pseudo-modules of decode_mma for paths a switch chooses: their bugs are planted in
/// decode_mma with these texts replaced as well, so that they are seen whatever the switch
/// says. DM_LEAN is a launch flag (KILN_DECODE_LEAN, on by default). (Both combines are
/// kinds of the contract by name: their bugs need no such module.)
const FORCED: &[(&str, &[(&str, &str)])] = &[(
    "decode_mma_lean",
    &[("lean = flags & DM_LEAN;", "lean = true;")],
)];

/// The module a planted module's text comes from.
fn base(module: &str) -> &str {
    match module {
        "flash_sm90_wide" => "flash_sm90",
        _ if FORCED.iter().any(|(m, _)| *m == module) => "decode_mma",
        _ => module,
    }
}

/// `module` with `from` replaced by `to` ([`planted_module`]); the tensor-core families keep
/// only their head-dim-128 entries, all the planted case runs.
fn planted(module: &str, from: &str, to: &str) -> KernelSource {
    let mut src = planted_module(base(module), from, to);
    for (_, texts) in FORCED.iter().filter(|(m, _)| *m == module) {
        let mut body = src.body.to_string();
        for (off, on) in texts.iter() {
            assert_eq!(body.matches(off).count(), 1, "decode_mma: `{off}`");
            body = body.replace(off, on);
        }
        src.body = Box::leak(body.into_boxed_str());
    }
    let kept = match module {
        // The 512-wide kernel is no FS_ENTRY: keep none of those.
        "flash_sm90_wide" => keep_entries(src.body, "FS_ENTRY(", "(none)"),
        _ => match base(module) {
            "flash_sm90" => keep_entries(src.body, "FS_ENTRY(", "(flash_sm90_hd128,"),
            "decode_mma" => keep_entries(src.body, "DM_ENTRY(", "_hd128,"),
            _ => return src,
        },
    };
    src.body = Box::leak(kept.into_boxed_str());
    src
}

/// Without a GPU: each planted text occurs once, and with NVRTC each planted module compiles
/// for sm_90 into other machine code than the module's and still exports the entries the
/// planted case launches.
#[test]
fn planted_modules_compile() {
    for &(module, from, to) in PLANTED {
        let src = &planted(module, from, to);
        let entries = src.entries().expect("entries of the planted module");
        let needed: &[&str] = match module {
            "flash_sm90_wide" => &["flash_sm90_hd512"],
            _ => match base(module) {
                "flash_sm90" => &["flash_sm90_hd128"],
                "decode_mma" => &[
                    "decode_mma_hd128",
                    "decode_mma_combine",
                    "decode_mma_combine_cols",
                ],
                _ => &[],
            },
        };
        for e in needed {
            assert!(entries.iter().any(|x| x == e), "{module}.cu: {e} missing");
        }
        common::planted::assert_planted_compiles(src, kiln_cuda::StoreType::Bf16, to);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn planted_bugs_fail() {
    let Some(gpu) = gpu_or_skip("planted_bugs_fail") else {
        return;
    };
    let mut rng = Rng::new("planted_bugs_fail");
    let mut c = Checks::new("planted_bugs_fail");
    let mut case = cases().remove(1);
    case.chunks.extend(verify(3000, 3, case.chunks.len()));
    let wide = cases()
        .into_iter()
        .find(|c| c.hd == 512 && c.window == 37)
        .expect("a windowed case of head dim 512");
    let many = |hd| {
        cases()
            .into_iter()
            .find(|c| c.chunks.len() == 128 && c.hd == hd)
            .expect("a batch of 128 decode rows")
    };
    let (many, many_wide) = (many(128), many(512));
    // The case a planted bug runs on: a batch of 128 decode rows for bugs that show only where
    // a CTA or warp serves several splits (the split loops' stride, a warp's ring), the wide
    // kernels' own case for their other bugs, else the common one.
    let several_splits = |to: &str| to.contains("gridDim") || to.contains("issued");
    let case_for = |module: &str, to: &str| match (several_splits(to), module.ends_with("_wide")) {
        (true, false) => &many,
        (true, true) => &many_wide,
        (false, true) => &wide,
        (false, false) => &case,
    };
    let wanted = |module: &str| {
        let hd = if module.ends_with("_wide") {
            wide.hd
        } else {
            case.hd
        };
        head_dim_wanted(hd) && (base(module) != "flash_sm90" || gpu.has_func("flash_sm90_hd128"))
    };
    let modules: Vec<_> = PLANTED
        .iter()
        .filter(|(module, _, _)| wanted(module))
        .map(|&(module, from, to)| planted(module, from, to))
        .collect();
    crate::common::planted::prebuild(&modules, gpu.arch, kiln_cuda::StoreType::Bf16);
    for &(module, from, to) in PLANTED {
        let case = case_for(module, to);
        if !head_dim_wanted(case.hd) {
            continue;
        }
        if base(module) == "flash_sm90" && !gpu.has_func("flash_sm90_hd128") {
            eprintln!("SKIP planted bug in {module}.cu: no sm_90 device");
            continue;
        }
        let sources = sources_with(planted(module, from, to));
        let bad = Gpu::with_sources(0, kiln_cuda::StoreType::Bf16, &sources)
            .expect("loading the planted module");
        let s = Setup::new(&bad, &mut rng, case);
        let step = s.step(&bad, &(0..case.chunks.len()).collect::<Vec<_>>());
        let refs = references(&s, case.chunks.len());
        let mut failed = 0;
        let family = match base(module) {
            "decode_mma" | "decode_mma_wide" => Family::DecodeMma,
            "flash_sm90" => Family::FlashSm90,
            _ => Family::First,
        };
        // flash_sm90's variants share the planted code; only the plain one is compiled.
        let plain = |k: &Kind| !matches!(k, Kind::Flash(FlashKernel::Sm90 { overlap: true, .. }));
        for kind in kinds(&bad, case, family).into_iter().filter(plain) {
            let (out, secs) = run(&bad, &s, &step, kind);
            failed += against_f64(&s, &refs, &step, kind, &out, secs)
                .iter()
                .filter(|(ok, _)| !ok)
                .count();
        }
        c.check(
            failed > 0,
            format!("{module}.cu with `{to}` for `{from}`: {failed} chunk checks fail"),
        );
    }
    c.finish();
}
