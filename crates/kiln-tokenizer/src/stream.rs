//! Incremental detokenisation for streaming: text comes out as soon as it is whole UTF-8.
//! A character may be split over several tokens (byte-fallback `<0xE2>` `<0x82>` `<0xAC>`, or a
//! byte-level BPE piece holding half an emoji); its bytes wait until the character is complete.
//!
//! Generated tokens continue a prompt, so by default every token's text is kept as is: a
//! SentencePiece `▁Paris` after "The capital is" streams as " Paris" (llama.cpp and vLLM do the
//! same). [`StreamDecoder::from_text_start`] is for ids that begin a text: like `decode`, it drops
//! the space the SentencePiece encoder put before the first word, and then everything `push` and
//! `finish` return adds up to `decode(ids, skip_special)`.

use crate::tokenizer::Tokenizer;

#[derive(Clone)]
pub struct StreamDecoder {
    tok: Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
    /// The next token is the first of a text whose encoder-added space must go.
    strip_next: bool,
}

impl StreamDecoder {
    /// For generated tokens that continue a prompt; special tokens (EOS, turn markers) produce
    /// no text.
    pub fn new(tok: &Tokenizer) -> StreamDecoder {
        StreamDecoder {
            tok: tok.clone(),
            skip_special: true,
            pending: Vec::new(),
            strip_next: false,
        }
    }

    /// Prints special tokens' text as well.
    pub fn show_special(mut self, show: bool) -> StreamDecoder {
        self.skip_special = !show;
        self
    }

    /// The ids start a text: the output equals `decode` of them.
    pub fn from_text_start(mut self) -> StreamDecoder {
        self.strip_next = true;
        self
    }

    /// Adds one token; returns the text that became complete (often empty, never a broken
    /// character).
    pub fn push(&mut self, id: u32) -> String {
        if let Some(bytes) = self.tok.visible_bytes(id, self.skip_special) {
            let bytes = self.tok.strip_first(bytes, self.strip_next);
            self.strip_next = false;
            self.pending.extend_from_slice(bytes);
        }
        self.take_complete()
    }

    /// Ends the stream: bytes of a character that never completed come out as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Whether bytes of an unfinished character are waiting.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    // Validated just above, so the fallback never happens.
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..valid]).unwrap_or_default(),
                    );
                    match e.error_len() {
                        // Bytes that can never start a character: same U+FFFD as decode's lossy pass.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start = valid + n;
                        }
                        // A character cut short at the end: wait for more.
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}
