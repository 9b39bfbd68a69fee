//! Which instruction set the kernels use, chosen once per process.
//!
//! Every reduction has one fixed order whichever set is chosen, but fused multiply-add rounds
//! differently from a multiply then an add, so the choice is made once and never changes
//! while the process runs: results stay bit-identical from step to step.

use std::sync::OnceLock;

/// The instruction set a kernel runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust loops that LLVM vectorises at the SSE2 baseline (multiply, then add).
    Portable,
    /// 256-bit AVX2 with fused multiply-add (and F16C), detected at run time.
    Avx2Fma,
}

impl Isa {
    /// The instruction sets this machine can run, the fastest last.
    pub fn available() -> Vec<Isa> {
        [Isa::Portable, Isa::Avx2Fma]
            .into_iter()
            .filter(|isa| isa.is_supported())
            .collect()
    }

    /// Whether this CPU can run this instruction set.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Portable => true,
            Isa::Avx2Fma => avx2_fma_detected(),
        }
    }
}

fn avx2_fma_detected() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The instruction set for this process: AVX2+FMA where the CPU has it, unless the
/// environment variable `KILN_CPU_SIMD=portable` turns it off (for A/B runs and bisection).
pub fn isa() -> Isa {
    static CHOSEN: OnceLock<Isa> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        if !crate::switches::Switches::get().simd_portable && avx2_fma_detected() {
            Isa::Avx2Fma
        } else {
            Isa::Portable
        }
    })
}
