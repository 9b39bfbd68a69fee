//! `kiln bench --draft ngram|MODEL`: batch-1 decode through the engine with and without
//! speculative decoding, on one prompt (by default a code-editing one: a source file, then the
//! request to write it again), alternating plain and drafted runs on one engine. Reports both
//! rates, the speed-up and what the drafts achieved.

use std::time::Instant;

use anyhow::{bail, ensure};
use kiln_engine::{DraftCounts, EngineConfig, GenEvent, GenerateRequest};
use kiln_load::LoadedModel;

use super::stats::Spread;
use crate::backend_choice::{build_backend_with, DeviceArgs};
use crate::draft_choice::DraftArgs;

/// The default prompt's file: this one, cut to a size most contexts hold with room to reply.
const FILE: &str = include_str!("speculative.rs");

/// The code-editing prompt: `bytes` of a source file and the request to write it again.
pub fn edit_prompt(bytes: usize) -> String {
    let mut end = bytes.min(FILE.len());
    while !FILE.is_char_boundary(end) {
        end -= 1;
    }
    let file = &FILE[..end];
    let first: String = file.lines().take(3).collect::<Vec<_>>().join("\n");
    format!("Here is a file:\n\n{file}\n\nThe same file again, unchanged:\n\n{first}")
}

/// Decode with and without drafts, over the repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecTiming {
    pub drafter: String,
    pub prompt_tokens: usize,
    pub generated: usize,
    /// Tokens per second after the first token.
    pub plain_tok_s: Spread,
    pub drafted_tok_s: Spread,
    /// Over the drafted runs.
    pub counts: DraftCounts,
}

/// Runs `warmup + repeats` pairs of greedy requests of `tokens` tokens on one engine that drafts
/// with `draft`: one opted out of drafting, one drafted. Their tokens must agree.
pub fn measure(
    model: &LoadedModel,
    device: &DeviceArgs,
    draft: &DraftArgs,
    prompt: &[u32],
    tokens: usize,
    warmup: usize,
    repeats: usize,
) -> anyhow::Result<SpecTiming> {
    let Some(name) = draft.draft.clone() else {
        bail!("no --draft given");
    };
    let max_context = prompt.len() + tokens + draft.draft_tokens as usize + 16;
    ensure!(
        max_context <= model.config.max_position,
        "the prompt ({} tokens) and {tokens} more do not fit the model's context of {}",
        prompt.len(),
        model.config.max_position
    );
    let cfg = EngineConfig {
        max_num_seqs: 1,
        max_queue: 1,
        max_context,
        ..EngineConfig::default()
    };
    let assistant = draft.assistant(model)?;
    let backend = build_backend_with(
        model,
        device,
        &cfg,
        max_context,
        max_context,
        draft.inputs_per_seq(),
        assistant.as_ref(),
    )?;
    let drafting = draft.build(model, device, &cfg, assistant.is_some())?;
    let engine = kiln_engine::start_with_drafter(backend, model.tokenizer.clone(), cfg, drafting);
    let run = |no_draft: bool| -> anyhow::Result<(f64, Vec<u32>, DraftCounts)> {
        let req = GenerateRequest {
            prompt: prompt.to_vec(),
            max_tokens: tokens,
            ignore_eos: true,
            no_draft,
            ..GenerateRequest::default()
        };
        let started = Instant::now();
        let mut stream = engine.submit(req)?;
        let (mut ids, mut first) = (Vec::new(), None);
        while let Some(ev) = stream.blocking_next() {
            match ev {
                GenEvent::Token(t) => {
                    first.get_or_insert_with(Instant::now);
                    ids.push(t.id);
                }
                GenEvent::Done(f) => {
                    let first = first.unwrap_or(started);
                    let secs = first.elapsed().as_secs_f64();
                    let rate = ids.len().saturating_sub(1) as f64 / secs.max(1e-9);
                    return Ok((rate, ids, f.draft));
                }
                GenEvent::Error(e) => bail!("the benchmark's request failed: {e}"),
            }
        }
        bail!("the engine stopped before the request finished")
    };
    let (mut plain, mut drafted) = (Vec::new(), Vec::new());
    let mut counts = DraftCounts::default();
    let mut generated = 0;
    for r in 0..warmup + repeats {
        let (p, plain_ids, _) = run(true)?;
        let (d, drafted_ids, c) = run(false)?;
        ensure!(
            plain_ids == drafted_ids,
            "drafted decoding gave other tokens than plain decoding (a bug: please report it)"
        );
        generated = plain_ids.len();
        if r >= warmup {
            plain.push(p);
            drafted.push(d);
            counts.proposed += c.proposed;
            counts.accepted += c.accepted;
            counts.target_passes += c.target_passes;
        }
    }
    engine.shutdown();
    let spread = |v: &[f64]| Spread::of(v).ok_or_else(|| anyhow::anyhow!("no timed run"));
    Ok(SpecTiming {
        drafter: name,
        prompt_tokens: prompt.len(),
        generated,
        plain_tok_s: spread(&plain)?,
        drafted_tok_s: spread(&drafted)?,
        counts,
    })
}
