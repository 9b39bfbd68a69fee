//! The sampling settings a model's authors recommend: `generation_config.json` in a Hugging
//! Face folder (as transformers and vLLM read it), `general.sampling.*` in a GGUF (as
//! llama.cpp reads it). A request or a flag that sets a value wins; these fill the rest.

use std::path::Path;

use anyhow::Context;
use kiln_formats::GgufFile;
use serde_json::Value;

/// Each value the model's files set; None where they are silent.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SamplingDefaults {
    /// 0 for greedy (`do_sample: false`).
    pub temperature: Option<f32>,
    /// 0 keeps every token.
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// Where they came from ("generation_config.json", "GGUF general.sampling.*"); None when
    /// the model sets nothing.
    pub source: Option<String>,
}

impl SamplingDefaults {
    pub fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_k.is_none()
            && self.top_p.is_none()
            && self.min_p.is_none()
            && self.repetition_penalty.is_none()
    }

    /// "temperature 0.7, top_p 0.9, repetition_penalty 1.2" (the values set).
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = self.temperature {
            parts.push(if t == 0.0 {
                "greedy".to_string()
            } else {
                format!("temperature {t}")
            });
        }
        if let Some(k) = self.top_k {
            parts.push(format!("top_k {k}"));
        }
        if let Some(p) = self.top_p {
            parts.push(format!("top_p {p}"));
        }
        if let Some(p) = self.min_p {
            parts.push(format!("min_p {p}"));
        }
        if let Some(r) = self.repetition_penalty {
            parts.push(format!("repetition_penalty {r}"));
        }
        if parts.is_empty() {
            return "none".into();
        }
        parts.join(", ")
    }

    /// `dir/generation_config.json`; nothing when the file is absent.
    pub fn from_hf_dir(dir: &Path) -> anyhow::Result<SamplingDefaults> {
        let path = dir.join("generation_config.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(SamplingDefaults::default());
        };
        let json: Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: invalid JSON", path.display()))?;
        Ok(Self::from_generation_config(&json))
    }

    /// transformers' meaning: `do_sample: false` is greedy whatever the temperature says;
    /// `do_sample: true` samples at the temperature given (1.0 when none is). A config that
    /// leaves `do_sample` out gets the values it sets, as vLLM applies them.
    pub fn from_generation_config(j: &Value) -> SamplingDefaults {
        let f = |k: &str| j.get(k).and_then(Value::as_f64).map(|v| v as f32);
        let temperature = match j.get("do_sample").and_then(Value::as_bool) {
            Some(false) => Some(0.0),
            Some(true) => Some(f("temperature").unwrap_or(1.0)),
            None => f("temperature"),
        };
        let d = SamplingDefaults {
            temperature,
            top_k: j
                .get("top_k")
                .and_then(Value::as_u64)
                .and_then(|k| usize::try_from(k).ok()),
            top_p: f("top_p"),
            min_p: f("min_p"),
            repetition_penalty: f("repetition_penalty"),
            source: None,
        };
        d.with_source("generation_config.json")
    }

    /// llama.cpp's `general.sampling.*` keys (temp, top_k, top_p, min_p, penalty_repeat).
    pub fn from_gguf(g: &GgufFile) -> SamplingDefaults {
        let f = |k: &str| {
            g.get_f64(&format!("general.sampling.{k}"))
                .ok()
                .flatten()
                .map(|v| v as f32)
        };
        let d = SamplingDefaults {
            temperature: f("temp"),
            top_k: g
                .get_u64("general.sampling.top_k")
                .ok()
                .flatten()
                .and_then(|k| usize::try_from(k).ok()),
            top_p: f("top_p"),
            min_p: f("min_p"),
            repetition_penalty: f("penalty_repeat"),
            source: None,
        };
        d.with_source("GGUF general.sampling.*")
    }

    fn with_source(mut self, source: &str) -> SamplingDefaults {
        if !self.is_empty() {
            self.source = Some(source.to_string());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn do_sample_decides_as_in_transformers() {
        let greedy =
            serde_json::json!({"do_sample": false, "temperature": 0.6, "repetition_penalty": 1.2});
        let d = SamplingDefaults::from_generation_config(&greedy);
        assert_eq!(d.temperature, Some(0.0));
        assert_eq!(d.repetition_penalty, Some(1.2));
        assert_eq!(d.source.as_deref(), Some("generation_config.json"));
        assert_eq!(d.summary(), "greedy, repetition_penalty 1.2");

        let sampled = serde_json::json!({"do_sample": true, "top_k": 20, "top_p": 0.95});
        let d = SamplingDefaults::from_generation_config(&sampled);
        assert_eq!(
            (d.temperature, d.top_k, d.top_p),
            (Some(1.0), Some(20), Some(0.95))
        );

        let unsaid = serde_json::json!({"temperature": 0.6, "top_p": 0.9});
        let d = SamplingDefaults::from_generation_config(&unsaid);
        assert_eq!((d.temperature, d.top_p), (Some(0.6), Some(0.9)));

        let ids_only = serde_json::json!({"bos_token_id": 1, "eos_token_id": [2]});
        let d = SamplingDefaults::from_generation_config(&ids_only);
        assert!(d.is_empty() && d.source.is_none(), "{d:?}");
        assert_eq!(d.summary(), "none");
    }
}
