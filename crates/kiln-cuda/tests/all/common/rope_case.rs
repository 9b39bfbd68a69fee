//! A RoPE + KV-write case for the fused QKV epilogues' contracts (bf16 and quantised): a RoPE
//! table, a bias, random positions and cache slots of `m` rows, and qkv_prepare's output on a
//! QKV projection as the reference each fused launch must match bit for bit.

use super::{all, poisoned, to_bf16, up, Rng};
use kiln_cuda::device::{DevBuf, Gpu};
use kiln_cuda::kernels::{KvView, QkvKind};
use kiln_cuda::skinny_fused::{Epilogue, RopeOut};

const BLOCK_SIZE: usize = 16;
const BLOCKS: usize = 64;
const MAX_POS: usize = 512;

/// Where a launch writes Q and the K/V cache.
pub struct RopeOutputs {
    q: DevBuf<u16>,
    k: DevBuf<u16>,
    v: DevBuf<u16>,
}

pub struct RopeCase {
    pub m: usize,
    pub n_q: usize,
    pub n_kv: usize,
    pub hd: usize,
    pub neox: bool,
    bias: Option<DevBuf<u16>>,
    table: DevBuf<f32>,
    pos: DevBuf<i32>,
    slots: DevBuf<i32>,
}

impl RopeCase {
    pub fn new(
        gpu: &Gpu,
        rng: &mut Rng,
        m: usize,
        (n_q, n_kv, hd): (usize, usize, usize),
        neox: bool,
        bias: bool,
    ) -> RopeCase {
        let half = hd / 2;
        let inv: Vec<f32> = (0..half)
            .map(|i| 10000f32.powf(-((2 * i) as f32) / hd as f32))
            .collect();
        let (inv, table) = (up(gpu, &inv), gpu.alloc::<f32>(MAX_POS * half * 2).unwrap());
        gpu.rope_table_build(table.ptr(), inv.ptr(), MAX_POS, half, 1.0)
            .unwrap();
        let heads = n_q + 2 * n_kv;
        let b = up(gpu, &to_bf16(&rng.vec(heads * hd, 0.5)));
        let pos: Vec<i32> = (0..m).map(|_| rng.below(MAX_POS) as i32).collect();
        let mut slots: Vec<i32> = (0..(BLOCKS * BLOCK_SIZE) as i32).collect();
        rng.shuffle(&mut slots);
        slots.truncate(m);
        RopeCase {
            m,
            n_q,
            n_kv,
            hd,
            neox,
            bias: bias.then_some(b),
            table,
            pos: up(gpu, &pos),
            slots: up(gpu, &slots),
        }
    }

    /// Poisoned Q and K/V cache.
    pub fn outputs(&self, gpu: &Gpu) -> RopeOutputs {
        let cache = BLOCKS * self.n_kv * BLOCK_SIZE * self.hd;
        RopeOutputs {
            q: poisoned(gpu, self.m * self.n_q * self.hd),
            k: poisoned(gpu, cache),
            v: poisoned(gpu, cache),
        }
    }

    fn kv(&self, o: &RopeOutputs) -> KvView {
        KvView {
            k: o.k.ptr(),
            v: o.v.ptr(),
            n_kv: self.n_kv,
            block_size: BLOCK_SIZE,
        }
    }

    fn bias_ptr(&self) -> u64 {
        self.bias.as_ref().map_or(0, |b| b.ptr())
    }

    /// qkv_prepare on `qkv` (f32 [m, heads * hd]): what every fused launch must write.
    pub fn reference(&self, gpu: &Gpu, qkv: u64) -> RopeOutputs {
        let o = self.outputs(gpu);
        gpu.qkv_prepare(
            qkv,
            self.bias_ptr(),
            0,
            0,
            self.table.ptr(),
            self.pos.ptr(),
            self.slots.ptr(),
            o.q.ptr(),
            self.kv(&o),
            self.m,
            self.n_q,
            self.hd,
            self.neox,
            1e-6,
            QkvKind::Full,
            false,
        )
        .unwrap();
        o
    }

    /// The fused epilogue writing into `o`.
    pub fn epilogue(&self, o: &RopeOutputs) -> Epilogue {
        Epilogue::Rope(RopeOut {
            q_out: o.q.ptr(),
            bias: self.bias_ptr(),
            rope: self.table.ptr(),
            positions: self.pos.ptr(),
            slots: self.slots.ptr(),
            kv: self.kv(o),
            n_q: self.n_q,
            hd: self.hd,
            neox: self.neox,
        })
    }

    /// Q, K cache, V cache of `got` against `want`, bit for bit.
    pub fn compare(
        &self,
        gpu: &Gpu,
        c: &mut super::Checks,
        what: &str,
        got: &RopeOutputs,
        want: &RopeOutputs,
    ) {
        for (part, g, w) in [
            ("q", &got.q, &want.q),
            ("k", &got.k, &want.k),
            ("v", &got.v, &want.v),
        ] {
            c.identical(&format!("{what}: {part}"), &all(gpu, g), &all(gpu, w));
        }
    }
}
