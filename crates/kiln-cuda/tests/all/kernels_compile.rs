//! Every kernel module compiles with NVRTC for sm_90 (H100/H200) in each storage type it is
//! built for (a typed module for bf16, f16 and f32), with no GPU needed. Skips with a printed
//! reason when libnvrtc is missing, unless KILN_REQUIRE_NVRTC=1. KILN_DUMP_CUBIN=DIR writes each
//! build's cubin there as NAME.cubin (bf16) or NAME-f32.cubin (read it with `cuobjdump -sass`);
//! KILN_COMPILE_ONLY=NAME[,NAME..] compiles only those modules.

use kiln_cuda::kernel_sources::SOURCES;
use kiln_cuda::nvrtc_build::{compile_cubin_with_log, nvrtc_present, nvrtc_version};
use kiln_cuda::StoreType;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

#[test]
fn kernels_compile() {
    if !nvrtc_present() {
        let msg = "libnvrtc not found: run scripts/ci-nvrtc.sh and export what it prints";
        if std::env::var("KILN_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIP kernels_compile: {msg}");
        return;
    }
    let (major, minor) = nvrtc_version().expect("nvrtc version");
    eprintln!("NVRTC {major}.{minor}");
    let mut failures = Vec::new();
    // KILN_COMPILE_ONLY=a,b: only those modules (a quick check while editing one).
    let only = std::env::var("KILN_COMPILE_ONLY").ok();
    let wanted = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|n| n == name))
    };
    // KILN_COMPILE_ARCH=89: build for another compute capability than the H200's (a module not
    // built there is left out), to read its SASS.
    let arch: u32 = std::env::var("KILN_COMPILE_ARCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(90);
    let builds: Vec<_> = SOURCES
        .iter()
        .filter(|src| wanted(src.name) && src.target(arch).is_some())
        .flat_map(|src| src.all_builds().into_iter().map(move |store| (src, store)))
        .collect();
    // The builds are independent: they share the cores, and are reported in order after.
    let compiled: Vec<_> = builds.iter().map(|_| OnceLock::new()).collect();
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(builds.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(src, store)) = builds.get(i) else {
                    break;
                };
                let t = std::time::Instant::now();
                let result = compile_cubin_with_log(src, arch, store, &["--ptxas-options=-v"]);
                let _ = compiled[i].set((result, t.elapsed()));
            });
        }
    });
    for (&(src, store), done) in builds.iter().zip(compiled) {
        let (result, took) = done.into_inner().expect("every build ran");
        // bf16 builds keep their old file names, so a cubin diff across commits needs no rename.
        let file = match store {
            StoreType::Bf16 => src.name.to_string(),
            other => format!("{}-{other}", src.name),
        };
        match result {
            Ok((cubin, log)) => {
                // KILN_DUMP_CUBIN=DIR keeps each build's cubin, for cuobjdump -sass.
                if let Ok(dir) = std::env::var("KILN_DUMP_CUBIN") {
                    std::fs::write(format!("{dir}/{file}.cubin"), &cubin)
                        .expect("writing the cubin");
                }
                eprintln!(
                    "PASS compile {}.cu ({store}): {} bytes in {:.2}s",
                    src.name,
                    cubin.len(),
                    took.as_secs_f64()
                );
                // Registers and spills per kernel, for the record.
                for line in log.lines().filter(|l| {
                    l.contains("registers")
                        || l.contains("spill")
                        || l.contains("Compiling entry")
                        || l.contains("Performance")
                }) {
                    eprintln!("    {}", line.trim());
                }
                let entries = match src.entries() {
                    Ok(e) => e,
                    Err(e) => {
                        failures.push(format!("{e:#}"));
                        continue;
                    }
                };
                for entry in entries {
                    // The ELF string table holds every kernel's symbol name.
                    let found = cubin
                        .windows(entry.len() + 1)
                        .any(|w| &w[..entry.len()] == entry.as_bytes() && w[entry.len()] == 0);
                    if !found {
                        failures.push(format!(
                            "{}.cu ({store}): entry {entry} missing from the cubin",
                            src.name
                        ));
                    }
                }
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    assert!(
        failures.is_empty(),
        "kernel compilation failed:\n{}",
        failures.join("\n")
    );
}

/// KILN_FILL_CACHE=1: compiles every module a bf16 backend on an sm_90 device loads into the
/// kernel cache (KILN_KERNEL_CACHE), so a GPU run that carries the cache starts without NVRTC
/// work. Does nothing otherwise.
#[test]
fn fill_kernel_cache() {
    if std::env::var("KILN_FILL_CACHE").as_deref() != Ok("1") || !nvrtc_present() {
        return;
    }
    for src in SOURCES.iter().filter(|s| s.builds_for(StoreType::Bf16)) {
        let c = kiln_cuda::nvrtc_build::compile_cached(src, 90, StoreType::Bf16)
            .unwrap_or_else(|e| panic!("{}: {e:#}", src.name));
        eprintln!(
            "cached {}.cu ({} bytes{})",
            src.name,
            c.cubin.len(),
            if c.from_cache { ", already there" } else { "" }
        );
    }
}
