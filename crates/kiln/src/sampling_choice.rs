//! Sampling settings as a command line gives them: each flag wins where given, the model's
//! recommended values (generation_config.json, GGUF general.sampling.*) fill the rest unless
//! `--ignore-generation-config`, and kiln's defaults (greedy) whatever remains.

use clap::Args;
use kiln_engine::SamplingParams;
use kiln_load::SamplingDefaults;

#[derive(Debug, Clone, Default, Args)]
pub struct SamplingArgs {
    /// Softmax temperature; 0 is greedy decoding [default: the model's generation config,
    /// else 0].
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Keep only the k most likely tokens; 0 keeps every token [default: the model's, else 0].
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Keep the most likely tokens whose probabilities add up to this (nucleus sampling)
    /// [default: the model's, else 1].
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than this fraction of the most likely one [default: the
    /// model's, else 0].
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Divide the logits of tokens already in the prompt or output by this (1: no penalty)
    /// [default: the model's, else 1].
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    /// Same seed, same prompt, same settings: same text.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Leave the model's own sampling defaults (generation_config.json, GGUF
    /// general.sampling.*) unused: unset values are kiln's defaults (greedy).
    #[arg(long)]
    pub ignore_generation_config: bool,
}

impl SamplingArgs {
    /// The model's defaults this run uses (none with `--ignore-generation-config`).
    pub fn model_defaults<'a>(&self, model: &'a SamplingDefaults) -> Option<&'a SamplingDefaults> {
        (!self.ignore_generation_config && !model.is_empty()).then_some(model)
    }

    /// The settings: flags, then the model's defaults, then kiln's.
    pub fn resolve(&self, model: &SamplingDefaults) -> SamplingParams {
        let none = SamplingDefaults::default();
        let d = self.model_defaults(model).unwrap_or(&none);
        let base = SamplingParams::default();
        SamplingParams {
            temperature: self.temperature.or(d.temperature).unwrap_or(0.0),
            top_k: self.top_k.or(d.top_k).unwrap_or(base.top_k),
            top_p: self.top_p.or(d.top_p).unwrap_or(base.top_p),
            min_p: self.min_p.or(d.min_p).unwrap_or(base.min_p),
            repetition_penalty: self
                .repetition_penalty
                .or(d.repetition_penalty)
                .unwrap_or(base.repetition_penalty),
            seed: self.seed,
            ..base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> SamplingDefaults {
        SamplingDefaults {
            temperature: Some(0.7),
            top_p: Some(0.9),
            repetition_penalty: Some(1.3),
            source: Some("generation_config.json".into()),
            ..SamplingDefaults::default()
        }
    }

    #[test]
    fn flags_win_then_the_model_then_greedy() {
        let flags = SamplingArgs {
            temperature: Some(0.0),
            ..SamplingArgs::default()
        };
        let p = flags.resolve(&model());
        assert_eq!(
            (p.temperature, p.top_p, p.repetition_penalty),
            (0.0, 0.9, 1.3)
        );
        let p = SamplingArgs::default().resolve(&model());
        assert_eq!((p.temperature, p.top_k), (0.7, 0));
        let ignore = SamplingArgs {
            ignore_generation_config: true,
            ..SamplingArgs::default()
        };
        assert_eq!(
            ignore.resolve(&model()),
            SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            }
        );
        assert!(ignore.model_defaults(&model()).is_none());
        let p = SamplingArgs::default().resolve(&SamplingDefaults::default());
        assert_eq!(
            p.temperature, 0.0,
            "a model without defaults decodes greedily"
        );
    }
}
