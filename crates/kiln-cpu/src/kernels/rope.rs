//! Rotary position embedding, in the two pairings models use.

pub use kiln_model::RopeStyle;

/// cos and sin of every (token, frequency) angle of one step, `[tokens, head_dim / 2]`.
#[derive(Debug, Clone)]
pub struct RopeTable {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// Angles `pos * inv_freq[i]` (rounded to f32 first, as reference implementations do), with
    /// cos and sin scaled by `attention_factor` (YaRN's magnitude correction; 1 otherwise).
    pub fn new(inv_freq: &[f32], attention_factor: f32, positions: &[usize]) -> RopeTable {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &pos in positions {
            for &f in inv_freq {
                let angle = (pos as f32 * f) as f64;
                cos.push(angle.cos() as f32 * attention_factor);
                sin.push(angle.sin() as f32 * attention_factor);
            }
        }
        RopeTable { half, cos, sin }
    }

    /// The cos and sin rows of the token at `index` in the step.
    pub fn row(&self, index: usize) -> (&[f32], &[f32]) {
        let range = index * self.half..(index + 1) * self.half;
        (&self.cos[range.clone()], &self.sin[range])
    }
}

/// Rotates every `head_dim`-element head of one token's row in place.
pub fn apply_rope(row: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32], style: RopeStyle) {
    let half = head_dim / 2;
    assert!(
        head_dim.is_multiple_of(2) && cos.len() == half && sin.len() == half,
        "rope table does not fit the head"
    );
    for head in row.chunks_exact_mut(head_dim) {
        match style {
            RopeStyle::Neox => {
                let (x0, x1) = head.split_at_mut(half);
                for i in 0..half {
                    let (a, b) = (x0[i], x1[i]);
                    x0[i] = a * cos[i] - b * sin[i];
                    x1[i] = b * cos[i] + a * sin[i];
                }
            }
            RopeStyle::Normal => {
                for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                    let (a, b) = (pair[0], pair[1]);
                    pair[0] = a * cos[i] - b * sin[i];
                    pair[1] = b * cos[i] + a * sin[i];
                }
            }
        }
    }
}
