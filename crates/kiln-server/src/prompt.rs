//! Prompt text to token ids, the way every endpoint does it.

use kiln_tokenizer::Tokenizer;

use crate::error::ApiError;

/// Tokenises prompt text with the model's special tokens. Templates that write the BOS token
/// themselves would get a second one from the tokenizer; keep one. `param` names the request
/// field the text came from, for errors.
pub fn encode_prompt(tok: &Tokenizer, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
    let mut ids = tok.encode(text, true).map_err(|e| {
        ApiError::invalid_param(param, format!("Could not tokenize the prompt: {e:#}"))
    })?;
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
    Ok(ids)
}
