//! Log-probabilities in OpenAI's two shapes: chat's `{"content": [{token, logprob, bytes,
//! top_logprobs}]}` and the legacy completions' parallel arrays.

use kiln_engine::TokenEvent;
use kiln_tokenizer::Tokenizer;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// JSON has no -inf; OpenAI-style servers report an impossible token this way.
const FLOOR: f32 = -9999.0;

fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        FLOOR
    }
}

/// A token as text and raw bytes (a token may hold part of a UTF-8 character).
pub fn token_piece(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_bytes(id);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

impl ChatTokenLogprob {
    /// None when the event carries no logprob (the request did not ask for them).
    pub fn from_event(tok: &Tokenizer, ev: &TokenEvent) -> Option<ChatTokenLogprob> {
        let logprob = ev.logprob?;
        let (token, bytes) = token_piece(tok, ev.id);
        let top_logprobs = ev
            .top_logprobs
            .iter()
            .map(|&(id, lp)| {
                let (token, bytes) = token_piece(tok, id);
                TopLogprob {
                    token,
                    logprob: finite(lp),
                    bytes,
                }
            })
            .collect();
        Some(ChatTokenLogprob {
            token,
            logprob: finite(logprob),
            bytes,
            top_logprobs,
        })
    }
}

/// The completions endpoint's logprobs: one entry per token in each array.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<PieceMap>,
    /// Character offset of each token's text in the returned text.
    pub text_offset: Vec<usize>,
}

/// `{piece: logprob}` in rank order; when two ids share a piece the likelier one is kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PieceMap(pub Vec<(String, f32)>);

impl Serialize for PieceMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl CompletionLogprobs {
    /// Appends one token whose text starts at character `offset`; ignores events without logprobs.
    pub fn push(&mut self, tok: &Tokenizer, ev: &TokenEvent, offset: usize) {
        let Some(lp) = ev.logprob else { return };
        self.tokens.push(token_piece(tok, ev.id).0);
        self.token_logprobs.push(finite(lp));
        let mut top: Vec<(String, f32)> = Vec::with_capacity(ev.top_logprobs.len());
        for &(id, lp) in &ev.top_logprobs {
            let piece = token_piece(tok, id).0;
            if !top.iter().any(|(p, _)| *p == piece) {
                top.push((piece, finite(lp)));
            }
        }
        self.top_logprobs.push(PieceMap(top));
        self.text_offset.push(offset);
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: u32, lp: f32, top: Vec<(u32, f32)>) -> TokenEvent {
        TokenEvent {
            id,
            text: String::new(),
            logprob: Some(lp),
            top_logprobs: top,
        }
    }

    #[test]
    fn chat_shape_has_bytes_and_alternatives() {
        let tok = Tokenizer::byte_level(300);
        let ev = event(
            b'h' as u32,
            -0.5,
            vec![(b'h' as u32, -0.5), (b'a' as u32, f32::NEG_INFINITY)],
        );
        let lp = ChatTokenLogprob::from_event(&tok, &ev).unwrap();
        let v = serde_json::to_value(ChatLogprobs { content: vec![lp] }).unwrap();
        let c = &v["content"][0];
        assert_eq!(c["token"], "h");
        assert_eq!(c["bytes"], serde_json::json!([104]));
        assert_eq!(c["logprob"], -0.5);
        assert_eq!(c["top_logprobs"][1]["token"], "a");
        assert_eq!(c["top_logprobs"][1]["logprob"], -9999.0);
        let none = TokenEvent {
            logprob: None,
            ..ev
        };
        assert!(ChatTokenLogprob::from_event(&tok, &none).is_none());
    }

    #[test]
    fn completion_shape_is_parallel_arrays_with_ordered_maps() {
        let tok = Tokenizer::byte_level(300);
        let mut lp = CompletionLogprobs::default();
        lp.push(
            &tok,
            &event(
                b'z' as u32,
                -0.1,
                vec![(b'z' as u32, -0.1), (b'y' as u32, -3.0)],
            ),
            0,
        );
        lp.push(
            &tok,
            &event(b'!' as u32, -0.2, vec![(b'!' as u32, -0.2)]),
            1,
        );
        let text = serde_json::to_string(&lp).unwrap();
        assert!(
            text.contains(r#""top_logprobs":[{"z":-0.1,"y":-3.0},{"!":-0.2}]"#),
            "{text}"
        );
        assert_eq!(lp.tokens, vec!["z", "!"]);
        assert_eq!(lp.text_offset, vec![0, 1]);
    }
}
