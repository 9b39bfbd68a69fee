//! Which tokens end a generation. Model files name one EOS id; chat models also stop on a
//! turn marker (`<|eot_id|>`, `<|im_end|>`, `<end_of_turn>` ...) that the file often does not
//! name. The list of marker spellings and its two exceptions follow llama.cpp's vocabulary loader.

use crate::vocab::Vocab;

/// Pieces that end a turn wherever they appear in a vocabulary.
const END_MARKERS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Fill-in-the-middle padding / repository / file separators: a completion stops there too.
const FIM_MARKERS: &[&str] = &[
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
];

/// Every id that ends a generation: `named` (EOS, EOT, EOM ids from the file or config) first,
/// then the markers found by spelling, in id order, without duplicates.
pub fn end_of_generation_ids(vocab: &Vocab, named: &[u32]) -> Vec<u32> {
    let mut found: Vec<u32> = END_MARKERS
        .iter()
        .chain(FIM_MARKERS)
        .filter_map(|p| vocab.id(p))
        .collect();
    let has = |p: &str| vocab.id(p).is_some();

    // gpt-oss and Solar Open end a message with <|end|> but keep generating after it.
    if (has("<|return|>") && has("<|call|>") && has("<|end|>"))
        || (has("<|calls|>") && has("<|flush|>") && has("<|end|>"))
    {
        let end = vocab.id("<|end|>");
        found.retain(|&id| Some(id) != end);
    }
    // Gemma 4 has an ordinary </s> piece.
    if has("<|tool_response>") && has("</s>") {
        let s = vocab.id("</s>");
        found.retain(|&id| Some(id) != s);
    }
    found.sort_unstable();

    let mut ids: Vec<u32> = Vec::new();
    for &id in named.iter().chain(&found) {
        if (id as usize) < vocab.len() && !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::TokenAttr;

    fn vocab(pieces: &[&str]) -> Vocab {
        Vocab::new(
            pieces.iter().map(|s| s.to_string()).collect(),
            vec![TokenAttr::Control; pieces.len()],
            |p, _| p.as_bytes().to_vec(),
        )
    }

    #[test]
    fn named_ids_come_first_then_markers() {
        let v = vocab(&["a", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>"]);
        assert_eq!(end_of_generation_ids(&v, &[1]), vec![1, 2, 3]);
        assert_eq!(end_of_generation_ids(&v, &[7]), vec![1, 2, 3]);
    }

    #[test]
    fn harmony_end_is_not_a_stop() {
        let v = vocab(&["<|end|>", "<|return|>", "<|call|>"]);
        assert_eq!(end_of_generation_ids(&v, &[]), vec![1, 2]);
        let v = vocab(&["<|end|>", "<|user|>"]);
        assert_eq!(end_of_generation_ids(&v, &[]), vec![0]);
    }
}
