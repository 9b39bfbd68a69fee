//! Parameters chat and completions share: sampling, stop conditions, limits, streaming options,
//! and their validation into the engine's [`SamplingParams`].

use kiln_engine::SamplingParams;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// Most choices one request may ask for (OpenAI's own bound).
pub const MAX_N: i64 = 128;
/// Most alternatives per token that `top_logprobs` / `logprobs` may ask for.
pub const MAX_TOP_LOGPROBS: i64 = 20;
/// Most stop strings per request.
pub const MAX_STOP_STRINGS: usize = 16;

/// `stop`: one string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopSpec {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Whether a stream ends with a usage chunk; `stream_options` without `stream: true` is refused.
pub fn include_usage(stream: bool, options: Option<&StreamOptions>) -> Result<bool, ApiError> {
    if options.is_some() && !stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` is only allowed with `stream: true`.",
        ));
    }
    Ok(options.and_then(|o| o.include_usage).unwrap_or(false))
}

/// The sampling and stopping fields as a request sent them, before validation.
#[derive(Debug, Clone, Default)]
pub struct SamplingFields<'a> {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<&'a StopSpec>,
    pub stop_token_ids: Option<&'a [i64]>,
    pub ignore_eos: Option<bool>,
    /// kiln's extension: `false` opts the request out of speculative decoding.
    pub draft: Option<bool>,
    pub logit_bias: Option<&'a serde_json::Map<String, serde_json::Value>>,
    /// The output constraint fields (`response_format`, `guided_*`).
    pub guided: super::structured::GuidedFields<'a>,
}

/// The served model's recommended sampling (its generation_config.json or GGUF
/// general.sampling.*): what a request that leaves a field out gets, before the OpenAI
/// defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplingDefaults {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
}

impl SamplingFields<'_> {
    /// The request's fields, with the model's defaults where the request is silent.
    pub fn with_defaults(mut self, d: &SamplingDefaults) -> Self {
        self.temperature = self.temperature.or(d.temperature);
        self.top_p = self.top_p.or(d.top_p);
        self.top_k = self.top_k.or(d.top_k);
        self.min_p = self.min_p.or(d.min_p);
        self.repetition_penalty = self.repetition_penalty.or(d.repetition_penalty);
        self
    }
}

/// Declares a request struct (`pub struct Name { ... }`) with the sampling and stopping fields
/// appended, and `Name::sampling_fields` to read them. The fields are written into the struct,
/// not `#[serde(flatten)]`ed, because flatten loses the field name in type errors (`param`).
macro_rules! request_with_sampling {
    ($(#[$attr:meta])* pub struct $name:ident { $($fields:tt)* }) => {
        $(#[$attr])*
        pub struct $name {
            $($fields)*
            pub temperature: Option<f64>,
            pub top_p: Option<f64>,
            pub top_k: Option<i64>,
            pub min_p: Option<f64>,
            pub presence_penalty: Option<f64>,
            pub frequency_penalty: Option<f64>,
            pub repetition_penalty: Option<f64>,
            pub seed: Option<i64>,
            pub stop: Option<$crate::protocol::common::StopSpec>,
            pub stop_token_ids: Option<Vec<i64>>,
            pub ignore_eos: Option<bool>,
            pub draft: Option<bool>,
            pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
            pub response_format: Option<$crate::protocol::structured::ResponseFormat>,
            /// vLLM's constraint fields (kiln's extension of the OpenAI API).
            pub guided_json: Option<serde_json::Value>,
            pub guided_regex: Option<String>,
            pub guided_choice: Option<Vec<String>>,
            pub guided_grammar: Option<String>,
        }

        impl $name {
            pub fn sampling_fields(&self) -> $crate::protocol::common::SamplingFields<'_> {
                $crate::protocol::common::SamplingFields {
                    temperature: self.temperature,
                    top_p: self.top_p,
                    top_k: self.top_k,
                    min_p: self.min_p,
                    presence_penalty: self.presence_penalty,
                    frequency_penalty: self.frequency_penalty,
                    repetition_penalty: self.repetition_penalty,
                    seed: self.seed,
                    stop: self.stop.as_ref(),
                    stop_token_ids: self.stop_token_ids.as_deref(),
                    ignore_eos: self.ignore_eos,
                    draft: self.draft,
                    logit_bias: self.logit_bias.as_ref(),
                    guided: $crate::protocol::structured::GuidedFields {
                        response_format: self.response_format.as_ref(),
                        guided_json: self.guided_json.as_ref(),
                        guided_regex: self.guided_regex.as_deref(),
                        guided_choice: self.guided_choice.as_deref(),
                        guided_grammar: self.guided_grammar.as_deref(),
                    },
                }
            }
        }
    };
}
pub(crate) use request_with_sampling;

/// Validated sampling and stopping settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    pub params: SamplingParams,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// The request asked not to be drafted for.
    pub no_draft: bool,
    /// What its output must follow (compiled later, off the async workers).
    pub grammar: Option<kiln_engine::Grammar>,
}

fn in_range(param: &str, v: Option<f64>, lo: f64, hi: f64, default: f64) -> Result<f32, ApiError> {
    match v {
        None => Ok(default as f32),
        Some(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(x as f32),
        Some(x) => Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be in [{lo}, {hi}], got {x}."),
        )),
    }
}

impl SamplingFields<'_> {
    pub fn validate(&self, vocab_size: usize) -> Result<Sampling, ApiError> {
        let temperature = in_range("temperature", self.temperature, 0.0, 2.0, 1.0)?;
        let top_p = in_range("top_p", self.top_p, 0.0, 1.0, 1.0)?;
        if top_p <= 0.0 {
            return Err(ApiError::invalid_param(
                "top_p",
                "`top_p` must be greater than 0.",
            ));
        }
        let top_k = match self.top_k {
            None | Some(-1) | Some(0) => 0,
            Some(k) if k > 0 => usize::try_from(k).unwrap_or(usize::MAX),
            Some(k) => {
                return Err(ApiError::invalid_param(
                    "top_k",
                    format!("`top_k` must be -1 (disabled) or positive, got {k}."),
                ))
            }
        };
        let min_p = in_range("min_p", self.min_p, 0.0, 1.0, 0.0)?;
        let presence_penalty = in_range("presence_penalty", self.presence_penalty, -2.0, 2.0, 0.0)?;
        let frequency_penalty =
            in_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0, 0.0)?;
        let repetition_penalty = in_range(
            "repetition_penalty",
            self.repetition_penalty,
            0.0,
            10.0,
            1.0,
        )?;
        if repetition_penalty <= 0.0 {
            return Err(ApiError::invalid_param(
                "repetition_penalty",
                "`repetition_penalty` must be greater than 0.",
            ));
        }
        let stop = match self.stop {
            None => Vec::new(),
            Some(StopSpec::One(s)) => vec![s.clone()],
            Some(StopSpec::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOP_STRINGS {
            return Err(ApiError::invalid_param(
                "stop",
                format!(
                    "At most {MAX_STOP_STRINGS} stop strings are allowed, got {}.",
                    stop.len()
                ),
            ));
        }
        if stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid_param(
                "stop",
                "Stop strings must not be empty.",
            ));
        }
        let mut stop_token_ids = Vec::new();
        for &id in self.stop_token_ids.unwrap_or_default() {
            match u32::try_from(id) {
                Ok(id) if (id as usize) < vocab_size => stop_token_ids.push(id),
                _ => {
                    return Err(ApiError::invalid_param(
                        "stop_token_ids",
                        format!("Token id {id} is outside the vocabulary (size {vocab_size})."),
                    ))
                }
            }
        }
        let params = SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty,
            presence_penalty,
            frequency_penalty,
            // Two's complement keeps every i64 seed distinct.
            seed: self.seed.map(|s| s as u64),
            logit_bias: super::structured::logit_bias(self.logit_bias, vocab_size)?,
        };
        Ok(Sampling {
            params,
            stop,
            stop_token_ids,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            no_draft: self.draft == Some(false),
            grammar: self.guided.grammar()?,
        })
    }
}

/// `n`, validated.
pub fn choices_per_prompt(n: Option<i64>) -> Result<usize, ApiError> {
    match n {
        None => Ok(1),
        Some(n) if (1..=MAX_N).contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::invalid_param(
            "n",
            format!("`n` must be in [1, {MAX_N}], got {n}."),
        )),
    }
}

/// `max_tokens` (or `max_completion_tokens`), validated: at least 1.
pub fn max_tokens(param: &str, v: Option<i64>) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(m) if m >= 1 => Ok(Some(usize::try_from(m).unwrap_or(usize::MAX))),
        Some(m) => Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be at least 1, got {m}."),
        )),
    }
}

/// A number of logprob alternatives, validated against [`MAX_TOP_LOGPROBS`].
pub fn top_logprobs(param: &str, v: i64) -> Result<usize, ApiError> {
    if (0..=MAX_TOP_LOGPROBS).contains(&v) {
        Ok(v as usize)
    } else {
        Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be in [0, {MAX_TOP_LOGPROBS}], got {v}."),
        ))
    }
}

/// Token counts of a response, as OpenAI reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

/// OpenAI's `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache instead of computed.
    pub cached_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// The cached tokens a request's usage reports: each prompt once, by its first choice (choice
/// `p * n` of prompt-major order; the other choices of a prompt may have shared its blocks).
pub fn cached_prompt_tokens(
    per_choice: impl IntoIterator<Item = (usize, usize)>,
    n: usize,
) -> usize {
    per_choice
        .into_iter()
        .filter(|(index, _)| index % n.max(1) == 0)
        .map(|(_, cached)| cached)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_defaults_fill_what_a_request_leaves_out() {
        let d = SamplingDefaults {
            temperature: Some(0.6),
            top_k: Some(20),
            repetition_penalty: Some(1.1),
            ..SamplingDefaults::default()
        };
        let silent = SamplingFields::default()
            .with_defaults(&d)
            .validate(100)
            .unwrap();
        assert_eq!(
            (
                silent.params.temperature,
                silent.params.top_k,
                silent.params.top_p
            ),
            (0.6, 20, 1.0)
        );
        assert_eq!(silent.params.repetition_penalty, 1.1);
        let own = SamplingFields {
            temperature: Some(0.0),
            top_k: Some(-1),
            ..SamplingFields::default()
        }
        .with_defaults(&d)
        .validate(100)
        .unwrap();
        assert_eq!((own.params.temperature, own.params.top_k), (0.0, 0));
        // Without defaults the OpenAI ones apply.
        let plain = SamplingFields::default()
            .with_defaults(&SamplingDefaults::default())
            .validate(100)
            .unwrap();
        assert_eq!(plain.params.temperature, 1.0);
    }

    #[test]
    fn defaults_are_openai_defaults() {
        let s = SamplingFields::default().validate(100).unwrap();
        assert_eq!(s.params.temperature, 1.0);
        assert_eq!(s.params.top_p, 1.0);
        assert_eq!(s.params.top_k, 0);
        assert!(s.stop.is_empty() && !s.ignore_eos);
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        let cases: Vec<(SamplingFields, &str)> = vec![
            (
                SamplingFields {
                    temperature: Some(2.5),
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingFields {
                    temperature: Some(-0.1),
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingFields {
                    top_p: Some(0.0),
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingFields {
                    top_p: Some(1.5),
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingFields {
                    top_k: Some(-2),
                    ..Default::default()
                },
                "top_k",
            ),
            (
                SamplingFields {
                    min_p: Some(3.0),
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingFields {
                    presence_penalty: Some(1e30),
                    ..Default::default()
                },
                "presence_penalty",
            ),
            (
                SamplingFields {
                    frequency_penalty: Some(-9.0),
                    ..Default::default()
                },
                "frequency_penalty",
            ),
            (
                SamplingFields {
                    repetition_penalty: Some(0.0),
                    ..Default::default()
                },
                "repetition_penalty",
            ),
            (
                SamplingFields {
                    stop_token_ids: Some(&[5, 100]),
                    ..Default::default()
                },
                "stop_token_ids",
            ),
            (
                SamplingFields {
                    stop_token_ids: Some(&[-1]),
                    ..Default::default()
                },
                "stop_token_ids",
            ),
        ];
        for (fields, param) in cases {
            let e = fields.validate(100).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{}", e.message);
            assert_eq!(e.status.as_u16(), 400);
        }
    }

    #[test]
    fn stop_strings_are_checked() {
        let one = StopSpec::One("\n".into());
        let s = SamplingFields {
            stop: Some(&one),
            ..Default::default()
        }
        .validate(10)
        .unwrap();
        assert_eq!(s.stop, vec!["\n".to_string()]);
        let empty = StopSpec::Many(vec!["a".into(), String::new()]);
        assert!(SamplingFields {
            stop: Some(&empty),
            ..Default::default()
        }
        .validate(10)
        .is_err());
        let many = StopSpec::Many((0..17).map(|i| i.to_string()).collect());
        assert!(SamplingFields {
            stop: Some(&many),
            ..Default::default()
        }
        .validate(10)
        .is_err());
    }

    #[test]
    fn top_k_minus_one_disables_and_seed_maps_bitwise() {
        let s = SamplingFields {
            top_k: Some(-1),
            seed: Some(-1),
            ..Default::default()
        }
        .validate(10)
        .unwrap();
        assert_eq!(s.params.top_k, 0);
        assert_eq!(s.params.seed, Some(u64::MAX));
    }

    #[test]
    fn n_max_tokens_and_logprobs_bounds() {
        assert_eq!(choices_per_prompt(None).unwrap(), 1);
        assert_eq!(choices_per_prompt(Some(4)).unwrap(), 4);
        assert!(choices_per_prompt(Some(0)).is_err());
        assert!(choices_per_prompt(Some(1000)).is_err());
        assert_eq!(max_tokens("max_tokens", Some(7)).unwrap(), Some(7));
        assert_eq!(
            max_tokens("max_tokens", Some(0))
                .unwrap_err()
                .param
                .as_deref(),
            Some("max_tokens")
        );
        assert!(top_logprobs("top_logprobs", 21).is_err());
        assert_eq!(top_logprobs("logprobs", 5).unwrap(), 5);
    }
}
