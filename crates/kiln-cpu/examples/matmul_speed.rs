//! Speed of one matmul shape: `cargo run --release -p kiln-cpu --example matmul_speed -- M N K THREADS`.
//! Reports wall-clock rates and rates per CPU-second; the latter stay meaningful on a machine
//! shared with other work.

use kiln_cpu::kernels::{matmul, PackedMatrix};
use std::time::Instant;
/// CPU time of all threads of this process, in seconds (robust to other load on the machine).
fn cpu_s() -> f64 {
    let mut ns = 0u64;
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let p = e.unwrap().path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(p) {
            ns += s.split_whitespace().next().unwrap().parse::<u64>().unwrap();
        }
    }
    ns as f64 * 1e-9
}
fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    let (m, n, k, threads) = (args[0], args[1], args[2], args[3]);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3)
        .collect();
    let p = PackedMatrix::pack(n, k, &w).unwrap();
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 31) % 100) as f32 * 1e-2).collect();
    let mut out = vec![0.0; m * n];
    pool.install(|| matmul(&x, &p, &mut out));
    let reps = (2e10 / (2.0 * (m * n * k) as f64)).clamp(3.0, 2000.0) as usize;
    let (t, c) = (Instant::now(), cpu_s());
    for _ in 0..reps {
        pool.install(|| matmul(&x, &p, &mut out));
    }
    let s = t.elapsed().as_secs_f64() / reps as f64;
    let cs = (cpu_s() - c) / reps as f64;
    let flop = 2.0 * (m * n * k) as f64;
    println!(
        "{m}x{n}x{k} t{threads}: wall {:.3} ms {:.1} GFLOP/s {:.1} GB/s | per cpu-second {:.1} GFLOP {:.1} GB",
        s * 1e3, flop / s / 1e9, (n * k * 4) as f64 / s / 1e9, flop / cs / 1e9, (n * k * 4) as f64 / cs / 1e9
    );
}
