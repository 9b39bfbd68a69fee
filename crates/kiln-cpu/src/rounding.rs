//! The roundings of a backend that stores activations in a narrower format than f32 (the CUDA
//! backend in bf16 or f16), emulated by the f32 CPU backend: the reference such a backend is
//! held to, and the way to see which rounding point an error enters at.
//!
//! A bf16 GPU rounds, besides its weights (which a source rounds before either backend loads
//! them): the input of every projection (the normed rows, the attention output, the gated
//! activation, the residual stream the per-layer gate and projection read, the final normed
//! rows), Q after its norm and RoPE, K and V as they enter the cache, and in its tensor-core
//! attention the probabilities the P V product reads (the softmax sum stays f32). The residual
//! stream, projection outputs, norms and softmax statistics stay f32. Each point can be turned
//! on alone. The tensor-core kernels round each probability against the running maximum of the
//! keys seen so far, tile by tile; the emulation rounds it against the row's maximum, an
//! equally valid rounding of the same values.

use half::{bf16, f16};

/// A narrower storage format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Narrow {
    Bf16,
    F16,
}

impl Narrow {
    /// `x` rounded to this format (to nearest even), back in f32.
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            Narrow::Bf16 => bf16::from_f32(x).to_f32(),
            Narrow::F16 => f16::from_f32(x).to_f32(),
        }
    }

    /// Every element of `v` rounded in place.
    pub fn round_all(self, v: &mut [f32]) {
        v.iter_mut().for_each(|x| *x = self.round(*x));
    }
}

/// Which rounding points of a narrower-storage backend the CPU reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rounding {
    pub format: Narrow,
    /// The input rows of every projection and of the LM head.
    pub gemm_inputs: bool,
    /// Q after its norm and RoPE.
    pub q: bool,
    /// K and V as written to the cache.
    pub kv: bool,
    /// The attention probabilities of prefill rows (rows of chunks longer than one token) as
    /// the P V product reads them; their sum stays f32.
    pub prefill_probs: bool,
    /// The same in decode rows (rows of one-token chunks), in layers whose head dim is at most
    /// this (0: in none): a GPU whose decode attention runs on the tensor cores.
    pub decode_probs_max_hd: usize,
}

impl Rounding {
    /// Every rounding point of a GPU storing `format` whose prefill attention runs on the
    /// tensor cores (probabilities rounded in bf16) and decode attention on CUDA cores (not
    /// rounded; set `decode_probs_max_hd` for a tensor-core decode kernel). The f16 GPU runs
    /// every row through the CUDA-core split kernel.
    pub fn of_gpu(format: Narrow) -> Rounding {
        Rounding {
            format,
            gemm_inputs: true,
            q: true,
            kv: true,
            prefill_probs: format == Narrow::Bf16,
            decode_probs_max_hd: 0,
        }
    }

    /// Whether the probabilities of a row are rounded: a prefill row (of a chunk longer than
    /// one token) or not, in a layer of head dim `hd`.
    pub fn rounds_probs(&self, prefill: bool, hd: usize) -> bool {
        match prefill {
            true => self.prefill_probs,
            false => hd <= self.decode_probs_max_hd,
        }
    }

    /// No rounding point on (a base to turn single points on from).
    pub fn none(format: Narrow) -> Rounding {
        Rounding {
            format,
            gemm_inputs: false,
            q: false,
            kv: false,
            prefill_probs: false,
            decode_probs_max_hd: 0,
        }
    }
}
