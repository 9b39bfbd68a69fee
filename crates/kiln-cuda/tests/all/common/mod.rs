//! Shared by the GPU tests: the skip-or-fail gate, a seeded RNG (fresh inputs each run, the seed
//! printed so a failure can be replayed with KILN_TEST_SEED), bf16 helpers and a check log that
//! prints one PASS/FAIL line per case with its error, size and time.
#![allow(dead_code)]

pub mod assistant;
pub mod attn;
pub mod models;
pub mod parity;
pub mod planted;
pub mod reference;
pub mod rope_case;

use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::StoreType;

/// The GPU, or None after printing why the test is skipped. With KILN_REQUIRE_GPU=1 a missing
/// GPU fails the test instead.
pub fn gpu_or_skip(test: &str) -> Option<Gpu> {
    gpu_with_store_or_skip(test, StoreType::Bf16)
}

/// A kernel contract's frame: the GPU (or the test skipped without one), the test's seeded
/// random source, checks named `label` that `cases` runs, then their verdict.
pub fn run_contract(test: &str, label: &str, cases: impl FnOnce(&Gpu, &mut Rng, &mut Checks)) {
    let Some(gpu) = gpu_or_skip(test) else {
        return;
    };
    let mut rng = Rng::new(test);
    let mut c = Checks::new(label);
    cases(&gpu, &mut rng, &mut c);
    c.finish();
}

/// [`gpu_or_skip`] with the kernels built for storage type `store`.
pub fn gpu_with_store_or_skip(test: &str, store: StoreType) -> Option<Gpu> {
    match kiln_cuda::unavailable_reason() {
        None => Some(Gpu::with_store(0, store).expect("opening the GPU")),
        Some(why) => {
            if std::env::var("KILN_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("{test}: KILN_REQUIRE_GPU=1 but {why}");
            }
            eprintln!("SKIP {test}: {why}");
            None
        }
    }
}

pub struct Rng(u64);

impl Rng {
    /// Seeded from KILN_TEST_SEED, else from the clock; prints the seed.
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("KILN_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{test}: KILN_TEST_SEED={seed}");
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn vec(&mut self, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(-amp, amp)).collect()
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

pub fn bf16_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

pub fn bf16_val(bits: u16) -> f32 {
    half::bf16::from_bits(bits).to_f32()
}

pub fn to_bf16(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&x| bf16_bits(x)).collect()
}

pub fn from_bf16(v: &[u16]) -> Vec<f32> {
    v.iter().map(|&b| bf16_val(b)).collect()
}

/// Rounds through bf16, as the device sees a value it was given in bf16.
pub fn rb(x: f32) -> f32 {
    bf16_val(bf16_bits(x))
}

pub fn round_bf16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| rb(x)).collect()
}

/// Collects per-case results and prints a line for each.
pub struct Checks {
    test: String,
    failures: Vec<String>,
    passed: usize,
    /// Prints nothing (a planted-bug run, whose failures are the point).
    quiet: bool,
}

impl Checks {
    pub fn new(test: &str) -> Checks {
        Checks {
            test: test.to_string(),
            failures: Vec::new(),
            passed: 0,
            quiet: false,
        }
    }

    /// Checks that print no line: for a run on kernels with a planted bug, where the caller
    /// asks [`Checks::failed`] how many cases caught it.
    pub fn quiet(test: &str) -> Checks {
        Checks {
            quiet: true,
            ..Checks::new(test)
        }
    }

    /// Cases that failed so far.
    pub fn failed(&self) -> usize {
        self.failures.len()
    }

    /// Compares `got` with the float64 reference: |got - want| <= atol + rtol * |want| everywhere,
    /// NaN or a poisoned (never written) element fails.
    pub fn close(
        &mut self,
        case: &str,
        got: &[f32],
        want: &[f64],
        atol: f64,
        rtol: f64,
        secs: f64,
    ) {
        let mut worst = 0f64;
        let mut worst_at = 0usize;
        let mut bad = 0usize;
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let err = (g as f64 - w).abs();
            let ok = g.is_finite() && err <= atol + rtol * w.abs();
            if !ok {
                bad += 1;
            }
            if !g.is_finite() || err > worst {
                worst = if g.is_finite() { err } else { f64::INFINITY };
                worst_at = i;
            }
        }
        let len_ok = got.len() == want.len();
        let line = format!(
            "{} {case}: n={} max_err={worst:.3e} at {worst_at} (got {:?}, want {:?}) atol={atol:.1e} rtol={rtol:.1e} bad={bad} time={:.3}ms",
            if bad == 0 && len_ok { "PASS" } else { "FAIL" },
            got.len(),
            got.get(worst_at),
            want.get(worst_at),
            secs * 1e3
        );
        self.record(bad == 0 && len_ok, line);
    }

    /// Bit-for-bit equality (invariance checks).
    pub fn identical<T: PartialEq + Copy + std::fmt::Debug>(
        &mut self,
        case: &str,
        a: &[T],
        b: &[T],
    ) {
        let first = a.iter().zip(b).position(|(x, y)| x != y);
        let ok = a.len() == b.len() && first.is_none();
        let line = match first {
            None if ok => format!("PASS {case}: {} elements identical", a.len()),
            None => format!("FAIL {case}: lengths {} vs {}", a.len(), b.len()),
            Some(i) => format!(
                "FAIL {case}: first difference at {i}: {:?} vs {:?}",
                a[i], b[i]
            ),
        };
        self.record(ok, line);
    }

    pub fn check(&mut self, ok: bool, line: String) {
        self.record(ok, format!("{} {line}", if ok { "PASS" } else { "FAIL" }));
    }

    fn record(&mut self, ok: bool, line: String) {
        if !self.quiet {
            eprintln!("[{}] {line}", self.test);
        }
        if ok {
            self.passed += 1;
        } else {
            self.failures.push(line);
        }
    }

    pub fn finish(self) {
        eprintln!(
            "[{}] {} passed, {} failed",
            self.test,
            self.passed,
            self.failures.len()
        );
        assert!(
            self.failures.is_empty(),
            "{}: {} case(s) failed:\n{}",
            self.test,
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

/// Seconds taken by `f` including a device synchronisation.
pub fn timed(gpu: &Gpu, f: impl FnOnce() -> anyhow::Result<()>) -> f64 {
    let t = std::time::Instant::now();
    f().expect("kernel launch");
    gpu.synchronize().expect("kernel run");
    t.elapsed().as_secs_f64()
}

/// The bits of f32 values, for comparisons that must be exact (NaN included).
pub fn f32_bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `v` on the device.
pub fn up<T: Copy + Default>(gpu: &Gpu, v: &[T]) -> DevBuf<T> {
    let d = gpu.alloc::<T>(v.len()).unwrap();
    d.upload(0, v).unwrap();
    d
}

/// `len` elements of all-ones bytes (NaN as floats): what a kernel leaves unwritten shows.
pub fn poisoned<T: Copy + Default>(gpu: &Gpu, len: usize) -> DevBuf<T> {
    let d = gpu.alloc::<T>(len).unwrap();
    d.fill_bytes(0xff).unwrap();
    d
}

/// The whole of `d` on the host.
pub fn all<T: Copy + Default>(gpu: &Gpu, d: &DevBuf<T>) -> Vec<T> {
    d.download(gpu, 0, d.len()).unwrap()
}
