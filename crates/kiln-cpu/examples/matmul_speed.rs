//! Speed of one matmul shape:
//! `cargo run --release -p kiln-cpu --example matmul_speed -- M N K THREADS [bf16]`.
//! With `bf16` the weights are rounded to bf16 and so stored in 16 bits. Reports wall-clock
//! rates and rates per CPU-second; the latter stay meaningful on a machine shared with other
//! work.

#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::time::Instant;

use kiln_cpu::kernels::{matmul, PackedMatrix};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(args.len() >= 4, "usage: matmul_speed M N K THREADS [bf16]");
    let dims: Vec<usize> = args[..4]
        .iter()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let (m, n, k, threads) = (dims[0], dims[1], dims[2], dims[3]);
    let bf16 = args.get(4).is_some_and(|a| a == "bf16");

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3)
        .map(|v| {
            if bf16 {
                f32::from_bits(v.to_bits() & 0xFFFF_0000)
            } else {
                v
            }
        })
        .collect();
    let packed = PackedMatrix::pack(n, k, &w)?;
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 31) % 100) as f32 * 1e-2).collect();
    let mut out = vec![0.0; m * n];
    pool.install(|| kiln_cpu::kernels::matmul(&x, &packed, &mut out));

    let flop = 2.0 * (m * n * k) as f64;
    let bytes = (n * k * if bf16 { 2 } else { 4 }) as f64;
    let reps = (4e10 / flop).clamp(5.0, 2000.0) as usize;
    let (wall, cpu) = (Instant::now(), cpu_time::cpu_seconds());
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let rep = Instant::now();
        pool.install(|| matmul(&x, &packed, &mut out));
        best = best.min(rep.elapsed().as_secs_f64());
    }
    let wall = wall.elapsed().as_secs_f64() / reps as f64;
    let cpu = (cpu_time::cpu_seconds() - cpu) / reps as f64;
    println!(
        "{m}x{n}x{k} threads {threads} {:?}: {:.3} ms, {:.1} GFLOP/s, weights {:.1} GB/s | per CPU-second: {:.1} GFLOP, {:.1} GB | best: {:.1} GFLOP/s",
        packed.format(),
        wall * 1e3,
        flop / wall / 1e9,
        bytes / wall / 1e9,
        flop / cpu / 1e9,
        bytes / cpu / 1e9,
        flop / best / 1e9,
    );
    Ok(())
}
