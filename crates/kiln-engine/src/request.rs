//! What a client asks the engine for, and what it gets back, event by event.

/// How the next token is chosen. The defaults are plain greedy decoding.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// 0 means no top-k cut.
    pub top_k: usize,
    /// 1.0 means no nucleus cut.
    pub top_p: f32,
    /// 0.0 means no min-p cut.
    pub min_p: f32,
    /// 1.0 means none (divides positive logits of seen tokens, multiplies negative ones).
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every token already generated.
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logit of every token already generated.
    pub frequency_penalty: f32,
    /// Same seed, same prompt, same parameters: same tokens, whatever else runs alongside.
    pub seed: Option<u64>,
    /// Added to the logits of these ids before sampling (OpenAI's `logit_bias`): distinct ids
    /// in ascending order, values in [-100, 100].
    #[serde(default)]
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Whether a penalty changes the logits (penalties read the sequence's history).
    pub fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
    }

    /// Checks every value is usable; the error names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        let values = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repetition_penalty", self.repetition_penalty),
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ];
        if let Some((name, v)) = values.iter().find(|(_, v)| !v.is_finite()) {
            return Err(format!("{name} must be a finite number, got {v}"));
        }
        if self.temperature < 0.0 {
            return Err(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if let Some(&(id, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return Err(format!(
                "logit_bias for token {id} must be in [-100, 100], got {b}"
            ));
        }
        if let Some(w) = self.logit_bias.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(format!(
                "logit_bias ids must be distinct and ascending, got {} then {}",
                w[0].0, w[1].0
            ));
        }
        if self.repetition_penalty <= 0.0 {
            return Err(format!(
                "repetition_penalty must be > 0, got {}",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

/// One generation request.
#[derive(Debug, Clone, Default)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// Most tokens to generate; 0 means until the context is full.
    pub max_tokens: usize,
    /// Generation stops when the text contains one of these; the stop string is not returned.
    pub stop: Vec<String>,
    /// Generation stops on these ids as well as the model's end-of-sequence ids.
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// Some(n): return the chosen token's log-probability and the n most likely alternatives.
    pub logprobs: Option<usize>,
    /// Never draft for this request, even when the engine drafts (the tokens are the same
    /// either way; only the speed differs).
    pub no_draft: bool,
    /// Output held to a grammar (a JSON schema, a regex ...): only tokens it allows are
    /// sampled, and the request ends when the grammar is complete. Compile it with
    /// [`crate::EngineHandle::compile`].
    pub constraint: Option<kiln_grammar::Constraint>,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub id: u32,
    /// Text this token completes. Empty while bytes of an unfinished UTF-8 character or a
    /// possible stop string are held back; they arrive with a later token.
    pub text: String,
    pub logprob: Option<f32>,
    pub top_logprobs: Vec<(u32, f32)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-sequence token, stop token or stop string.
    Stop,
    /// `max_tokens` or the context length reached.
    Length,
    /// The client went away or asked to cancel.
    Cancelled,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// Text held back at the end (after the last token event), if any.
    pub trailing_text: String,
    /// Seconds from submission to the first generated token.
    pub time_to_first_token: Option<f64>,
    /// What speculative decoding did for this request.
    pub draft: DraftCounts,
}

/// Drafted tokens proposed and accepted, and the verify steps that judged them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DraftCounts {
    pub proposed: u64,
    pub accepted: u64,
    /// Target steps of this request that verified a draft.
    pub target_passes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum GenEvent {
    Token(TokenEvent),
    Done(Finish),
    /// The request failed; nothing more follows.
    Error(String),
}
