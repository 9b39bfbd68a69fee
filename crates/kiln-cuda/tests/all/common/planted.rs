//! Planted bugs: a kernel module with one text replaced. The GPU-free check: the planted module
//! compiles with NVRTC for sm_90, and its machine code differs from the unplanted module's, so
//! the bug reaches a kernel that the GPU test runs. Both builds use `--Ofast-compile=max` (about
//! a third of a full build's time; the GPU test builds the planted module with the real options
//! and fails if it does not load). The GPU test: [`each_planted_bug_fails`], a contract's cases
//! run on each planted backend in turn must fail some check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kiln_cuda::device::Gpu;
use kiln_cuda::kernel_sources::{source, KernelSource, SOURCES};
use kiln_cuda::nvrtc_build::{compile_cached, compile_cubin_with_log};
use kiln_cuda::StoreType;

const FAST: &[&str] = &["--Ofast-compile=max"];

/// Panics unless `planted` (a module of [`SOURCES`] with one text replaced, `what` naming the
/// replacement) compiles for `store` into machine code other than the unplanted module's.
/// Does nothing without NVRTC.
pub fn assert_planted_compiles(planted: &KernelSource, store: StoreType, what: &str) {
    if !kiln_cuda::nvrtc_build::nvrtc_present() {
        return;
    }
    let name = planted.name;
    let moved = moves_machine_code(planted, store)
        .unwrap_or_else(|e| panic!("{name}.cu ({store}) with `{what}`: {e:#}"));
    assert!(
        moved,
        "{name}.cu ({store}) with `{what}`: the same machine code as without it"
    );
}

/// [`assert_planted_compiles`] for each of `bugs`, planted with [`planted_module`] (whose text
/// must occur once) and built for bf16: the GPU-free half of a contract's planted bugs.
pub fn each_planted_compiles<'a>(bugs: impl IntoIterator<Item = Bug<'a>>) {
    for (module, from, to) in bugs {
        assert_planted_compiles(&planted_module(module, from, to), StoreType::Bf16, to);
    }
}

/// Whether `edited` (a module of [`SOURCES`] with its text changed) compiles for `store` into
/// machine code other than the module's; an error when it does not compile.
fn moves_machine_code(edited: &KernelSource, store: StoreType) -> anyhow::Result<bool> {
    let (cubin, _) = compile_cubin_with_log(edited, 90, store, FAST)?;
    Ok(machine_code(&cubin) != machine_code(&unplanted(edited.name, store)))
}

/// `module` of [`SOURCES`] with `from`, which it must hold once, replaced by `to`.
pub fn planted_module(module: &str, from: &str, to: &str) -> KernelSource {
    let mut src = *source(module).unwrap();
    assert_eq!(
        src.body.matches(from).count(),
        1,
        "{module}.cu: `{from}` must occur once"
    );
    src.body = Box::leak(src.body.replace(from, to).into_boxed_str());
    src
}

/// The kernel sources with `planted` in place of its module.
pub fn sources_with(planted: KernelSource) -> Vec<KernelSource> {
    let mut sources: Vec<KernelSource> = SOURCES.to_vec();
    *sources.iter_mut().find(|s| s.name == planted.name).unwrap() = planted;
    sources
}

/// The kernel sources with `from` replaced by `to` in `module` ([`planted_module`]).
pub fn planted_sources(module: &str, from: &str, to: &str) -> Vec<KernelSource> {
    sources_with(planted_module(module, from, to))
}

/// One planted bug: the module, the text it holds once, and what replaces it.
pub type Bug<'a> = (&'a str, &'a str, &'a str);

/// Each of `bugs` in turn, on a backend of `store` loaded from the sources with that bug
/// planted (all of them built first, on every core): some check of `cases(gpu, i, ..)`, `i` the
/// bug's index, must fail. Skips without a GPU, as every GPU test does.
pub fn each_planted_bug_fails(
    test: &str,
    store: StoreType,
    bugs: &[Bug],
    mut cases: impl FnMut(&Gpu, usize, &mut super::Rng, &mut super::Checks),
) {
    let Some(gpu) = super::gpu_with_store_or_skip(test, store) else {
        return;
    };
    let modules: Vec<KernelSource> = bugs
        .iter()
        .map(|&(module, from, to)| planted_module(module, from, to))
        .collect();
    prebuild(&modules, gpu.arch, store);
    drop(gpu);
    let mut rng = super::Rng::new(test);
    let mut c = super::Checks::new(test);
    for (i, (&(module, from, to), src)) in bugs.iter().zip(modules).enumerate() {
        let bad =
            Gpu::with_sources(0, store, &sources_with(src)).expect("loading the planted module");
        let mut planted = super::Checks::quiet("planted");
        cases(&bad, i, &mut rng, &mut planted);
        c.check(
            planted.failed() > 0,
            format!(
                "{module}.cu ({store}) with `{to}` for `{from}`: {} checks fail",
                planted.failed()
            ),
        );
    }
    c.finish();
}

/// [`each_planted_bug_fails`] for bugs (text, replacement) of one bf16 module, each against
/// the same cases.
pub fn planted_bugs_fail(
    test: &str,
    module: &str,
    bugs: &[(&str, &str)],
    mut cases: impl FnMut(&Gpu, &mut super::Rng, &mut super::Checks),
) {
    let bugs: Vec<Bug> = bugs.iter().map(|&(from, to)| (module, from, to)).collect();
    each_planted_bug_fails(test, StoreType::Bf16, &bugs, |gpu, _, rng, c| {
        cases(gpu, rng, c)
    });
}

/// On a GPU machine: builds each of `planted` (modules of [`SOURCES`], each with one bug planted)
/// for `arch` into the kernel cache, on every core at once, so that the planted backends then
/// loaded one after another read their cubins instead of each building its module in turn (a
/// whole-module build is 5-15 s). An error of a build is left for the load to report.
pub fn prebuild(planted: &[KernelSource], arch: u32, store: StoreType) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..cores.min(planted.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(src) = planted.get(i) else { break };
                let _ = compile_cached(src, arch, store);
            });
        }
    });
}

/// The comparison sees code, not text: moving every line and adding a comment changes nothing.
#[test]
fn an_edit_that_moves_no_code_is_seen_as_none() {
    if !kiln_cuda::nvrtc_build::nvrtc_present() {
        return;
    }
    let src = source("draft").unwrap();
    let body = format!("// a comment\n{}", src.body.replace('\n', "\n\n"));
    let edited = KernelSource {
        body: Box::leak(body.into_boxed_str()),
        ..*src
    };
    assert!(!moves_machine_code(&edited, StoreType::Bf16).unwrap());
}

/// The unplanted module's cubin, built once per module and storage type by whichever test
/// asks first.
fn unplanted(name: &'static str, store: StoreType) -> Arc<Vec<u8>> {
    type Cells = Mutex<HashMap<(&'static str, StoreType), Arc<OnceLock<Arc<Vec<u8>>>>>>;
    static BUILT: OnceLock<Cells> = OnceLock::new();
    let cell = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry((name, store))
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let src = source(name).unwrap();
        let (cubin, _) = compile_cubin_with_log(src, 90, store, FAST)
            .unwrap_or_else(|e| panic!("{name}.cu ({store}): {e:#}"));
        Arc::new(cubin)
    })
    .clone()
}

/// The cubin's sections that hold what a launch runs (instructions, constant banks, kernel
/// attributes) by name, leaving out the line tables that any edit of the text moves.
fn machine_code(elf: &[u8]) -> Vec<(String, &[u8])> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a cubin is a 64-bit ELF");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3A), u16_at(0x3C), u16_at(0x3E));
    const NOBITS: usize = 8; // a size but no bytes in the file
    let section = |i: usize| {
        let h = shoff + i * shentsize;
        // name, type, offset, size
        (u32_at(h), u32_at(h + 4), u64_at(h + 24), u64_at(h + 32))
    };
    let (_, _, names_at, _) = section(shstrndx);
    let mut out: Vec<(String, &[u8])> = (0..shnum)
        .map(section)
        .filter_map(|(name, kind, offset, size)| {
            let name = &elf[names_at + name..];
            let name = String::from_utf8_lossy(&name[..name.iter().position(|&b| b == 0)?]);
            let kept = [".text.", ".nv.constant", ".nv.info"]
                .iter()
                .any(|p| name.starts_with(p));
            let bytes = if kind == NOBITS {
                &[][..]
            } else {
                &elf[offset..offset + size]
            };
            kept.then(|| (name.into_owned(), bytes))
        })
        .collect();
    out.sort();
    out
}
