//! Where ptxas put the instructions a kernel's speed depends on, read from its SASS without a
//! GPU (NVRTC for sm_90, then nvdisasm from scripts/ci-nvdisasm.sh; skipped with a printed reason
//! when either is missing, unless the scripts that fetch them said they must be there, as CI's):
//! - flash_sm90's overlapped loops (flash_sm90o_*, flash_sm90p_*): tile i's softmax lies between
//!   the loop's two waits for the tensor cores (wgmma.wait_group 1, then 0), so it runs beside
//!   tile i - 1's P V; without the block boundary of flash_sm90.cu, ptxas put the second wait
//!   first (the same source with the boundary taken out is seen to fail);
//! - the second quantised decode family's one-row-group entries (skinny2_*_1 and _8, those that
//!   load x ahead: quant_decode.cu's HOIST), built with KILN_QUANT_FENCE's boundary: no x load
//!   between the wait for a weight record and the MMAs that use it, as without it there are;
//! - the weights some kernels prefetch before waiting for the kernel ahead (the RMSNorm weight,
//!   the fp8 skinny kernels' first chunks) load before griddepcontrol.wait in the SASS;
//! - on sm_90 the fp8 skinny kernels' E4M3 MMAs are f16 MMAs after an unpacking, the
//!   instructions the wide fp8 kernels write themselves to give the same bits (on sm_89 they are
//!   E4M3 MMAs of the hardware's own, which the wide kernels do not match, and so do not run);
//! - each entry of the wgmma row order (wg_rows.cuh: fp8_wg.cu's E4M3, bf16_wg.cu's bf16) sums a
//!   tile as four wgmmas of its N issued back to back, the first from zero (the order its
//!   contract holds), keeps a tile in flight while adding the last one's products where it
//!   says so, spills nothing, and copies its first weight stages before waiting for the kernel
//!   ahead.

use std::process::Command;

use crate::common::planted::planted_module;
use kiln_cuda::kernel_sources::{source, KernelSource};
use kiln_cuda::nvrtc_build::{compile_cubin_with_log, nvrtc_present};
use kiln_cuda::StoreType;

/// The boundary that keeps the softmax between the waits (flash_sm90.cu).
const FLASH_BOUNDARY: &str = "if (tile.n_rows < 0) out[tid] = bf16_t{};";

/// nvdisasm's path, or None (and why) where it or NVRTC is missing: a failure instead where
/// the environment says it must be there (KILN_REQUIRE_NVRTC, KILN_REQUIRE_NVDISASM, as
/// scripts/ci-nvrtc.sh and scripts/ci-nvdisasm.sh set them).
fn tools() -> Option<String> {
    let required = |var: &str| std::env::var(var).as_deref() == Ok("1");
    let (why, must) = match (nvrtc_present(), std::env::var("KILN_NVDISASM")) {
        (true, Ok(path)) if std::path::Path::new(&path).exists() => return Some(path),
        (false, _) => (
            "libnvrtc not found: run scripts/ci-nvrtc.sh and export what it prints",
            required("KILN_REQUIRE_NVRTC"),
        ),
        _ => (
            "nvdisasm not found: run scripts/ci-nvdisasm.sh and export what it prints",
            required("KILN_REQUIRE_NVDISASM"),
        ),
    };
    assert!(!must, "{why}");
    eprintln!("SKIP sass_order: {why}");
    None
}

/// The SASS of `src` built for bf16 on sm_90 with the options the GPU uses (and `extra`), entry by entry:
/// (entry name, its instruction lines).
fn sass(nvdisasm: &str, src: &KernelSource, extra: &[&str]) -> Vec<(String, Vec<String>)> {
    sass_at(nvdisasm, src, extra, 90)
}

/// [`sass`] for compute capability `arch`.
fn sass_at(
    nvdisasm: &str,
    src: &KernelSource,
    extra: &[&str],
    arch: u32,
) -> Vec<(String, Vec<String>)> {
    let (cubin, _) = compile_cubin_with_log(src, arch, StoreType::Bf16, extra)
        .unwrap_or_else(|e| panic!("{}.cu: {e:#}", src.name));
    let dir = std::env::temp_dir().join(format!("kiln-sass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-{:x}.cubin", src.name, src.body.len()));
    std::fs::write(&path, &cubin).unwrap();
    let out = Command::new(nvdisasm)
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "nvdisasm failed on {}.cu", src.name);
    let mut entries: Vec<(String, Vec<String>)> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line
            .strip_prefix(".text.")
            .and_then(|r| r.strip_suffix(':'))
        {
            entries.push((name.to_string(), Vec::new()));
        } else if let Some((_, lines)) = entries.last_mut() {
            if line.contains("/*") && line.contains("*/") {
                lines.push(line.trim().to_string());
            }
        }
    }
    entries
}

/// For each stretch from a `wait_group 1` to the next `wait_group 0`, the exponentials in it.
fn exps_between_waits(lines: &[String]) -> Vec<usize> {
    let (mut open, mut found) = (None, Vec::new());
    for l in lines {
        if l.contains("WARPGROUP.DEPBAR.LE gsb0, 0x1") {
            open = Some(0);
        } else if l.contains("WARPGROUP.DEPBAR.LE gsb0, 0x0") {
            found.extend(open.take());
        } else if l.contains("MUFU.EX2") {
            if let Some(n) = open.as_mut() {
                *n += 1;
            }
        }
    }
    found
}

/// `count` over the SASS of each entry of `src` (built with `extra`) that `keep` names.
fn per_entry(
    nvdisasm: &str,
    src: &KernelSource,
    extra: &[&str],
    keep: impl Fn(&str) -> bool,
    count: impl Fn(&[String]) -> Vec<usize>,
) -> Vec<(String, Vec<usize>)> {
    sass(nvdisasm, src, extra)
        .into_iter()
        .filter(|(name, _)| keep(name))
        .map(|(name, lines)| (name, count(&lines)))
        .collect()
}

/// Each overlapped entry's stretches between its two waits, by entry.
fn overlapped_loops(nvdisasm: &str, src: &KernelSource) -> Vec<(String, Vec<usize>)> {
    let overlapped = |n: &str| n.starts_with("flash_sm90o_") || n.starts_with("flash_sm90p_");
    per_entry(nvdisasm, src, &[], overlapped, exps_between_waits)
}

#[test]
fn flash_softmax_runs_beside_the_previous_p_v() {
    let Some(nvdisasm) = tools() else {
        return;
    };
    let src = source("flash_sm90").unwrap();
    let loops = overlapped_loops(&nvdisasm, src);
    assert_eq!(
        loops.len(),
        6,
        "flash_sm90o/p at three head dims: {loops:?}"
    );
    for (name, stretches) in &loops {
        // A tile's softmax takes one exponential a score of each of the lane's rows: 32 or more.
        assert!(
            !stretches.is_empty() && stretches.iter().all(|&n| n >= 16),
            "{name}: exponentials between the loop's wgmma waits {stretches:?}: the wait for \
             P V moved ahead of the softmax"
        );
    }
    // Without the boundary the wait goes first: what the check above is for.
    let bare = planted_module("flash_sm90", FLASH_BOUNDARY, "");
    let without = overlapped_loops(&nvdisasm, &bare);
    assert!(
        without.iter().all(|(_, s)| s.iter().all(|&n| n == 0)),
        "the boundary taken out, the waits still hold the softmax between them: {without:?}"
    );
}

/// skinny2 entries that load x ahead of the wait: one group of 8 rows, but the Q4_K formats'
/// 8-row entries (their odd layout loads x after it by design).
fn hoists(name: &str) -> bool {
    let one_group = name.ends_with("_1") || name.ends_with("_8");
    let odd = name == "skinny2_q4_k_8" || name == "skinny2_q4_k2_8";
    name.starts_with("skinny2_") && one_group && !odd
}

/// For each wait for a cp.async record (DEPBAR.LE SB0), the global loads between it and the
/// next MMA.
fn loads_after_record_waits(lines: &[String]) -> Vec<usize> {
    let mut found = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !l.contains("DEPBAR.LE SB0") {
            continue;
        }
        let after = lines[i + 1..]
            .iter()
            .take_while(|l| !l.contains("HMMA"))
            .filter(|l| l.contains("LDG") && !l.contains("LDGSTS") && !l.contains("LDGDEPBAR"))
            .count();
        found.push(after);
    }
    found
}

fn quant_hoists(nvdisasm: &str, extra: &[&str]) -> Vec<(String, Vec<usize>)> {
    let src = source("quant_gemm").unwrap();
    per_entry(nvdisasm, src, extra, hoists, loads_after_record_waits)
}

#[test]
fn quant_decode_x_loads_come_before_the_record_wait() {
    let Some(nvdisasm) = tools() else {
        return;
    };
    // Built with the boundary (KILN_QUANT_FENCE=1's define): no x load after a record wait.
    let entries = quant_hoists(&nvdisasm, &["-DKILN_QUANT_HOIST_FENCE"]);
    assert_eq!(
        entries.len(),
        10,
        "skinny2's entries that load x ahead: {entries:?}"
    );
    for (name, waits) in &entries {
        assert!(
            !waits.is_empty() && waits.iter().all(|&n| n == 0),
            "{name}: x loads after the record waits {waits:?}: the wait moved ahead of them"
        );
    }
    // Without it (the default until measured), ptxas puts the wait first.
    let without = quant_hoists(&nvdisasm, &[]);
    assert!(
        without.iter().any(|(_, w)| w.iter().any(|&n| n > 0)),
        "without the boundary, no x load follows a record wait: {without:?}"
    );
}

/// Global loads before the first wait for the kernel ahead (ACQBULK: griddepcontrol.wait).
fn loads_before_the_wait(lines: &[String]) -> usize {
    lines
        .iter()
        .take_while(|l| !l.contains("ACQBULK"))
        .filter(|l| l.contains("LDG") && !l.contains("LDGDEPBAR"))
        .count()
}

#[test]
fn prefetched_weights_load_before_the_wait() {
    let Some(nvdisasm) = tools() else {
        return;
    };
    // (module, entry, loads its source puts before pdl_wait): the norm weight's eight values a
    // thread (norm_rows.cuh), the fp8 skinny kernels' first weight chunks (two rows of U
    // chunks a lane: fp8.cu), as volatile coherent loads the compiler keeps there.
    let cases = [
        ("elementwise", "rmsnorm_residual", 8),
        ("fp8", "rmsnorm_residual_fp8", 8),
        ("fp8", "skinny_fp8_8", 16),
        ("fp8", "skinny_fp8_16", 16),
        ("fp8", "skinny_fp8_32", 8),
        ("fp8", "skinny_fp8_64", 4),
    ];
    for module in ["elementwise", "fp8"] {
        let src = source(module).unwrap();
        let entries = sass(&nvdisasm, src, &[]);
        for &(_, entry, want) in cases.iter().filter(|c| c.0 == module) {
            let (_, lines) = entries
                .iter()
                .find(|(name, _)| name == entry)
                .unwrap_or_else(|| panic!("{module}.cu has no {entry}"));
            let got = loads_before_the_wait(lines);
            assert!(
                got >= want,
                "{entry}: {got} loads before griddepcontrol.wait, {want} expected: the prefetch \
                 moved after it"
            );
        }
    }
    // With a plain load of the weight, the compiler puts the wait first.
    let plain = planted_module(
        "elementwise",
        "wv[j] = i < hidden ? ld_store_here(w + i) : (store_t)0;",
        "wv[j] = i < hidden ? w[i] : (store_t)0;",
    );
    let entries = sass(&nvdisasm, &plain, &[]);
    let (_, lines) = entries
        .iter()
        .find(|(name, _)| name == "rmsnorm_residual")
        .unwrap();
    assert_eq!(
        loads_before_the_wait(lines),
        0,
        "plain loads of the norm weight stayed before the wait: the volatile load is not what keeps them there"
    );
}

/// The MMA instructions of one entry's SASS: (E4M3 ones, f16 ones, E4M3 unpackings).
fn mma_kinds(lines: &[String]) -> (usize, usize, usize) {
    let count = |op: &str| lines.iter().filter(|l| l.contains(op)).count();
    (
        count("QMMA."),
        count("HMMA.16816.F32 "),
        count("F2FP.F16.E4M3.UNPACK_B"),
    )
}

#[test]
fn fp8_skinny_mmas_are_the_wide_kernels_f16_pairs_on_sm_90_only() {
    let Some(nvdisasm) = tools() else {
        return;
    };
    let src = source("fp8").unwrap();
    let skinny = |name: &str| name.starts_with("skinny_fp8_");
    for (arch, f16_pairs) in [(90, true), (89, false)] {
        let entries = sass_at(&nvdisasm, src, &[], arch);
        let found: Vec<_> = entries.iter().filter(|(n, _)| skinny(n)).collect();
        assert_eq!(found.len(), 4, "sm_{arch}: the four skinny entries");
        for (name, lines) in found {
            let (e4m3, f16, unpack) = mma_kinds(lines);
            if f16_pairs {
                assert!(
                    e4m3 == 0 && f16 > 0 && unpack > 0,
                    "sm_{arch} {name}: {e4m3} E4M3 MMAs, {f16} f16 MMAs, {unpack} unpackings; \
                     the wide fp8 kernels' bits rest on the f16 pairs"
                );
            } else {
                assert!(
                    e4m3 > 0 && f16 == 0,
                    "sm_{arch} {name}: {e4m3} E4M3 MMAs, {f16} f16 MMAs; fp8_skinny.rs's \
                     wide_matches_skinny assumes E4M3 MMAs of the hardware's own here"
                );
            }
        }
    }
}

#[test]
fn wg_rows_tiles_are_four_wgmmas_from_zero_and_nothing_spills() {
    let Some(nvdisasm) = tools() else {
        return;
    };
    use kiln_cuda::wg_rows::{bf16_wg_entries, wg_entries};
    let modules = [
        ("fp8_wg", wg_entries(), "QGMMA.", "x32.F32.E4M3.E4M3 "),
        ("bf16_wg", bf16_wg_entries(), "HGMMA.", "x16.F32.BF16 "),
    ];
    for (module, all, kind, shape) in modules {
        let entries = sass(&nvdisasm, source(module).unwrap(), &[]);
        assert_eq!(entries.len(), all.len(), "every {module} entry in the SASS");
        for (name, lines) in &entries {
            wg_tiles_in_order(all, name, lines, kind, shape);
        }
    }
}

/// One wg_rows.cuh entry's SASS (`kind`: its wgmma's name; `shape`: what follows N in it).
fn wg_tiles_in_order(
    all: &[kiln_cuda::wg_rows::WgEntry],
    name: &str,
    lines: &[String],
    kind: &str,
    shape: &str,
) {
    let e = all.iter().find(|e| e.name == name).unwrap();
    let at: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains(kind))
        .collect();
    let op = format!("{kind}64x{}{shape}", e.bn);
    assert!(
        !at.is_empty() && at.len().is_multiple_of(4) && at.iter().all(|&i| lines[i].contains(&op)),
        "{name}: {} wgmmas, a multiple of four of {op}expected",
        at.len()
    );
    // Each tile's four: the first from zero (RZ, no accumulate predicate), the others on
    // top of it, no wait among them (ptxas serialises wgmmas it cannot pipeline).
    let from_zero = |i: usize| lines[i].contains(", RZ, !UPT");
    for tile in at.chunks(4) {
        assert!(
            from_zero(tile[0]) && !tile[1..].iter().any(|&i| from_zero(i)),
            "{name}: a tile's first wgmma must start from zero, and only it"
        );
        let waits = lines[tile[0]..tile[3]]
            .iter()
            .filter(|l| l.contains("WARPGROUP.DEPBAR"))
            .count();
        assert_eq!(waits, 0, "{name}: a wait between a tile's wgmmas");
    }
    // The `_o` entries leave one tile's products in flight while adding the last's.
    let in_flight = lines
        .iter()
        .any(|l| l.contains("WARPGROUP.DEPBAR.LE gsb0, 0x1"));
    assert_eq!(
        in_flight, e.overlap,
        "{name}: a tile in flight while adding"
    );
    let spills = lines
        .iter()
        .filter(|l| l.contains(" STL") || l.contains(" LDL"))
        .count();
    assert_eq!(spills, 0, "{name}: {spills} local-memory accesses");
    let early = lines
        .iter()
        .take_while(|l| !l.contains("ACQBULK"))
        .filter(|l| l.contains("LDGSTS"))
        .count();
    assert!(
        early > 0,
        "{name}: no weight copy before griddepcontrol.wait"
    );
}
