//! A validated request, tokenised and ready to become one engine request per choice.

use kiln_engine::GenerateRequest;

use super::common::Sampling;
use crate::error::ApiError;

#[derive(Debug, Clone)]
pub struct GenerationPlan {
    /// The compiled form of `sampling.grammar`, once compiled: each choice gets its own copy.
    pub constraint: Option<kiln_engine::Constraint>,
    /// Token ids of each prompt (chat has one; completions may batch several).
    pub prompts: Vec<Vec<u32>>,
    /// Choices per prompt.
    pub n: usize,
    pub sampling: Sampling,
    /// None: generate until a stop condition or the end of the context.
    pub max_tokens: Option<usize>,
    /// How the request spelled the limit, for error messages.
    pub max_tokens_param: &'static str,
    /// The field the prompts came from (`messages`, `prompt`), for error messages.
    pub prompt_param: &'static str,
    /// Some(k): report each token's logprob and the k most likely alternatives.
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
}

impl GenerationPlan {
    /// One engine request per choice, prompt-major (choice `p * n + i` is prompt p's i-th).
    /// Refuses prompts that leave no room in the context, and limits that run past it.
    pub fn requests(&self, max_context: usize) -> Result<Vec<GenerateRequest>, ApiError> {
        let mut out = Vec::with_capacity(self.prompts.len() * self.n);
        for prompt in &self.prompts {
            let max_tokens = self.completion_budget(prompt.len(), max_context)?;
            for i in 0..self.n {
                let mut sampling = self.sampling.params.clone();
                // Seeded choices must differ from one another yet stay reproducible.
                sampling.seed = sampling.seed.map(|s| s.wrapping_add(i as u64));
                out.push(GenerateRequest {
                    prompt: prompt.clone(),
                    sampling,
                    max_tokens,
                    stop: self.sampling.stop.clone(),
                    stop_token_ids: self.sampling.stop_token_ids.clone(),
                    ignore_eos: self.sampling.ignore_eos,
                    logprobs: self.logprobs,
                    no_draft: self.sampling.no_draft,
                    constraint: self.constraint.clone(),
                });
            }
        }
        Ok(out)
    }

    /// Tokens a completion may have after a prompt of `prompt_len` tokens.
    fn completion_budget(&self, prompt_len: usize, max_context: usize) -> Result<usize, ApiError> {
        if prompt_len >= max_context {
            return Err(crate::prompt::too_long(
                self.prompt_param,
                max_context,
                prompt_len,
                false,
            ));
        }
        match self.max_tokens {
            None => Ok(max_context - prompt_len),
            Some(m) if prompt_len.saturating_add(m) <= max_context => Ok(m),
            Some(m) => Err(ApiError::context_length(format!(
                "This model's maximum context length is {max_context} tokens. However, you \
                 requested {} tokens ({prompt_len} in the prompt, {m} in the completion). \
                 Please reduce the prompt or `{}`.",
                prompt_len.saturating_add(m),
                self.max_tokens_param
            ))
            .with_param(self.max_tokens_param)),
        }
    }

    /// Prompt tokens over all prompts, each counted once however many choices it has.
    pub fn prompt_tokens(&self) -> usize {
        self.prompts.iter().map(Vec::len).sum()
    }

    pub fn num_choices(&self) -> usize {
        self.prompts.len() * self.n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::common::SamplingFields;

    fn plan(
        prompts: Vec<Vec<u32>>,
        n: usize,
        max_tokens: Option<usize>,
        seed: Option<i64>,
    ) -> GenerationPlan {
        GenerationPlan {
            constraint: None,
            prompts,
            n,
            sampling: SamplingFields {
                seed,
                ..Default::default()
            }
            .validate(100)
            .unwrap(),
            max_tokens,
            max_tokens_param: "max_tokens",
            prompt_param: "prompt",
            logprobs: None,
            stream: false,
            include_usage: false,
        }
    }

    #[test]
    fn one_request_per_choice_with_distinct_seeds() {
        let p = plan(vec![vec![1, 2], vec![3]], 3, Some(4), Some(10));
        let reqs = p.requests(16).unwrap();
        assert_eq!(reqs.len(), 6);
        assert_eq!(reqs[0].prompt, vec![1, 2]);
        assert_eq!(reqs[3].prompt, vec![3]);
        let seeds: Vec<_> = reqs.iter().map(|r| r.sampling.seed.unwrap()).collect();
        assert_eq!(seeds, vec![10, 11, 12, 10, 11, 12]);
        assert!(reqs.iter().all(|r| r.max_tokens == 4));
        assert_eq!(p.prompt_tokens(), 3);
        assert_eq!(p.num_choices(), 6);
    }

    #[test]
    fn missing_max_tokens_fills_the_context() {
        let reqs = plan(vec![vec![1; 10]], 1, None, None).requests(16).unwrap();
        assert_eq!(reqs[0].max_tokens, 6);
        assert_eq!(reqs[0].sampling.seed, None);
    }

    #[test]
    fn context_overflow_is_a_clear_400() {
        let e = plan(vec![vec![1; 10]], 1, Some(7), None)
            .requests(16)
            .unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert!(
            e.message
                .contains("17 tokens (10 in the prompt, 7 in the completion)"),
            "{}",
            e.message
        );
        let e = plan(vec![vec![1; 16]], 1, None, None)
            .requests(16)
            .unwrap_err();
        assert!(e.message.contains("prompt has 16 tokens"), "{}", e.message);
        assert_eq!(e.param.as_deref(), Some("prompt"));
        assert!(plan(vec![vec![1; 10]], 1, Some(6), None)
            .requests(16)
            .is_ok());
    }
}
