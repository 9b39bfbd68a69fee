//! Where a prompt GEMM splits off its last rows (KILN_GEMM_TAIL). The pinned algorithms work in
//! tiles of 128 rows by 128 columns, a round of tiles on every multiprocessor at a time (the
//! fp8 and bf16 ones of Llama-3-8B's shapes on the H100 and H200: cuBLASLt's persistent 128x128
//! kernels). A product a few rows past a multiple of 128 gives those rows a row of tiles of
//! their own, which can cost a whole round: Llama-3-8B's o and down at 520 rows take 160 tiles,
//! two rounds on 132 multiprocessors where 512 rows take one. Those rows then go to a second
//! launch, at the short tiers' algorithm for their count, which every pinned shape has shown
//! bit-identical to its own rows at any m and offset (gemm_lt.rs's row check): the same bits.
//!
//! The rule was written for a tail that costs a read of the weight; measured, it costs a round
//! of tiles too (H100 2026-12-06, ncu: down at 520 rows 49.0 us for its 512 rows, 48.5 for its
//! 8): cuBLASLt's short tiers found no faster algorithm with the same bits, and a 128 x 128
//! tile's time is its K loop whatever rows it holds. The prefill gains little (fp8: 520 rows
//! +0.3%, 1032 +2.7%; bf16: 520 +4.6%, 1032 +7.5%, one run each), never a bit.

/// The pinned algorithms' tile, rows and columns.
pub const TILE: usize = 128;
/// The most rows split off.
pub const MOST_TAIL_ROWS: usize = 32;
/// The most weight columns a saved round of tiles pays a second read for.
pub const COLUMNS_PER_ROUND: usize = 8192;

/// Rows of an m-row product with n columns to run as a second launch on `sms` multiprocessors:
/// the last m % 128 where they would add a round of tiles and the round pays for the second
/// read of the weight; 0 to run it whole.
pub fn tail_rows(m: usize, n: usize, sms: usize) -> usize {
    let tail = m % TILE;
    if m < TILE || tail == 0 || tail > MOST_TAIL_ROWS || sms == 0 {
        return 0;
    }
    let cols = n.div_ceil(TILE);
    let rounds = |rows: usize| (rows.div_ceil(TILE) * cols).div_ceil(sms);
    let saved = rounds(m) - rounds(m - tail);
    if saved > 0 && n <= saved * COLUMNS_PER_ROUND {
        tail
    } else {
        0
    }
}

/// The launches of an m-row product, (first row, rows), none empty: the whole, or with `split`
/// (an algorithm whose rows are the same at any m, and the switch on) its rows less
/// [`tail_rows`], then those.
pub fn launches(
    m: usize,
    n: usize,
    sms: usize,
    split: bool,
) -> impl Iterator<Item = (usize, usize)> {
    let tail = if split { tail_rows(m, n, sms) } else { 0 };
    [(0, m - tail), (m - tail, tail)]
        .into_iter()
        .filter(|&(_, rows)| rows > 0)
}

#[cfg(test)]
mod tests {
    use super::{launches, tail_rows};

    #[test]
    fn launches_cover_the_rows_once() {
        let all = |m, n, split| launches(m, n, 132, split).collect::<Vec<_>>();
        assert_eq!(all(520, 4096, true), [(0, 512), (512, 8)]);
        assert_eq!(all(520, 4096, false), [(0, 520)]);
        assert_eq!(all(520, 6144, true), [(0, 520)]);
        assert!(all(0, 4096, true).is_empty());
    }

    #[test]
    fn llama3_8b_at_520_rows_splits_o_and_down_only() {
        // H200 (132 SMs), Llama-3-8B: QKV 6,144 columns, o and down 4,096, gate/up 28,672.
        assert_eq!(tail_rows(520, 4096, 132), 8);
        assert_eq!(tail_rows(520, 6144, 132), 0); // 240 tiles against 192: two rounds either way
        assert_eq!(tail_rows(520, 28_672, 132), 0); // 9 rounds against 7: the read costs more
        assert_eq!(tail_rows(512, 4096, 132), 0);
        assert_eq!(tail_rows(136, 4096, 132), 0); // 64 tiles: one round either way
        assert_eq!(tail_rows(100, 4096, 132), 0);
    }

    #[test]
    fn long_tails_and_other_gpus_stay_whole() {
        assert_eq!(tail_rows(512 + 33, 4096, 132), 0);
        assert_eq!(tail_rows(512 + 32, 4096, 132), 32);
        // 114 SMs (an H100 PCIe): 4 x 32 tiles are already two rounds, 5 x 32 still two.
        assert_eq!(tail_rows(520, 4096, 114), 0);
        assert_eq!(tail_rows(520, 4096, 0), 0);
    }
}
