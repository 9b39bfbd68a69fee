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
        let k = KernelChoice::from_env();
        format!(
            "skinny_gemm={} flash_attn={} split_decode={} device_sampling={} gemm_pin={} skinny_pipe={} skinny_deep={} skinny_wide={} flash_pairs={} pdl={}",
            self.skinny_gemm as u8,
            self.flash_attn as u8,
            self.split_decode as u8,
            self.device_sampling as u8,
            on("KILN_GEMM_PIN") as u8,
            k.skinny_pipe as u8,
            k.skinny_deep as u8,
            k.skinny_wide as u8,
            k.flash_pairs as u8,
            k.pdl as u8
        )
    }
}

/// Which variant of a kernel family a launch uses. The fast variants are the defaults; each
/// has an off switch read once per process (see [`KernelChoice::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelChoice {
    /// KILN_SKINNY_PIPE=0: the skinny GEMM without the cp.async weight ring (`skinny_gemm_*`).
    pub skinny_pipe: bool,
    /// KILN_FLASH_PAIRS=0: flash attention with one query head per CTA (`flash_attn_hd*`)
    /// instead of two heads of a GQA group sharing each K/V tile (`flash_attn2_hd*`).
    pub flash_pairs: bool,
    /// KILN_PDL=0: every kernel launched after its predecessor ends, instead of as a
    /// programmatic dependent launch (launch overlapped with the predecessor's tail; the skinny
    /// GEMM also streams its first weights meanwhile).
    pub pdl: bool,
    /// KILN_SKINNY_WIDE=0: the skinny GEMM runs 8 warps per CTA (`skinny_pipe_*`,
    /// `skinny_deep_*`) instead of 16 (`skinny_wide*_*`), a different summation order.
    pub skinny_wide: bool,
    /// KILN_SKINNY_DEEP=0: in the 8-warp family, long-K weights (k >= 8192) use the 8-stage
    /// ring instead of the 14-stage `skinny_deep_*` (same bits).
    pub skinny_deep: bool,
}

impl KernelChoice {
    pub const ALL_FAST: KernelChoice = KernelChoice {
        skinny_pipe: true,
        flash_pairs: true,
        pdl: true,
        skinny_wide: true,
        skinny_deep: true,
    };
    pub const ALL_PLAIN: KernelChoice = KernelChoice {
        skinny_pipe: false,
        flash_pairs: false,
        pdl: false,
        skinny_wide: false,
        skinny_deep: false,
    };

    /// The process-wide choice from the environment, read on first use.
    pub fn from_env() -> KernelChoice {
        static CHOICE: std::sync::OnceLock<KernelChoice> = std::sync::OnceLock::new();
        *CHOICE.get_or_init(|| KernelChoice {
            skinny_pipe: on("KILN_SKINNY_PIPE"),
            flash_pairs: on("KILN_FLASH_PAIRS"),
            pdl: on("KILN_PDL"),
            skinny_wide: on("KILN_SKINNY_WIDE"),
            skinny_deep: on("KILN_SKINNY_DEEP"),
        })
    }
}
