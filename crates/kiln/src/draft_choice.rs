//! `--draft ngram|MODEL` and `--draft-tokens K`: speculative decoding for `generate` and
//! `serve`. A draft model must share the target's tokenizer, token for token; it runs on the
//! same kind of device as the target. A draft model that reads its target's KV cache (Gemma 4's
//! assistant, `gemma4_assistant`) is attached to the target's backend instead, after checking
//! that it fits the target.

use anyhow::{bail, Context};
use clap::Args;
use kiln_engine::{BackendDrafter, DraftConfig, Drafter, EngineConfig, ModelDrafter, NgramDrafter};
use kiln_load::{LoadedModel, LoadedWeights};

use crate::backend_choice::{build_backend_for, DeviceArgs};

#[derive(Debug, Clone, Args)]
pub struct DraftArgs {
    /// Speculative decoding: `ngram` (prompt lookup, no model), or a draft model (a .gguf, a
    /// Hugging Face folder or dummy:PRESET) with the target's tokenizer, or a Gemma 4 assistant
    /// (`gemma4_assistant`) for a Gemma 4 target, which reads the target's KV cache. The output
    /// is the same as without; only the speed differs. `KILN_SPEC=0` turns it off.
    #[arg(long)]
    pub draft: Option<String>,
    /// Most tokens drafted for one verify step (sampled requests draft half as many).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub draft_tokens: u32,
    /// No drafting while more sequences than this decode at once.
    #[arg(long, default_value_t = 8)]
    pub draft_max_batch: usize,
}

impl DraftArgs {
    /// Backend inputs a sequence may take in one step: its last token and, when drafting, up
    /// to `--draft-tokens` drafted ones, each its own decode row.
    pub fn inputs_per_seq(&self) -> usize {
        1 + if self.draft.is_some() {
            self.draft_tokens as usize
        } else {
            0
        }
    }

    /// The draft model to attach to the target's backend, when `--draft` names one that reads
    /// the target's KV cache (Gemma 4's assistant); an error names both models and what differs
    /// when it does not fit `target`.
    pub fn assistant(&self, target: &LoadedModel) -> anyhow::Result<Option<LoadedWeights>> {
        let Some(spec) = self.draft.as_deref().filter(|s| *s != "ngram") else {
            return Ok(None);
        };
        let header = kiln_load::inspect(spec)
            .with_context(|| format!("cannot read the draft model `{spec}`"))?;
        if !header.config.as_ref().is_ok_and(|c| c.assistant.is_some()) {
            return Ok(None);
        }
        let draft = kiln_load::load_weights(spec)
            .with_context(|| format!("cannot load the draft model `{spec}`"))?;
        if let Err(e) = draft.config.draft_spec(&target.config) {
            bail!(
                "the draft model `{}` ({}) does not fit the model `{}` ({}): {e:#}",
                draft.name,
                draft.config.arch,
                target.name,
                target.config.arch
            );
        }
        Ok(Some(draft))
    }

    /// The drafter these options name, for an engine serving `target` on `device`;
    /// `in_backend`: the target's backend holds the draft model (see [`DraftArgs::assistant`]).
    pub fn build(
        &self,
        target: &LoadedModel,
        device: &DeviceArgs,
        cfg: &EngineConfig,
        in_backend: bool,
    ) -> anyhow::Result<Option<(Box<dyn Drafter>, DraftConfig)>> {
        let Some(spec) = &self.draft else {
            return Ok(None);
        };
        let dcfg = DraftConfig {
            max_tokens: self.draft_tokens as usize,
            max_batch: self.draft_max_batch,
        };
        if spec == "ngram" {
            return Ok(Some((Box::new(NgramDrafter::default()), dcfg)));
        }
        if in_backend {
            return Ok(Some((Box::new(BackendDrafter), dcfg)));
        }
        let draft = kiln_load::load(spec)
            .with_context(|| format!("cannot load the draft model `{spec}`"))?;
        same_tokenizer(target, &draft)?;
        // The draft holds every drafting sequence's whole context plus its drafts (a sequence
        // that does not fit gets no drafts, and would recompute its context each time).
        let per_seq = cfg.max_context + self.draft_tokens as usize + 16;
        let kv_tokens = per_seq.saturating_mul(cfg.max_num_seqs.min(self.draft_max_batch).max(1));
        let backend = build_backend_for(&draft, device, cfg, kv_tokens, per_seq, 1)
            .with_context(|| format!("cannot start the draft model `{spec}`"))?;
        let drafter = ModelDrafter::new(backend, cfg.prefill_chunk);
        Ok(Some((Box::new(drafter), dcfg)))
    }
}

/// A draft proposes token ids of its own vocabulary: they mean the same to the target only if
/// both tokenizers give every id the same bytes.
fn same_tokenizer(target: &LoadedModel, draft: &LoadedModel) -> anyhow::Result<()> {
    let (t, d) = (&target.tokenizer, &draft.tokenizer);
    if t.vocab_size() != d.vocab_size() {
        bail!(
            "the draft model `{}` has a vocabulary of {} tokens, the model `{}` one of {}: a draft must share the target's tokenizer",
            draft.name,
            d.vocab_size(),
            target.name,
            t.vocab_size()
        );
    }
    if let Some(id) = (0..t.vocab_size() as u32).find(|&id| t.token_bytes(id) != d.token_bytes(id))
    {
        bail!(
            "the draft model `{}` and the model `{}` spell token {id} differently ({:?} vs {:?}): a draft must share the target's tokenizer",
            draft.name,
            target.name,
            String::from_utf8_lossy(&d.token_bytes(id)),
            String::from_utf8_lossy(&t.token_bytes(id))
        );
    }
    Ok(())
}
