//! Whether what a command asks for fits in the device's memory, worked out before anything is
//! allocated: the weights and step buffers the backend will hold, the KV cache the requested
//! streams need, against the memory free now. A run that cannot fit is refused with the
//! numbers and the flag to lower, instead of failing in the allocator or the driver.
//!
//! The free figure comes from the device (CUDA's free memory, the host's MemAvailable) unless
//! `KILN_FREE_MEMORY_GB` gives it (GiB), for tests and for sizing a run for another machine.

use anyhow::{bail, Context};
use kiln_load::LoadedModel;
use kiln_model::ModelSpec;

/// The environment variable that replaces the device's free-memory figure (GiB).
pub const FREE_MEMORY_ENV: &str = "KILN_FREE_MEMORY_GB";

/// The memory a backend will hold apart from its KV cache, and what the device has free.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryFit {
    /// "GPU" or "host".
    pub device: &'static str,
    pub free: u64,
    /// Where `free` came from, for the messages.
    pub free_from: String,
    pub weights: u64,
    pub buffers: u64,
    /// What the driver or the system keeps beyond any allocation.
    pub reserve: u64,
    pub kv_per_token: u64,
}

impl MemoryFit {
    /// The CUDA backend's footprint under `opts` on device `opts.device`.
    pub fn cuda(model: &LoadedModel, opts: &kiln_cuda::CudaOptions) -> anyhow::Result<MemoryFit> {
        let fp = kiln_cuda::Footprint::of_source(model.weights.as_ref(), opts);
        let (free, free_from) = match injected_free()? {
            Some(f) => f,
            None => {
                let (free, _) = kiln_cuda::memory_info(opts.device)
                    .context("cannot ask the GPU how much memory is free")?;
                (free as u64, "the GPU".to_string())
            }
        };
        Ok(MemoryFit {
            device: "GPU",
            free,
            free_from,
            weights: fp.weights as u64,
            buffers: fp.buffers as u64,
            reserve: (kiln_cuda::footprint::DRIVER_RESERVE + fp.kv_block) as u64,
            kv_per_token: (fp.kv_block / opts.block_size.max(1)) as u64,
        })
    }

    /// The CPU backend: its weights about as the file stores them (it keeps f16, bf16 and
    /// quantised blocks as they are, f32 as f32), f32 K and V, activations for
    /// `max_tokens` rows and logits for `max_seqs`.
    pub fn cpu(
        model: &LoadedModel,
        max_tokens: usize,
        max_seqs: usize,
    ) -> anyhow::Result<MemoryFit> {
        let spec = model.config.spec();
        let (free, free_from) = match injected_free()? {
            Some(f) => f,
            None => match mem_available() {
                Some(b) => (b, "the host (MemAvailable)".to_string()),
                // Unknown (not Linux): nothing to compare against.
                None => (u64::MAX, "the host".to_string()),
            },
        };
        Ok(MemoryFit {
            device: "host",
            free,
            free_from,
            weights: model.description.weight_bytes,
            buffers: cpu_buffers(&spec, max_tokens, max_seqs),
            reserve: 256 << 20,
            kv_per_token: 2 * 4 * kv_width(&spec),
        })
    }

    /// Bytes left for the KV cache once the weights, the buffers and the reserve are held.
    pub fn kv_room(&self) -> u64 {
        self.free
            .saturating_sub(self.weights + self.buffers + self.reserve)
    }

    pub fn kv_bytes(&self, streams: usize, tokens_each: usize) -> u64 {
        streams as u64 * tokens_each as u64 * self.kv_per_token
    }

    /// Refuses when the weights and buffers alone do not fit.
    pub fn check_fixed(&self) -> anyhow::Result<()> {
        let fixed = self.weights + self.buffers + self.reserve;
        if fixed > self.free {
            bail!(
                "the weights ({}) and step buffers ({}) need {} with the {} reserve; {} {} free \
                 ({}): {}",
                bytes(self.weights),
                bytes(self.buffers),
                bytes(fixed),
                bytes(self.reserve),
                bytes(self.free),
                if self.free == 1 { "is" } else { "are" },
                self.free_from,
                if self.device == "GPU" {
                    "use a smaller model, lower --max-num-seqs / --max-batched-tokens, or --device cpu"
                } else {
                    "use a smaller or quantised model"
                }
            );
        }
        Ok(())
    }

    /// Refuses when `streams` sequences of `tokens_each` tokens do not fit beside the weights
    /// and buffers; `lower` names the flags that shrink the request.
    pub fn check_streams(
        &self,
        streams: usize,
        tokens_each: usize,
        lower: &str,
    ) -> anyhow::Result<()> {
        self.check_fixed()?;
        self.check_kv(
            self.kv_bytes(streams, tokens_each),
            streams,
            tokens_each,
            lower,
        )
    }

    /// Refuses when a KV cache of `kv` bytes (for `streams` x `tokens_each`) does not fit.
    pub fn check_kv(
        &self,
        kv: u64,
        streams: usize,
        tokens_each: usize,
        lower: &str,
    ) -> anyhow::Result<()> {
        let room = self.kv_room();
        if kv > room {
            bail!(
                "{} x {} tokens need {} of KV cache; {} {} free on the {} after the weights ({}) \
                 and step buffers ({}): lower {lower}",
                count(streams, "stream"),
                thousands(tokens_each as u64),
                bytes(kv),
                bytes(room),
                if room == 1 { "is" } else { "are" },
                self.device,
                bytes(self.weights),
                bytes(self.buffers),
            );
        }
        Ok(())
    }
}

/// `KILN_FREE_MEMORY_GB`, when set.
fn injected_free() -> anyhow::Result<Option<(u64, String)>> {
    let Ok(v) = std::env::var(FREE_MEMORY_ENV) else {
        return Ok(None);
    };
    match v.trim().parse::<f64>() {
        Ok(gib) if gib.is_finite() && gib >= 0.0 => Ok(Some((
            (gib * (1u64 << 30) as f64) as u64,
            format!("{FREE_MEMORY_ENV}={v}"),
        ))),
        _ => bail!("{FREE_MEMORY_ENV}={v} is not a size in GiB; give a number such as 24 or 0.5"),
    }
}

/// MemAvailable from /proc/meminfo (Linux), in bytes.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// K (or V) elements of one token across all layers.
fn kv_width(spec: &ModelSpec) -> u64 {
    spec.layers
        .iter()
        .map(|l| l.attn.cache_kv_dim() as u64)
        .sum()
}

/// The CPU forward's f32 buffers: the residual stream, norms, QKV, attention, gate/up and
/// activation rows for `max_tokens`, and the logits of `max_seqs` rows.
fn cpu_buffers(spec: &ModelSpec, max_tokens: usize, max_seqs: usize) -> u64 {
    let widest = |f: fn(&kiln_model::LayerSpec) -> usize| spec.max_over_layers(f) as u64;
    let row = 3 * spec.hidden_size as u64
        + widest(|l| l.attn.qkv_rows())
        + widest(|l| l.attn.q_dim())
        + 3 * widest(|l| l.ffn.intermediate());
    4 * (max_tokens as u64 * row + max_seqs as u64 * spec.vocab_size as u64)
}

/// "1 stream", "128 streams".
fn count(n: usize, what: &str) -> String {
    format!(
        "{} {what}{}",
        thousands(n as u64),
        if n == 1 { "" } else { "s" }
    )
}

/// 8320 -> "8,320".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "139.6 GiB", "512 MiB", "3.0 KiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (scale, unit) in UNITS {
        if n >= scale {
            let v = n as f64 / scale as f64;
            return if v >= 100.0 || unit == "MiB" && v >= 10.0 {
                format!("{v:.0} {unit}")
            } else {
                format!("{v:.1} {unit}")
            };
        }
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 8B shape on an H200-sized GPU: the 128 streams at depth 8192.
    fn h200_8b() -> MemoryFit {
        let gib = 1u64 << 30;
        MemoryFit {
            device: "GPU",
            free: 140 * gib,
            free_from: "the GPU".into(),
            weights: 15 * gib,
            buffers: gib,
            reserve: gib / 2,
            // 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes.
            kv_per_token: 32 * 8 * 128 * 2 * 2,
        }
    }

    #[test]
    fn a_case_too_big_for_the_gpu_is_refused_with_the_numbers_and_what_to_lower() {
        let fit = h200_8b();
        let err = fit
            .check_streams(128, 8320, "--concurrency or --depth")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "128 streams x 8,320 tokens need 130 GiB of KV cache; 124 GiB are free on the GPU \
             after the weights (15.0 GiB) and step buffers (1.0 GiB): lower --concurrency or --depth"
        );
        assert!(fit.check_streams(32, 8320, "--concurrency").is_ok());
        // What does fit: 123.5 GiB / 128 KiB a token.
        assert_eq!(fit.kv_room() / fit.kv_per_token, 1_011_712);
    }

    #[test]
    fn weights_that_do_not_fit_are_refused_before_the_kv_cache() {
        let fit = MemoryFit {
            free: 12 << 30,
            ..h200_8b()
        };
        let err = fit.check_streams(1, 16, "--depth").unwrap_err().to_string();
        assert!(
            err.starts_with("the weights (15.0 GiB) and step buffers (1.0 GiB) need 16.5 GiB"),
            "{err}"
        );
        assert!(err.contains("--device cpu"), "{err}");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(8320), "8,320");
        assert_eq!(thousands(1_048_576), "1,048,576");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 10), "3.0 KiB");
        assert_eq!(bytes(512 << 20), "512 MiB");
        assert_eq!(bytes(5 << 20), "5.0 MiB");
        assert_eq!(bytes(139_586_437_120), "130 GiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(count(1, "stream"), "1 stream");
    }
}
