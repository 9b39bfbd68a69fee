//! Every KILN_* variable the CPU backend reads, parsed here and only here, once per process.

use std::sync::OnceLock;

/// The CPU backend's switches. All default to the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    /// KILN_CPU_SIMD=portable (or off, 0): the portable kernels even where AVX2+FMA exist.
    pub simd_portable: bool,
    /// KILN_CPU_WEIGHTS=f32: every weight stored as f32, none in a narrower exact format.
    pub compact_weights: bool,
    /// KILN_CPU_QUANT=0: block-quantised weights expanded at load rather than kept quantised.
    pub quant_weights: bool,
}

impl Switches {
    /// The process-wide switches, read from the environment on first use.
    pub fn get() -> Switches {
        static SWITCHES: OnceLock<Switches> = OnceLock::new();
        *SWITCHES.get_or_init(|| Switches::read(|name| std::env::var(name).ok()))
    }

    /// Parses the variables `var` gives (None: unset, or not Unicode, which counts as unset).
    fn read(var: impl Fn(&str) -> Option<String>) -> Switches {
        Switches {
            simd_portable: var("KILN_CPU_SIMD")
                .is_some_and(|v| matches!(v.as_str(), "portable" | "off" | "0")),
            compact_weights: var("KILN_CPU_WEIGHTS").is_none_or(|v| v != "f32"),
            quant_weights: var("KILN_CPU_QUANT").is_none_or(|v| v != "0"),
        }
    }

    /// One line for logs and reports, naming every switch.
    pub fn describe(&self) -> String {
        let simd = if self.simd_portable {
            "portable"
        } else {
            "auto"
        };
        let weights = if self.compact_weights {
            "compact"
        } else {
            "f32"
        };
        let quant = self.quant_weights as u8;
        format!("cpu_simd={simd} cpu_weights={weights} cpu_quant={quant}")
    }
}

#[cfg(test)]
mod tests {
    use super::Switches;

    fn read(name: &str, value: &str) -> Switches {
        Switches::read(|n| (n == name).then(|| value.to_string()))
    }

    #[test]
    fn defaults_and_each_variable() {
        let fast = Switches::read(|_| None);
        assert!(!fast.simd_portable && fast.compact_weights && fast.quant_weights);
        for v in ["portable", "off", "0"] {
            assert!(read("KILN_CPU_SIMD", v).simd_portable);
        }
        assert!(!read("KILN_CPU_SIMD", "avx2").simd_portable);
        assert!(!read("KILN_CPU_WEIGHTS", "f32").compact_weights);
        assert!(read("KILN_CPU_WEIGHTS", "bf16").compact_weights);
        assert!(!read("KILN_CPU_QUANT", "0").quant_weights);
        assert!(read("KILN_CPU_QUANT", "off").quant_weights);
    }
}
