//! `kiln bench --grammar G`: decode through the engine with every stream held to a grammar,
//! against the same streams unconstrained, at each `--concurrency`; and what the grammar's
//! masks cost per step. Both runs sample (the bench's `--temperature`, 1.0 when it is 0, so
//! that random weights still wander through the grammar) with the same seeds.

use std::time::Instant;

use anyhow::{bail, Context};
use kiln_engine::{EngineConfig, EngineHandle, GenEvent, GenerateRequest, Grammar, SamplingParams};
use kiln_load::LoadedModel;

use super::stats::Spread;
use crate::backend_choice::{build_backend_for, DeviceArgs};

/// A `--grammar` value: `json_object`, `regex:PATTERN`, `lark:FILE` or a JSON schema's FILE.
pub fn parse_grammar(spec: &str) -> anyhow::Result<(String, Grammar)> {
    if spec == "json_object" {
        return Ok((spec.into(), Grammar::JsonObject));
    }
    if let Some(rx) = spec.strip_prefix("regex:") {
        return Ok((spec.into(), Grammar::Regex(rx.into())));
    }
    if let Some(path) = spec.strip_prefix("lark:") {
        let src = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the Lark grammar {path}"))?;
        return Ok((spec.into(), Grammar::Lark(src)));
    }
    let text = std::fs::read_to_string(spec).with_context(|| {
        format!("--grammar {spec}: not json_object, regex:..., lark:FILE or a readable schema file")
    })?;
    let schema = serde_json::from_str(&text)
        .with_context(|| format!("{spec} is not a JSON schema (not JSON)"))?;
    let name = std::path::Path::new(spec)
        .file_stem()
        .map_or(spec.to_string(), |s| s.to_string_lossy().into_owned());
    Ok((name, Grammar::JsonSchema(schema)))
}

/// One grammar at one stream count: both runs' rates and the masks' cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstrainedTiming {
    pub grammar: String,
    pub streams: usize,
    /// Tokens per stream asked for, and generated on average by the constrained streams (a
    /// grammar that completes ends its stream early).
    pub tokens: usize,
    pub constrained_generated: f64,
    /// All streams together, after each stream's first token.
    pub plain_tok_s: Spread,
    pub constrained_tok_s: Spread,
    /// Wall time of a step's masks (computed while the forward pass runs), per step.
    pub mask_ms_per_step: f64,
    /// Masks per constrained step (rows under a grammar).
    pub masks_per_step: f64,
}

/// An engine for the grammar cases: `streams` sequences of `prompt + tokens`, one token a step.
pub fn engine(
    model: &LoadedModel,
    device: &DeviceArgs,
    prompt: &[u32],
    tokens: usize,
    streams: usize,
) -> anyhow::Result<EngineHandle> {
    let max_context = prompt.len() + tokens + 16;
    let cfg = EngineConfig {
        max_num_seqs: streams,
        max_queue: streams,
        max_context,
        max_batched_tokens: EngineConfig::default()
            .max_batched_tokens
            .max(streams * prompt.len()),
        ..EngineConfig::default()
    };
    let backend = build_backend_for(model, device, &cfg, max_context * streams, max_context, 1)?;
    Ok(kiln_engine::start(backend, model.tokenizer.clone(), cfg))
}

/// Runs `warmup + repeats` rounds of `streams` requests of `tokens` tokens, plain then held to
/// `grammar`, on `engine`.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    engine: &EngineHandle,
    (name, grammar): &(String, Grammar),
    prompt: &[u32],
    tokens: usize,
    streams: usize,
    temperature: f32,
    warmup: usize,
    repeats: usize,
) -> anyhow::Result<ConstrainedTiming> {
    let compiled = engine
        .compile(grammar)
        .with_context(|| format!("--grammar {name}"))?;
    let temperature = if temperature > 0.0 { temperature } else { 1.0 };
    let (mut plain, mut constrained) = (Vec::new(), Vec::new());
    let (mut generated, mut masks, mut mask_s, mut steps) = (0.0, 0u64, 0.0, 0u64);
    for r in 0..warmup + repeats {
        let (rate, _, _) = round(engine, prompt, tokens, streams, temperature, None)?;
        let before = engine.stats();
        let (c_rate, c_tokens, _) = round(
            engine,
            prompt,
            tokens,
            streams,
            temperature,
            Some(&compiled),
        )?;
        let after = engine.stats();
        if r >= warmup {
            plain.push(rate);
            constrained.push(c_rate);
            generated += c_tokens as f64 / streams as f64;
            masks += after.grammar_masks - before.grammar_masks;
            mask_s += after.grammar_mask_seconds - before.grammar_mask_seconds;
            steps += after.steps - before.steps;
        }
    }
    let spread = |v: &[f64]| Spread::of(v).ok_or_else(|| anyhow::anyhow!("no timed run"));
    let steps = steps.max(1) as f64;
    Ok(ConstrainedTiming {
        grammar: name.clone(),
        streams,
        tokens,
        constrained_generated: generated / repeats.max(1) as f64,
        plain_tok_s: spread(&plain)?,
        constrained_tok_s: spread(&constrained)?,
        mask_ms_per_step: mask_s * 1e3 / steps,
        masks_per_step: masks as f64 / steps,
    })
}

/// `streams` seeded requests at once; their summed decode rate (each stream's tokens after
/// its first over the time since its first), the tokens generated, the wall time.
fn round(
    engine: &EngineHandle,
    prompt: &[u32],
    tokens: usize,
    streams: usize,
    temperature: f32,
    constraint: Option<&kiln_engine::Constraint>,
) -> anyhow::Result<(f64, usize, f64)> {
    let started = Instant::now();
    let mut handles = Vec::with_capacity(streams);
    for i in 0..streams {
        let req = GenerateRequest {
            prompt: prompt.to_vec(),
            max_tokens: tokens,
            ignore_eos: true,
            sampling: SamplingParams {
                temperature,
                seed: Some(1000 + i as u64),
                ..SamplingParams::default()
            },
            constraint: constraint.cloned(),
            ..GenerateRequest::default()
        };
        handles.push(engine.submit(req)?);
    }
    // Each stream read on its own thread, so that its times are its tokens' own.
    let results: Vec<anyhow::Result<(usize, f64)>> = std::thread::scope(|scope| {
        let readers: Vec<_> = handles
            .into_iter()
            .map(|mut stream| {
                scope.spawn(move || {
                    let (mut n, mut first) = (0usize, None);
                    loop {
                        match stream.blocking_next() {
                            Some(GenEvent::Token(_)) => {
                                first.get_or_insert_with(Instant::now);
                                n += 1;
                            }
                            Some(GenEvent::Done(_)) => break,
                            Some(GenEvent::Error(e)) => {
                                bail!("the benchmark's request failed: {e}")
                            }
                            None => bail!("the engine stopped before the request finished"),
                        }
                    }
                    Ok((n, first.map_or(0.0, |f: Instant| f.elapsed().as_secs_f64())))
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| bail!("a reader thread panicked"))
            })
            .collect()
    });
    let (mut rate, mut total) = (0.0, 0);
    for r in results {
        let (n, secs) = r?;
        if n > 1 && secs > 0.0 {
            rate += (n - 1) as f64 / secs;
        }
        total += n;
    }
    Ok((rate, total, started.elapsed().as_secs_f64()))
}
