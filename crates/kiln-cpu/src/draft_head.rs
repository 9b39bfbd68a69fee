//! A draft model's ordered LM head (Gemma 4's assistant, `use_ordered_embeddings`): each row
//! keeps the logits of the tokens of its `top_k` best centroids; every other token gets the
//! lowest kept logit minus one, so that it ranks below them all. transformers takes that
//! minimum over the whole batch; here it is each row's own, which ranks the same.

use kiln_model::OrderedEmbeddings;

use crate::kernels::{matmul, PackedMatrix};

/// Masks `logits` (`[rows, vocab]`, from the final-normed rows `normed`) to the tokens of each
/// row's best centroids. `ordering` lists the token ids of centroid 0, then 1, ...
pub(crate) fn keep_best_centroids(
    logits: &mut [f32],
    normed: &[f32],
    centroids: &PackedMatrix,
    ordering: &[u32],
    o: OrderedEmbeddings,
) {
    let (c, h, vocab) = (centroids.rows(), centroids.cols(), ordering.len());
    let rows = normed.len() / h;
    let per = vocab / c;
    let mut scores = vec![0.0; rows * c];
    matmul(normed, centroids, &mut scores);
    let mut keep = vec![false; vocab];
    for (row, scores) in logits.chunks_exact_mut(vocab).zip(scores.chunks_exact(c)) {
        let best = best_centroids(scores, o.top_k);
        keep.fill(false);
        let mut lowest = f32::INFINITY;
        for &ci in &best {
            for &t in &ordering[ci * per..(ci + 1) * per] {
                keep[t as usize] = true;
                lowest = lowest.min(row[t as usize]);
            }
        }
        for (x, &k) in row.iter_mut().zip(&keep) {
            if !k {
                *x = lowest - 1.0;
            }
        }
    }
}

/// The `k` highest-scoring centroids, highest first; equal scores by lower index.
pub(crate) fn best_centroids(scores: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_best_centroids_tokens_keep_their_logits() {
        // 4 tokens, 2 centroids: centroid 0 owns tokens 3 and 1, centroid 1 owns 0 and 2.
        let centroids = PackedMatrix::pack(2, 2, &[1.0, 0.0, 0.0, 1.0]).unwrap();
        let ordering = [3, 1, 0, 2];
        let o = OrderedEmbeddings {
            centroids: 2,
            top_k: 1,
        };
        // The row prefers centroid 1; token 3 has the highest logit but is masked.
        let mut logits = vec![5.0, 1.0, 2.0, 9.0];
        keep_best_centroids(&mut logits, &[0.2, 0.8], &centroids, &ordering, o);
        assert_eq!(logits, [5.0, 1.0, 2.0, 1.0]);
        assert_eq!(best_centroids(&[1.0, 3.0, 3.0, 0.5], 3), [1, 2, 0]);
    }
}
