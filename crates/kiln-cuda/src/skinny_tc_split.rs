//! The tensor-core decode GEMM split along the skinny kernel's 16 chains (skinny_tc.cu's
//! `TC_SPLIT_ENTRY` entries and `skinny_tc_join`): a CTA per weight tile, token tile and chain
//! writes the chain's float sums to a workspace, and the join adds a row's 16 in chain order
//! into the epilogue, so the bits are the whole-K kernel's (and the skinny kernel's), with 16
//! times the CTAs. For weights with few tiles (QKV, o and down) at 128-192 tokens by default
//! (`KILN_SKINNY_TC_SPLIT=N` from N tokens, `=0` never).

use std::sync::OnceLock;

use anyhow::Result;

use crate::device::{i32_of, Arg, Gpu};
use crate::skinny::SkinnyKind;
use crate::skinny_fused::Epilogue;
use crate::skinny_tc::{all_entries, TcEntry};
use crate::switches::{KernelChoice, SkinnyTc, Switches};

/// The entries split along the chains (`TC_SPLIT_ENTRY`), for [`Gpu::skinny_tc_split`].
pub fn tc_split_entries() -> &'static [TcEntry] {
    static SPLIT: OnceLock<Vec<TcEntry>> = OnceLock::new();
    SPLIT.get_or_init(|| all_entries().iter().filter(|e| e.split).cloned().collect())
}

/// Floats of the chain partials [`Gpu::skinny_tc_split`] needs for `rows` tokens over `tiles`
/// 16-row weight tiles: 16 chains x rows x 16 tiles.
pub fn split_part_floats(rows: usize, tiles: usize) -> usize {
    16 * rows * tiles * 16
}

/// The widest weight (in rows) whose decode launches may be split along the chains: QKV, o and
/// down of 8B-class models have few tiles; gate/up and the LM head have plenty, and their
/// partials would be large.
pub const SPLIT_MAX_ROWS: usize = 8192;

/// The most tokens a split launch takes: in `cuda_bench llama3-8b gemm` (H200, 2026-12-02) the
/// split entries beat the whole-K ones on down at 128-192 tokens (89 vs 120 us, 127 vs 180)
/// but at 256 lose on QKV (117 vs 66) and o (82 vs 53) and tie on down (167 vs 172).
pub const SPLIT_UPTO_TOKENS: usize = 192;

/// The token counts the split path takes under the switches: `from..=SPLIT_UPTO_TOKENS`.
pub fn split_takes(from: Option<usize>, rows: usize) -> bool {
    from.is_some_and(|from| rows >= from && rows <= SPLIT_UPTO_TOKENS)
}

/// Bytes the split path reserves at start for decode steps of up to `max_seqs` rows, when it
/// can take any of them (footprint.rs counts them).
pub fn split_reserve_bytes(max_seqs: usize) -> usize {
    match Switches::from_env().tc_split_from {
        Some(from) if from <= max_seqs.min(SPLIT_UPTO_TOKENS) => {
            split_part_floats(max_seqs.min(SPLIT_UPTO_TOKENS), SPLIT_MAX_ROWS / 16) * 4
        }
        _ => 0,
    }
}

/// The split entry for `tiles` weight tiles and `rows` tokens: the largest tiling whose CTAs (16
/// a tile) fill every resident slot, else the one with the most CTAs.
pub fn choose_split_entry(tiles: usize, rows: usize, sms: usize) -> &'static TcEntry {
    let all = tc_split_entries();
    all.iter()
        .find(|e| 16 * e.ctas(tiles, rows) >= sms * e.min_blocks)
        .unwrap_or_else(|| {
            all.iter()
                .max_by_key(|e| e.ctas(tiles, rows))
                .expect("skinny_tc.cu has split entries")
        })
}

impl Gpu {
    /// Reserves the chain partials of the split path for decode launches of up to `max_seqs`
    /// rows, when KILN_SKINNY_TC_SPLIT asks for it (once per device; later calls keep the
    /// first reservation).
    pub fn reserve_tc_split(&self, max_seqs: usize) -> Result<()> {
        let bytes = split_reserve_bytes(max_seqs);
        if bytes > 0 && self.tc_part.get().is_none() {
            let _ = self.tc_part.set(self.alloc::<f32>(bytes / 4)?);
        }
        Ok(())
    }

    /// The reserved chain partials, when they hold `rows` rows over `tiles` weight tiles.
    pub(crate) fn split_part(&self, rows: usize, tiles: usize) -> Option<u64> {
        let part = self.tc_part.get()?;
        (split_part_floats(rows, tiles) <= part.len()).then(|| part.ptr())
    }

    /// The partials for a launch of `rows` rows over `tiles` weight tiles that
    /// KILN_SKINNY_TC_SPLIT splits along the chains (rows enough, a narrow weight, the
    /// partials reserved and large enough); None for a launch it leaves whole.
    pub(crate) fn split_part_for(&self, rows: usize, tiles: usize) -> Option<u64> {
        let from = Switches::from_env().tc_split_from;
        if !split_takes(from, rows) || tiles * 16 > SPLIT_MAX_ROWS {
            return None;
        }
        self.split_part(rows, tiles)
    }

    /// The split entry and the partials for a decode launch of `rows` rows of an `n`-row weight
    /// in family `kind` through `epi`, when KILN_SKINNY_TC_SPLIT takes it ([`Gpu::split_part_for`],
    /// the tensor-core kernels not switched off under `c`, the 16-warp family whose order they
    /// keep); None otherwise. (The o projection at 128 rows is slower split than through the
    /// skinny kernel alone, 44.1 against 39.4 us; with it unsplit and a second wgmma table at
    /// once, the step measured 1.6% slower on the H200, 2026-12-03. Not measured apart, so it
    /// stays split.)
    pub fn tc_split_for(
        &self,
        c: &KernelChoice,
        kind: SkinnyKind,
        epi: &Epilogue,
        rows: usize,
        n: usize,
    ) -> Result<Option<(&'static TcEntry, u64)>> {
        if c.skinny_tc == SkinnyTc::Off || kind != SkinnyKind::Wide {
            return Ok(None);
        }
        let tiles = epi.tiles(n)?;
        let Some(part) = self.split_part_for(rows, tiles) else {
            return Ok(None);
        };
        let e = choose_split_entry(tiles, rows, self.sm_count as usize);
        Ok(Some((e, part)))
    }

    /// [`Gpu::skinny_tc_entry`] split along the 16 chains: split entry `e` (CTAs of its tiling x
    /// 16 chains) writes each chain of each output to `part` ([`split_part_floats`] floats),
    /// then skinny_tc_join adds them in chain order into `epi`. The skinny kernel's bits, with
    /// 16 times the CTAs of the whole-K launch (for weights with few tiles).
    #[allow(clippy::too_many_arguments)]
    pub fn skinny_tc_split(
        &self,
        e: &TcEntry,
        epi: &Epilogue,
        pdl: bool,
        x: u64,
        w: u64,
        part: u64,
        rows: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let ld = epi.tiles(n)? * 16;
        self.launch_tc(e, epi, pdl, x, w, rows, n, k, Some((part, ld)))?;
        self.tc_join(epi, pdl, part, rows, n)
    }

    /// skinny_tc_join: the 16 chain partials of `rows` rows of an `n`-row weight in `part`
    /// ([`split_part_floats`] floats, rows of the weight's tiles x 16) added in chain order into
    /// `epi`, after a split launch of skinny_tc.cu or skinny_wg.cu.
    pub(crate) fn tc_join(
        &self,
        epi: &Epilogue,
        pdl: bool,
        part: u64,
        rows: usize,
        n: usize,
    ) -> Result<()> {
        let tiles = epi.tiles(n)?;
        let mut args = vec![
            Arg::Ptr(part),
            Arg::I32(i32_of(rows, "rows")?),
            Arg::I32(i32_of(tiles * 16, "partial row")?),
            Arg::I32(i32_of(tiles, "tiles")?),
        ];
        args.extend(epi.args(n)?);
        let grid = (u32::try_from((rows * tiles * 8).div_ceil(256))?, 1, 1);
        self.launch_with("skinny_tc_join", grid, 256, 0, &args, pdl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skinny_tc::tc_entries;

    #[test]
    fn the_split_entries_build_one_chain_a_pass() {
        let got: Vec<_> = tc_split_entries()
            .iter()
            .map(|e| (e.name.as_str(), e.tile(), e.chains, e.min_blocks))
            .collect();
        assert_eq!(
            got,
            [
                ("skinny_tcs_t2x4", (128, 128), 1, 1),
                ("skinny_tcs_t2x2", (128, 64), 1, 2),
                ("skinny_tcs_2x2", (64, 64), 1, 3),
            ]
        );
        assert!(tc_entries().iter().all(|e| !e.split));
        // o at 128 rows: 256 tiles, the chains of 16-row tile rows for each token.
        assert_eq!(split_part_floats(128, 256), 16 * 128 * 4096);
        // o and down at 128 rows: 32 CTAs of 128 x 128 a chain, 512 in all, fill 132 SMs.
        assert_eq!(choose_split_entry(256, 128, 132).name, "skinny_tcs_t2x4");
        // A tiny weight fills none: the most CTAs (64 x 64).
        assert_eq!(choose_split_entry(2, 8, 132).name, "skinny_tcs_2x2");
    }

    #[test]
    fn the_split_takes_its_measured_token_counts() {
        let from = Some(crate::switches::TC_SPLIT_FROM);
        let took: Vec<usize> = [1, 64, 127, 128, 129, 192, 193, 256]
            .into_iter()
            .filter(|&r| split_takes(from, r))
            .collect();
        assert_eq!(took, [128, 129, 192]);
        assert!(!split_takes(None, 128));
        assert!(split_takes(Some(2), 2));
    }
}
