//! Prompt text to token ids, the way every endpoint does it: bounded by the context, so that a
//! prompt far too long costs next to nothing to refuse.

use std::ops::Range;

use kiln_tokenizer::{Bounded, Encoded, Tokenizer};

use crate::error::ApiError;

/// Tokenises prompt text with the model's special tokens, refusing one that leaves no room for
/// a completion in `max_context` tokens. Control tokens inside the `plain` byte ranges stay
/// text. Templates that write the BOS token themselves would get a second one from the
/// tokenizer; keep one. `param` names the request field the text came from, for errors.
pub fn encode_prompt(
    tok: &Tokenizer,
    text: &str,
    param: &str,
    max_context: usize,
    plain: &[Range<usize>],
) -> Result<Vec<u32>, ApiError> {
    let opts = Bounded {
        add_special: true,
        parse_special: true,
        plain,
        // One token more than fits, so that a double BOS dropped below cannot turn a prompt
        // that fits into one refused.
        limit: max_context,
    };
    let mut ids = match tok.encode_bounded(text, opts) {
        Ok(Encoded::Ids(ids)) => ids,
        Ok(Encoded::TooLong { at_least }) => {
            return Err(too_long(param, max_context, at_least, true));
        }
        Err(e) => {
            return Err(ApiError::invalid_param(
                param,
                format!("Could not tokenize the prompt: {e:#}"),
            ))
        }
    };
    if let Some(bos) = tok.bos_id() {
        if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
            ids.remove(0);
        }
    }
    if ids.is_empty() {
        return Err(ApiError::invalid_param(
            param,
            "The prompt is empty after tokenization.",
        ));
    }
    if ids.len() >= max_context {
        return Err(too_long(param, max_context, ids.len(), false));
    }
    Ok(ids)
}

/// The 400 for a prompt that leaves no room for a completion; `at_least` when tokenising
/// stopped early.
pub fn too_long(param: &str, max_context: usize, tokens: usize, at_least: bool) -> ApiError {
    let count = if at_least {
        format!("at least {tokens}")
    } else {
        tokens.to_string()
    };
    ApiError::context_length(format!(
        "This model's maximum context length is {max_context} tokens. However, your prompt has \
         {count} tokens, which leaves no room for a completion. Please shorten the prompt."
    ))
    .with_param(param)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_refused_by_its_length_before_it_is_tokenised() {
        let tok = Tokenizer::byte_level(300);
        assert_eq!(
            encode_prompt(&tok, "hello", "prompt", 16, &[]).unwrap(),
            tok.encode("hello", true).unwrap()
        );
        let e = encode_prompt(&tok, &"x".repeat(1 << 20), "prompt", 16, &[]).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert_eq!(e.param.as_deref(), Some("prompt"));
        assert!(e.message.contains("at least"), "{}", e.message);
        // 15 tokens (BOS and 14 bytes) leave one for the completion; 16 leave none.
        assert!(encode_prompt(&tok, &"x".repeat(14), "p", 16, &[]).is_ok());
        let e = encode_prompt(&tok, &"x".repeat(15), "messages", 16, &[]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert!(e.message.contains("has 16 tokens"), "{}", e.message);
    }
}
