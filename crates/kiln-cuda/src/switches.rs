//! Off switches for every optimisation, read once when the backend starts, so that an A/B run
//! or a bisection is one environment variable away.

/// Which fast paths are on. All default to on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    /// KILN_SKINNY_GEMM=0: decode rows go through cuBLASLt with the prefill rows.
    pub skinny_gemm: bool,
    /// KILN_FLASH_ATTN=0: every row (prefill and decode) uses the simple reference attention.
    pub flash_attn: bool,
    /// KILN_SPLIT_DECODE=0: decode rows use the reference attention instead of the split kernel.
    pub split_decode: bool,
    /// KILN_DEVICE_SAMPLING=0: logits rows go to the host to be sampled.
    pub device_sampling: bool,
}

pub(crate) fn on(name: &str) -> bool {
    !matches!(
        std::env::var(name).as_deref(),
        Ok("0") | Ok("off") | Ok("false")
    )
}

impl Switches {
    pub fn from_env() -> Switches {
        Switches {
            skinny_gemm: on("KILN_SKINNY_GEMM"),
            flash_attn: on("KILN_FLASH_ATTN"),
            split_decode: on("KILN_SPLIT_DECODE"),
            device_sampling: on("KILN_DEVICE_SAMPLING"),
        }
    }

    /// One line for logs and reports.
    pub fn describe(&self) -> String {
        let k = crate::kernels::KernelChoice::from_env();
        format!(
            "skinny_gemm={} flash_attn={} split_decode={} device_sampling={} gemm_pin={} skinny_pipe={} flash_pairs={}",
            self.skinny_gemm as u8,
            self.flash_attn as u8,
            self.split_decode as u8,
            self.device_sampling as u8,
            on("KILN_GEMM_PIN") as u8,
            k.skinny_pipe as u8,
            k.flash_pairs as u8
        )
    }
}
