//! Attention test cases on the device: a paged KV cache behind shuffled block tables (slots no
//! sequence owns are NaN), query rows that keep their values whatever step they are packed
//! into, steps packed from any subset of the chunks, and the float64 reference.
#![allow(dead_code)]

use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::kernels::{decode_part_splits, AttnInputs, FlashTiles, KvView};
use kiln_cuda::step_plan::{pack_step, StepLayout, StepPlan};
use kiln_step::ChunkInput;

use std::collections::HashMap;

use crate::common::{rb, round_bf16, timed, to_bf16, Rng};

pub const BS: usize = 16;

/// A chunk of `rows` tokens from `start`; chunks with the same `table` are one sequence (a
/// chunked prompt, or the rows of a verify step) and share its blocks.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    pub start: usize,
    pub rows: usize,
    pub table: usize,
}

/// Chunks of their own sequences, from (start, rows).
pub fn own(chunks: &[(usize, usize)]) -> Vec<Chunk> {
    chunks
        .iter()
        .enumerate()
        .map(|(i, &(start, rows))| Chunk {
            start,
            rows,
            table: i,
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct Case {
    pub n_q: usize,
    pub n_kv: usize,
    pub hd: usize,
    pub window: usize,
    pub chunks: Vec<Chunk>,
}

impl Case {
    pub fn name(&self) -> String {
        format!(
            "n_q={} n_kv={} hd={} window={}",
            self.n_q, self.n_kv, self.hd, self.window
        )
    }
}

/// The KV cache and query values of a case, on the host and the device.
pub struct Setup {
    pub case: Case,
    pub tables: Vec<Vec<u32>>,
    pub kc: Vec<f32>,
    pub vc: Vec<f32>,
    /// n_q x hd query values (bf16-exact) of (table, position): the same in every step.
    pub q: HashMap<(usize, usize), Vec<f32>>,
    pub dk: DevBuf<u16>,
    pub dv: DevBuf<u16>,
    pub num_blocks: usize,
}

/// One packed step of some of a case's chunks, uploaded.
pub struct Step {
    pub layout: StepLayout,
    pub buf: DevBuf<i32>,
    pub plan: StepPlan,
    /// (chunk, row) of each flat token, in packed order (decode rows first).
    pub flat: Vec<(usize, usize)>,
    pub dq: DevBuf<u16>,
    pub n_q: usize,
    pub hd: usize,
}

impl Setup {
    pub fn new(gpu: &Gpu, rng: &mut Rng, case: &Case) -> Setup {
        let (n_q, n_kv, hd) = (case.n_q, case.n_kv, case.hd);
        let n_tables = case.chunks.iter().map(|c| c.table + 1).max().unwrap_or(0);
        let end = |t: usize| {
            case.chunks
                .iter()
                .filter(|c| c.table == t)
                .map(|c| c.start + c.rows)
                .max()
                .unwrap_or(0)
        };
        let need: Vec<usize> = (0..n_tables).map(|t| end(t).div_ceil(BS)).collect();
        let num_blocks = need.iter().sum::<usize>() + 7;
        let mut pool: Vec<u32> = (0..num_blocks as u32).collect();
        rng.shuffle(&mut pool);
        let mut tables = Vec::new();
        let mut next = 0;
        for &b in &need {
            tables.push(pool[next..next + b].to_vec());
            next += b;
        }
        // K/V for every position below each sequence's end; everything else NaN.
        let cache_len = num_blocks * n_kv * BS * hd;
        let (mut kc, mut vc) = (vec![f32::NAN; cache_len], vec![f32::NAN; cache_len]);
        for (t, table) in tables.iter().enumerate() {
            for p in 0..end(t) {
                for h in 0..n_kv {
                    let at = ((table[p / BS] as usize * n_kv + h) * BS + p % BS) * hd;
                    for i in 0..hd {
                        kc[at + i] = rb(rng.uniform(-1.0, 1.0));
                        vc[at + i] = rb(rng.uniform(-1.0, 1.0));
                    }
                }
            }
        }
        let mut q = HashMap::new();
        for c in &case.chunks {
            for p in c.start..c.start + c.rows {
                q.entry((c.table, p))
                    .or_insert_with(|| round_bf16(&rng.vec(n_q * hd, 2.0)));
            }
        }
        let (dk, dv) = (
            gpu.alloc::<u16>(cache_len).unwrap(),
            gpu.alloc::<u16>(cache_len).unwrap(),
        );
        dk.upload(0, &to_bf16(&kc)).unwrap();
        dv.upload(0, &to_bf16(&vc)).unwrap();
        Setup {
            case: case.clone(),
            tables,
            kc,
            vc,
            q,
            dk,
            dv,
            num_blocks,
        }
    }

    pub fn kv(&self) -> KvView {
        KvView {
            k: self.dk.ptr(),
            v: self.dv.ptr(),
            n_kv: self.case.n_kv,
            block_size: BS,
        }
    }

    /// Packs chunks `which` (in that order, as the engine would hand them over) into a step.
    pub fn step(&self, gpu: &Gpu, which: &[usize]) -> Step {
        let (n_q, hd) = (self.case.n_q, self.case.hd);
        let tokens: Vec<Vec<u32>> = which
            .iter()
            .map(|&ci| vec![1u32; self.case.chunks[ci].rows])
            .collect();
        let chunks: Vec<ChunkInput<'_>> = which
            .iter()
            .enumerate()
            .map(|(i, &ci)| {
                let c = self.case.chunks[ci];
                ChunkInput {
                    tokens: &tokens[i],
                    start_pos: c.start,
                    block_table: &self.tables[c.table],
                    want_logits: true,
                }
            })
            .collect();
        let max_tokens: usize = chunks.iter().map(|c| c.tokens.len()).sum();
        let max_ctx = chunks
            .iter()
            .map(|c| c.start_pos + c.tokens.len())
            .max()
            .unwrap();
        let layout = StepLayout::new(max_tokens, chunks.len(), max_ctx, BS, self.num_blocks, 2);
        let mut packed = vec![0i32; layout.len];
        let plan = pack_step(&chunks, &layout, &mut packed).unwrap();
        let order: Vec<usize> = (0..which.len())
            .filter(|&i| chunks[i].tokens.len() == 1)
            .chain((0..which.len()).filter(|&i| chunks[i].tokens.len() > 1))
            .map(|i| which[i])
            .collect();
        let flat: Vec<(usize, usize)> = order
            .iter()
            .flat_map(|&ci| (0..self.case.chunks[ci].rows).map(move |j| (ci, j)))
            .collect();
        let mut q = Vec::with_capacity(flat.len() * n_q * hd);
        for &(ci, j) in &flat {
            let c = self.case.chunks[ci];
            q.extend_from_slice(&self.q[&(c.table, c.start + j)]);
        }
        let buf = gpu.alloc::<i32>(layout.len).unwrap();
        buf.upload(0, &packed).unwrap();
        let dq = gpu.alloc::<u16>(q.len()).unwrap();
        dq.upload(0, &to_bf16(&q)).unwrap();
        Step {
            layout,
            buf,
            plan,
            flat,
            dq,
            n_q,
            hd,
        }
    }

    /// out[h][:] in float64 for row `j` of chunk `ci`.
    pub fn reference(&self, ci: usize, j: usize, h: usize) -> Vec<f64> {
        let (hd, n_kv, n_q) = (self.case.hd, self.case.n_kv, self.case.n_q);
        let c = self.case.chunks[ci];
        let pos = c.start + j;
        let table = &self.tables[c.table];
        let q = &self.q[&(c.table, pos)][h * hd..(h + 1) * hd];
        let kvh = h / (n_q / n_kv);
        let lo = if self.case.window > 0 {
            (pos + 1).saturating_sub(self.case.window)
        } else {
            0
        };
        let scale = 1.0 / (hd as f64).sqrt();
        let at = |p: usize| ((table[p / BS] as usize * n_kv + kvh) * BS + p % BS) * hd;
        let scores: Vec<f64> = (lo..=pos)
            .map(|p| {
                (0..hd)
                    .map(|i| q[i] as f64 * self.kc[at(p) + i] as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = e.iter().sum();
        // Key by key over V's contiguous rows (each column still summed in key order): column
        // by column, every key's read was a cache miss, about a second a row and head at 128k keys.
        let mut out = vec![0.0f64; hd];
        for (p, w) in (lo..=pos).zip(&e) {
            let v = &self.vc[at(p)..at(p) + hd];
            for (o, &x) in out.iter_mut().zip(v) {
                *o += w * x as f64;
            }
        }
        out.iter().map(|o| o / z).collect()
    }
}

impl Step {
    pub fn inputs(&self) -> AttnInputs {
        AttnInputs {
            positions: self.buf.at(self.layout.positions),
            token_seq: self.buf.at(self.layout.token_seq),
            bt_start: self.buf.at(self.layout.bt_start),
            block_tables: self.buf.at(self.layout.block_tables),
            old_keys_ready: true,
        }
    }

    pub fn tiles(&self) -> FlashTiles {
        FlashTiles {
            ptr: self.buf.at(self.layout.tiles),
            n: self.plan.n_tiles,
        }
    }

    pub fn n_decode(&self) -> usize {
        self.plan.n_decode
    }

    /// Runs `launch(out)` into a poisoned output and returns it (bf16 bits) with the time the
    /// launch took.
    pub fn run(
        &self,
        gpu: &Gpu,
        launch: impl FnOnce(u64) -> anyhow::Result<()>,
    ) -> (Vec<u16>, f64) {
        let n = self.flat.len() * self.n_q * self.hd;
        let out = gpu.alloc::<u16>(n).unwrap();
        out.fill_bytes(0xff).unwrap();
        let secs = timed(gpu, || launch(out.ptr()));
        (out.download(gpu, 0, n).unwrap(), secs)
    }

    /// Partial buffers for decode attention over this step's decode rows.
    pub fn partials(&self, gpu: &Gpu) -> (DevBuf<f32>, DevBuf<f32>) {
        let rows = self.plan.n_decode.max(1);
        (
            gpu.alloc::<f32>(rows * self.n_q * decode_part_splits() * self.hd)
                .unwrap(),
            gpu.alloc::<f32>(rows * self.n_q * decode_part_splits() * 2)
                .unwrap(),
        )
    }

    /// The output of flat token `f` (all heads) from a run's result.
    pub fn row<'a>(&self, out: &'a [u16], f: usize) -> &'a [u16] {
        let w = self.n_q * self.hd;
        &out[f * w..(f + 1) * w]
    }

    /// Flat index of (chunk, row) in this step.
    pub fn flat_of(&self, ci: usize, j: usize) -> Option<usize> {
        self.flat.iter().position(|&x| x == (ci, j))
    }
}
