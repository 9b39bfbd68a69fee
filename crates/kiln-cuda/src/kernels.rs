//! Typed launchers for the kernels in kernels/*.cu: one method per kernel, grid and block sizes
//! chosen here, argument lists matching the .cu signatures. Pointers are device addresses.

use anyhow::{bail, Result};

pub use crate::attn_launch::DecodeKernel;
use crate::device::{i32_of, Arg, Gpu};
use crate::store::StoreType;
pub use crate::switches::KernelChoice;
use crate::switches::Switches;

/// Head dims with a flash-attention and a decode-attention instantiation.
pub const FLASH_HEAD_DIMS: [usize; 5] = [16, 32, 64, 128, 256];
/// Every head dim attention runs at: those of flash_attn.cu and decode_attn.cu, and the wide
/// heads of flash_wide.cu and decode_wide.cu (attn_wide.rs).
pub const ATTN_HEAD_DIMS: [usize; 6] = [16, 32, 64, 128, 256, 512];
/// Query rows per flash-attention tile.
pub const FLASH_TILE_ROWS: usize = 64;
/// Decode attention: at most this many KV splits per sequence, each at least this many keys.
/// (64 splits of 128 keys at depth 8k: 512 CTAs, all resident on an H200 at once.)
pub const DECODE_MAX_SPLITS: usize = 64;
pub const DECODE_MIN_SPAN: usize = 64;
/// The most splits KILN_DECODE_SPLITS may give decode_mma a row (decode_mma_combine's room).
pub const DECODE_MMA_MAX_SPLITS: usize = 256;

/// Splits a row's room in the decode partials (`part_o`, `part_ml`): DECODE_MAX_SPLITS, or
/// more where KILN_DECODE_SPLITS or KILN_DECODE_LONG ask decode_mma for more.
pub fn decode_part_splits() -> usize {
    let sw = crate::switches::Switches::from_env();
    DECODE_MAX_SPLITS.max(decode_mma_splits(&sw).0)
}

/// decode_mma's split rule from the switches: the most splits of a row (also the partials'
/// stride) and the length past which rows take that many, 0 where all do. Rows up to that
/// length take half as many (KILN_DECODE_LONG: long rows get shorter spans, hence more warps,
/// without more splits for the rest); where doubling would pass DECODE_MMA_MAX_SPLITS the
/// switch is ignored. A row's splits stay a function of its own length.
pub fn decode_mma_splits(sw: &crate::switches::Switches) -> (usize, usize) {
    let n = sw
        .decode_mma_splits
        .unwrap_or(DECODE_MAX_SPLITS)
        .min(DECODE_MMA_MAX_SPLITS);
    match sw.decode_long_from {
        Some(from) if 2 * n <= DECODE_MMA_MAX_SPLITS => (2 * n, from),
        _ => (n, 0),
    }
}

fn flash_block_n(hd: usize) -> usize {
    if hd >= 256 {
        32
    } else {
        64
    }
}

/// Dynamic shared memory of a flash kernel serving `heads` query heads per CTA: their Q tiles
/// plus two stages of K and V, rows padded by 8.
pub fn flash_smem_bytes(hd: usize, heads: usize) -> usize {
    let ld = hd + 8;
    (heads * FLASH_TILE_ROWS * ld + 4 * flash_block_n(hd) * ld) * 2
}

/// The dynamic shared memory a kernel may take without asking for more.
const DEFAULT_SMEM_BYTES: usize = 48 << 10;

/// Kernels that need more than the default 48 KB of dynamic shared memory, with their needs:
/// each module lists its kernels' needs, and only here are the large ones picked.
pub fn large_smem_kernels() -> Vec<(String, usize)> {
    let flash = FLASH_HEAD_DIMS.into_iter().flat_map(|hd| {
        [
            (format!("flash_attn_hd{hd}"), flash_smem_bytes(hd, 1)),
            (format!("flash_attn2_hd{hd}"), flash_smem_bytes(hd, 2)),
        ]
    });
    flash
        .chain(crate::skinny::smem_needs())
        .chain(crate::skinny_tc::smem_needs())
        .chain(crate::skinny_wg::smem_needs())
        .chain(crate::wg_rows::smem_needs())
        .chain(crate::chain_gemm::smem_needs())
        .chain(crate::attn_launch::smem_needs())
        .chain(crate::attn_wide::smem_needs())
        .chain(crate::quant_gemm::smem_needs())
        .chain(crate::fp8_skinny::smem_needs())
        .filter(|&(_, bytes)| bytes > DEFAULT_SMEM_BYTES)
        .collect()
}

pub(crate) fn grid_1d(n: usize, block: usize, cap: usize) -> (u32, u32, u32) {
    (n.div_ceil(block).clamp(1, cap) as u32, 1, 1)
}

/// Whether argmax_rows reads four logits a load: rows 16-byte aligned, and not switched off
/// (KILN_ARGMAX_VEC=0).
fn argmax_vec(vocab: usize) -> bool {
    Switches::from_env().argmax_vec && vocab.is_multiple_of(4)
}

/// The grid and the `vec` argument of the gated activations (common.cuh's `gated_rows`, blocks
/// of 256 threads): along x enough CTAs for one row's `inter` values, four a thread when
/// `inter` is a multiple of 4 and KILN_GATED_VEC allows; along y a CTA row per token row, up to
/// the grid's limit (the kernel strides past it).
pub(crate) fn gated_grid(inter: usize, rows: usize) -> ((u32, u32, u32), i32) {
    let vec = Switches::from_env().gated_vec && inter.is_multiple_of(4);
    let x = inter.div_ceil(if vec { 4 } else { 1 } * 256).max(1);
    ((x as u32, rows.clamp(1, 65_535) as u32, 1), vec as i32)
}

/// What `qkv_prepare` finds in a row of the QKV projection and writes to the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvKind {
    /// Q, K and V rows; K and V written to the cache.
    Full,
    /// Q and K rows; V is the K projection as it was before K's norm and RoPE
    /// (`attention_k_eq_v`).
    VFromK,
    /// Q rows only: the layer reads another layer's KV and writes none.
    QOnly,
}

impl QkvKind {
    /// The kind of a layer's attention.
    pub fn of(at: &kiln_model::AttnSpec) -> QkvKind {
        match (at.writes_kv(), at.v_from_k) {
            (false, _) => QkvKind::QOnly,
            (true, true) => QkvKind::VFromK,
            (true, false) => QkvKind::Full,
        }
    }

    /// The kernel's `kv_mode` argument.
    fn mode(self) -> i32 {
        match self {
            QkvKind::Full => 0,
            QkvKind::VFromK => 1,
            QkvKind::QOnly => 2,
        }
    }
}

/// Where a layer's KV cache lives and how it is laid out.
#[derive(Debug, Clone, Copy)]
pub struct KvView {
    pub k: u64,
    pub v: u64,
    pub n_kv: usize,
    pub block_size: usize,
}

/// Per-token inputs of attention, all device arrays indexed by flat token (or sequence).
#[derive(Debug, Clone, Copy)]
pub struct AttnInputs {
    pub positions: u64,
    pub token_seq: u64,
    /// Start of each sequence's block table inside `block_tables`.
    pub bt_start: u64,
    pub block_tables: u64,
    /// Whether every key before the first row of each sequence in the launch was written
    /// before the step's first kernel (a model's own step over all its rows: earlier steps
    /// wrote them, or copies queued before the step). Decode attention may then read them
    /// before the kernel ahead of it ends. Not so for a draft model's step, whose rows attend
    /// keys its target wrote in the same queue, or a launch from a later row.
    pub old_keys_ready: bool,
}

impl AttnInputs {
    /// The same inputs seen from flat token `row` on: a launch over rows row.. reads its rows'
    /// positions and sequences (block tables are per sequence and stay).
    pub fn from_row(&self, row: usize) -> AttnInputs {
        let skip = (row * std::mem::size_of::<i32>()) as u64;
        AttnInputs {
            positions: self.positions + skip,
            token_seq: self.token_seq + skip,
            // The rows before `row` of a sequence are out of sight.
            old_keys_ready: false,
            ..*self
        }
    }
}

/// One attention launch's operands: the query rows (n_q x hd bf16 each), the layer's cache,
/// the step's inputs, where the output rows go, and the layer's shape. Every attention entry
/// takes one, beside what its family adds (tiles, partials, a row count).
#[derive(Debug, Clone, Copy)]
pub struct AttnCall<'a> {
    pub q: u64,
    pub kv: KvView,
    pub inp: &'a AttnInputs,
    pub out: u64,
    pub n_q: usize,
    pub hd: usize,
    /// The most keys a row sees (0: every key up to its own).
    pub window: usize,
    pub scale: f32,
}

/// Where the split-KV decode kernels write each split's partial output and its (max, sum)
/// pair for their combine: rows x n_q x [`decode_part_splits`] of each.
#[derive(Debug, Clone, Copy)]
pub struct Partials {
    pub o: u64,
    pub ml: u64,
}

/// A prefill launch's tiles: a device array of {tok0, n_rows, seq, pos0}, and how many.
#[derive(Debug, Clone, Copy)]
pub struct FlashTiles {
    pub ptr: u64,
    pub n: usize,
}

impl Gpu {
    /// Opens device `ordinal` with its bf16 kernels: [`Gpu::with_store`] for bf16.
    pub fn new(ordinal: usize) -> Result<Gpu> {
        Gpu::with_store(ordinal, StoreType::Bf16)
    }

    /// Opens device `ordinal` with the kernels built for `store` compiled (or cached), PDL as
    /// the switches say, and every loaded kernel allowed the shared memory its launcher asks
    /// for (above 48 KB a kernel must say so first).
    pub fn with_store(ordinal: usize, store: StoreType) -> Result<Gpu> {
        Gpu::with_sources(ordinal, store, crate::kernel_sources::SOURCES)
    }

    /// [`Gpu::with_store`] with these kernel modules (tests that plant a bug in one of them).
    pub fn with_sources(
        ordinal: usize,
        store: StoreType,
        sources: &[crate::kernel_sources::KernelSource],
    ) -> Result<Gpu> {
        let gpu = Gpu::open_sources(ordinal, KernelChoice::from_env().pdl, store, sources)?;
        for (name, bytes) in large_smem_kernels() {
            if gpu.has_func(&name) {
                gpu.allow_smem(&name, bytes)?;
            }
        }
        if crate::switches::Switches::from_env().carveout_max {
            gpu.prefer_max_shared()?;
        }
        Ok(gpu)
    }

    pub fn embed_gather(
        &self,
        x: u64,
        emb: u64,
        tokens: u64,
        n_tokens: usize,
        hidden: usize,
        scale: f32,
    ) -> Result<()> {
        if n_tokens == 0 {
            return Ok(());
        }
        let h = i32_of(hidden, "hidden")?;
        self.launch(
            "embed_gather",
            (n_tokens as u32, 1, 1),
            256,
            0,
            &[
                Arg::Ptr(x),
                Arg::Ptr(emb),
                Arg::Ptr(tokens),
                Arg::I32(h),
                Arg::F32(scale),
            ],
        )
    }

    /// x += delta (delta 0 = none), out = rmsnorm(x) * w, for `rows` rows.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_residual(
        &self,
        x: u64,
        delta: u64,
        w: u64,
        out: u64,
        rows: usize,
        hidden: usize,
        eps: f32,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let args = [
            Arg::Ptr(x),
            Arg::Ptr(delta),
            Arg::Ptr(w),
            Arg::Ptr(out),
            Arg::I32(i32_of(hidden, "hidden")?),
            Arg::F32(eps),
        ];
        self.launch(
            "rmsnorm_residual",
            (rows as u32, 1, 1),
            norm_block(hidden),
            0,
            &args,
        )
    }

    /// out[r] = rmsnorm(x[rows[r]] + delta[rows[r]]) * w for r < n_rows (delta 0 = none).
    #[allow(clippy::too_many_arguments)]
    pub fn final_norm_rows(
        &self,
        x: u64,
        delta: u64,
        rows: u64,
        w: u64,
        out: u64,
        n_rows: usize,
        hidden: usize,
        eps: f32,
    ) -> Result<()> {
        if n_rows == 0 {
            return Ok(());
        }
        let args = [
            Arg::Ptr(x),
            Arg::Ptr(delta),
            Arg::Ptr(rows),
            Arg::Ptr(w),
            Arg::Ptr(out),
            Arg::I32(i32_of(hidden, "hidden")?),
            Arg::F32(eps),
        ];
        self.launch(
            "final_norm_rows",
            (n_rows as u32, 1, 1),
            norm_block(hidden),
            0,
            &args,
        )
    }

    pub fn swiglu(&self, gu: u64, out: u64, inter: usize, rows: usize) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let (grid, vec) = gated_grid(inter, rows);
        self.launch(
            "swiglu",
            grid,
            256,
            0,
            &[
                Arg::Ptr(gu),
                Arg::Ptr(out),
                Arg::I32(i32_of(inter, "inter")?),
                Arg::I32(i32_of(rows, "rows")?),
                Arg::I32(vec),
            ],
        )
    }

    pub fn argmax_rows(&self, logits: u64, ids: u64, rows: usize, vocab: usize) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        self.launch(
            "argmax_rows",
            (rows as u32, 1, 1),
            1024,
            0,
            &[
                Arg::Ptr(logits),
                Arg::Ptr(ids),
                Arg::I32(i32_of(vocab, "vocab")?),
                Arg::I32(argmax_vec(vocab) as i32),
            ],
        )
    }

    /// dst[i] = store(src[i]): f32 into the storage type, rounded to nearest even.
    pub fn f32_to_store(&self, dst: u64, src: u64, n: usize) -> Result<()> {
        let grid = grid_1d(n, 256, self.sm_count as usize * 32);
        self.launch(
            "f32_to_store_copy",
            grid,
            256,
            0,
            &[Arg::Ptr(dst), Arg::Ptr(src), Arg::U64(n as u64)],
        )
    }

    /// dst[i] = src[i] as f32, from the storage type (exact).
    pub fn store_to_f32(&self, dst: u64, src: u64, n: usize) -> Result<()> {
        let grid = grid_1d(n, 256, self.sm_count as usize * 32);
        self.launch(
            "store_to_f32_copy",
            grid,
            256,
            0,
            &[Arg::Ptr(dst), Arg::Ptr(src), Arg::U64(n as u64)],
        )
    }

    /// dst[i] = store(dummy_value(seed, i)) for i < n.
    pub fn dummy_fill(&self, dst: u64, n: usize, seed: u64) -> Result<()> {
        let grid = grid_1d(n, 256, self.sm_count as usize * 32);
        self.launch(
            "dummy_fill",
            grid,
            256,
            0,
            &[Arg::Ptr(dst), Arg::U64(n as u64), Arg::U64(seed)],
        )
    }

    /// dst[i] = store(value) for i < n.
    pub fn fill_store(&self, dst: u64, n: usize, value: f32) -> Result<()> {
        let grid = grid_1d(n, 256, self.sm_count as usize * 32);
        self.launch(
            "fill_store",
            grid,
            256,
            0,
            &[Arg::Ptr(dst), Arg::U64(n as u64), Arg::F32(value)],
        )
    }

    /// table[p][i] = (cos, sin)(p * inv_freq[i]) * attn_factor for p < max_pos, i < half.
    pub fn rope_table_build(
        &self,
        table: u64,
        inv_freq: u64,
        max_pos: usize,
        half: usize,
        attn_factor: f32,
    ) -> Result<()> {
        let grid = grid_1d(max_pos * half, 256, self.sm_count as usize * 32);
        let args = [
            Arg::Ptr(table),
            Arg::Ptr(inv_freq),
            Arg::I32(i32_of(max_pos, "max_pos")?),
            Arg::I32(i32_of(half, "half")?),
            Arg::F32(attn_factor),
        ];
        self.launch("rope_table_build", grid, 256, 0, &args)
    }

    /// Finishes the QKV projection of `n_tokens` tokens: bias, per-head norm, RoPE; writes Q to
    /// `q_out` and K/V into the cache at each token's slot, as `kind` says (`v_norm`: an
    /// unweighted RMSNorm on each V head). Optional pointers are 0 when absent.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_prepare(
        &self,
        qkv: u64,
        bias: u64,
        q_norm: u64,
        k_norm: u64,
        rope: u64,
        positions: u64,
        slots: u64,
        q_out: u64,
        kv: KvView,
        n_tokens: usize,
        n_q: usize,
        hd: usize,
        neox: bool,
        eps: f32,
        kind: QkvKind,
        v_norm: bool,
    ) -> Result<()> {
        if n_tokens == 0 {
            return Ok(());
        }
        if hd > 512 || !hd.is_multiple_of(2) {
            bail!("head dim {hd} unsupported (even, at most 512)");
        }
        let heads = match kind {
            QkvKind::QOnly => n_q,
            QkvKind::Full | QkvKind::VFromK => n_q + 2 * kv.n_kv,
        };
        let args = [
            Arg::Ptr(qkv),
            Arg::Ptr(bias),
            Arg::Ptr(q_norm),
            Arg::Ptr(k_norm),
            Arg::Ptr(rope),
            Arg::Ptr(positions),
            Arg::Ptr(slots),
            Arg::Ptr(q_out),
            Arg::Ptr(kv.k),
            Arg::Ptr(kv.v),
            Arg::I32(n_q as i32),
            Arg::I32(kv.n_kv as i32),
            Arg::I32(hd as i32),
            Arg::I32(neox as i32),
            Arg::I32(kv.block_size as i32),
            Arg::F32(eps),
            Arg::I32(kind.mode()),
            Arg::I32(v_norm as i32),
        ];
        self.launch(
            "qkv_prepare",
            (n_tokens as u32, heads.div_ceil(4) as u32, 1),
            128,
            0,
            &args,
        )
    }
}

/// Threads per row for the norm kernels: enough for 16-element strides, at most 1024.
pub(crate) fn norm_block(hidden: usize) -> u32 {
    (hidden.div_ceil(8).next_multiple_of(32)).clamp(32, 1024) as u32
}

#[cfg(test)]
mod tests {
    use super::gated_grid;

    #[test]
    fn gated_grids_cover_each_row_once_a_thread() {
        // Llama-3-8B's 14,336-wide FFN, four values a thread: 14 CTAs of 256 cover 14,336.
        let ((x, y, _), vec) = gated_grid(14_336, 2048);
        assert_eq!((x, y, vec), (14, 2048, 1));
        // A width that is not a multiple of 4 takes one value a thread.
        let ((x, _, _), vec) = gated_grid(1338, 7);
        assert_eq!((x, vec), (6, 0));
        assert!(x as usize * 256 >= 1338);
        // More rows than a grid's second dimension holds: the kernel strides past it.
        assert_eq!(gated_grid(64, 100_000).0 .1, 65_535);
    }
}
