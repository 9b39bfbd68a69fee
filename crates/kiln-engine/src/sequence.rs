//! One sequence's token bookkeeping: what it holds and how much of it the KV cache holds.

pub type SeqId = u64;

#[derive(Debug, Clone)]
pub struct Sequence {
    pub id: SeqId,
    /// Prompt followed by the generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Leading tokens whose keys and values are in the cache. After a preemption this drops
    /// to 0 and the sequence is recomputed from its tokens.
    pub num_computed: usize,
    /// Leading tokens whose keys and values came from prefill chunks (or the prefix cache),
    /// as a fresh prefill of the same tokens computes them: what may be cached. A decode row
    /// (one token alone) computes them another way on the GPU, so it ends this run.
    pub prefill_upto: usize,
    /// Prompt tokens the prefix cache supplied when the sequence was first admitted.
    pub cached_tokens: usize,
    /// The tokens of the next verify step: the last token, then the drafted ones after it
    /// (empty: no draft).
    pub verify: Vec<u32>,
    /// Trailing tokens that are stand-ins for the picks of launched steps, not yet known here
    /// (two when a step was launched before the one before it finished).
    pub awaiting: usize,
    /// Length at which the sequence ends (it is not decoded past it).
    pub max_len: usize,
}

impl Sequence {
    pub fn new(id: SeqId, prompt: Vec<u32>) -> Sequence {
        Sequence {
            id,
            prompt_len: prompt.len(),
            tokens: prompt,
            num_computed: 0,
            prefill_upto: 0,
            cached_tokens: 0,
            verify: Vec::new(),
            awaiting: 0,
            max_len: usize::MAX,
        }
    }

    pub fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_len]
    }

    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// Tokens known so far: every token but the stand-ins awaiting their picks.
    pub fn known_len(&self) -> usize {
        self.tokens.len() - self.awaiting
    }

    /// The generated tokens known so far.
    pub fn generated_known(&self) -> &[u32] {
        &self.tokens[self.prompt_len..self.known_len().max(self.prompt_len)]
    }

    /// Tokens still to run through the model before the next token can be sampled.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    /// Drafted tokens waiting for verification.
    pub fn draft(&self) -> &[u32] {
        self.verify.get(1..).unwrap_or(&[])
    }
}
