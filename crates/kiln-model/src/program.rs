//! The layer program: the order of a forward step, written once for every backend. A backend
//! implements [`StepOps`] at its fused-kernel granularity; [`run_step`] calls the ops in the
//! model's order, reading the per-layer spec. Under CUDA graph capture the program issues the
//! same launches in the same order as an eager step, since it is the same code.
//!
//! The ops work on activations the backend owns, named by their role:
//!
//! - `x`: the residual stream, `[tokens, hidden]`;
//! - `delta`: what the last block (attention or feed-forward) adds to `x`, pending until the
//!   next norm adds it (so a backend may fuse the add into the norm);
//! - `normed`: the input of the next projection;
//! - `qkv`, `attn`, `gate_up`, `act`: the projections' outputs and the attention and
//!   activation results in between;
//! - `per_layer`: the per-layer inputs of every token and layer (Gemma 4), and `pl_gate`,
//!   `pl_act`: one layer's gate of its slice and the gated slice;
//! - `draft_hidden`: a draft model's input hidden state per row, the target's at first and
//!   then what each draft step gives the next ([`run_draft_step`]).

use anyhow::Result;

use crate::schema::LayerWeight;
use crate::spec::{FfnSpec, ModelSpec};

/// What a backend must provide for [`run_step`]. `layer` indexes the spec's layers; the
/// backend reads that layer's [`crate::spec::LayerSpec`] for shapes, windows, eps and RoPE.
pub trait StepOps {
    /// `x` = the embedding rows of the step's tokens (times the spec's `embed_scale`).
    fn embed(&mut self) -> Result<()>;

    /// `per_layer` = the per-layer inputs of the step's tokens, from their ids and from `x`
    /// as `embed` left it ([`crate::spec::PerLayerInputSpec`]).
    fn per_layer_inputs(&mut self) -> Result<()>;

    /// `x += delta` when a block left one pending, then `normed = rmsnorm(x) * weight`
    /// (`weight`: [`LayerWeight::AttnNorm`] or [`LayerWeight::FfnNorm`]).
    fn add_norm(&mut self, layer: usize, weight: LayerWeight) -> Result<()>;

    /// One projection by a matrix of the schema, from and to the activations its role implies:
    /// `Qkv`: normed -> qkv; `O`: attn -> delta; `GateUp`: normed -> gate_up; `Down`: act ->
    /// delta; `PerLayerGate`: x (the pending delta added first) -> pl_gate; `PerLayerProj`:
    /// pl_act -> delta (those that write `delta` leave it pending).
    fn linear(&mut self, layer: usize, weight: LayerWeight) -> Result<()>;

    /// `delta = rmsnorm(delta) * weight`, still pending (`weight`: a post-norm of the schema).
    fn norm_delta(&mut self, layer: usize, weight: LayerWeight) -> Result<()>;

    /// Finishes `qkv`: bias, per-head Q/K norms (and V's), RoPE at each token's position;
    /// writes K and V to the layer's KV cache at each token's slot. A layer that reads
    /// another's KV only finishes Q.
    fn qkv_rope_kv(&mut self, layer: usize) -> Result<()>;

    /// From here on only the rows whose logits the step returns matter: a backend may drop the
    /// others (their K and V are in the cache, which is all later steps need of them).
    fn keep_logit_rows(&mut self) -> Result<()>;

    /// `attn` = attention of each row's Q over its sequence's cached K and V (causal, within
    /// the layer's window), in the cache of the layer the spec's `kv_from` names.
    fn attention(&mut self, layer: usize) -> Result<()>;

    /// `act` = the layer's activation of `gate_up` (`act(gate) * up`).
    fn ffn_activation(&mut self, layer: usize) -> Result<()>;

    /// `pl_act` = `act(pl_gate) * per_layer[layer]`.
    fn per_layer_activation(&mut self, layer: usize) -> Result<()>;

    /// `x = (x + delta) * OutputScale`: the end of a layer with an output scale.
    fn scale_residual(&mut self, layer: usize) -> Result<()>;

    /// `x + delta` at the rows that want logits, the final norm, the LM head (and the spec's
    /// soft cap; a draft model's ordered LM head scores the tokens of its best centroids only).
    fn logits(&mut self) -> Result<()>;

    /// A draft model's input: `x = DraftPreProjection([target embedding of each row's token *
    /// input_embed_scale, draft_hidden])` ([`crate::spec::DraftSpec`]).
    fn draft_input(&mut self) -> Result<()> {
        anyhow::bail!("this backend runs no draft model")
    }

    /// `draft_hidden = DraftPostProjection(normed)`: the final-normed rows `logits` left,
    /// projected back to the target's width for the next draft step.
    fn draft_output(&mut self) -> Result<()> {
        anyhow::bail!("this backend runs no draft model")
    }
}

/// One forward step of `spec` through `ops`.
pub fn run_step(spec: &ModelSpec, ops: &mut impl StepOps) -> Result<()> {
    ops.embed()?;
    if spec.per_layer_input.is_some() {
        ops.per_layer_inputs()?;
    }
    run_layers(spec, ops)?;
    ops.logits()
}

/// One step of a draft model that reads its target (`spec.draft`): the layers between its
/// projections from and back to the target ([`crate::spec::DraftSpec`]).
pub fn run_draft_step(spec: &ModelSpec, ops: &mut impl StepOps) -> Result<()> {
    anyhow::ensure!(spec.draft.is_some(), "the model is not a draft model");
    ops.draft_input()?;
    run_layers(spec, ops)?;
    ops.logits()?;
    ops.draft_output()
}

/// Every layer, in the model's order.
fn run_layers(spec: &ModelSpec, ops: &mut impl StepOps) -> Result<()> {
    let last = spec.layers.len().saturating_sub(1);
    for (l, layer) in spec.layers.iter().enumerate() {
        ops.add_norm(l, LayerWeight::AttnNorm)?;
        ops.linear(l, LayerWeight::Qkv)?;
        ops.qkv_rope_kv(l)?;
        if l == last {
            ops.keep_logit_rows()?;
        }
        ops.attention(l)?;
        ops.linear(l, LayerWeight::O)?;
        if layer.post_norms {
            ops.norm_delta(l, LayerWeight::PostAttnNorm)?;
        }
        ops.add_norm(l, LayerWeight::FfnNorm)?;
        match layer.ffn {
            FfnSpec::Gated { .. } => {
                ops.linear(l, LayerWeight::GateUp)?;
                ops.ffn_activation(l)?;
                ops.linear(l, LayerWeight::Down)?;
            }
        }
        if layer.post_norms {
            ops.norm_delta(l, LayerWeight::PostFfnNorm)?;
        }
        if layer.per_layer_input.is_some() {
            ops.linear(l, LayerWeight::PerLayerGate)?;
            ops.per_layer_activation(l)?;
            ops.linear(l, LayerWeight::PerLayerProj)?;
            ops.norm_delta(l, LayerWeight::PerLayerPostNorm)?;
        }
        if layer.output_scale {
            ops.scale_residual(l)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;

    /// Records the calls, to pin the order down.
    #[derive(Default)]
    struct Trace(Vec<String>);

    impl StepOps for Trace {
        fn embed(&mut self) -> Result<()> {
            self.0.push("embed".into());
            Ok(())
        }
        fn per_layer_inputs(&mut self) -> Result<()> {
            self.0.push("per_layer_inputs".into());
            Ok(())
        }
        fn norm_delta(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
            self.0.push(format!("{layer}:norm_delta {weight:?}"));
            Ok(())
        }
        fn per_layer_activation(&mut self, layer: usize) -> Result<()> {
            self.0.push(format!("{layer}:per_layer_activation"));
            Ok(())
        }
        fn scale_residual(&mut self, layer: usize) -> Result<()> {
            self.0.push(format!("{layer}:scale_residual"));
            Ok(())
        }
        fn add_norm(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
            self.0.push(format!("{layer}:add_norm {weight:?}"));
            Ok(())
        }
        fn linear(&mut self, layer: usize, weight: LayerWeight) -> Result<()> {
            self.0.push(format!("{layer}:linear {weight:?}"));
            Ok(())
        }
        fn qkv_rope_kv(&mut self, layer: usize) -> Result<()> {
            self.0.push(format!("{layer}:qkv_rope_kv"));
            Ok(())
        }
        fn keep_logit_rows(&mut self) -> Result<()> {
            self.0.push("keep_logit_rows".into());
            Ok(())
        }
        fn attention(&mut self, layer: usize) -> Result<()> {
            self.0.push(format!("{layer}:attention"));
            Ok(())
        }
        fn ffn_activation(&mut self, layer: usize) -> Result<()> {
            self.0.push(format!("{layer}:ffn_activation"));
            Ok(())
        }
        fn logits(&mut self) -> Result<()> {
            self.0.push("logits".into());
            Ok(())
        }
        fn draft_input(&mut self) -> Result<()> {
            self.0.push("draft_input".into());
            Ok(())
        }
        fn draft_output(&mut self) -> Result<()> {
            self.0.push("draft_output".into());
            Ok(())
        }
    }

    #[test]
    fn a_draft_step_runs_the_same_layers_between_its_projections() {
        let target = preset("gemma4-tiny").unwrap();
        let spec = preset("gemma4-tiny-assistant")
            .unwrap()
            .draft_spec(&target)
            .unwrap();
        let mut t = Trace::default();
        run_draft_step(&spec, &mut t).unwrap();
        let n = t.0.len();
        assert_eq!(t.0[0], "draft_input");
        assert_eq!(t.0[n - 2..], ["logits", "draft_output"]);
        // The blocks are Gemma 4's, without per-layer inputs: what run_step runs for them.
        let mut plain = Trace::default();
        run_step(&spec, &mut plain).unwrap();
        assert_eq!(t.0[1..n - 2], plain.0[1..plain.0.len() - 1]);
        assert!(t.0.iter().all(|s| !s.contains("PerLayer")));
        assert!(run_draft_step(&target.spec(), &mut Trace::default()).is_err());
    }

    #[test]
    fn the_program_is_norm_attention_norm_ffn_per_layer() {
        let mut c = preset("tiny").unwrap();
        c.num_layers = 2;
        let mut t = Trace::default();
        run_step(&c.spec(), &mut t).unwrap();
        let layer = |l: usize, last: bool| {
            let mut v = vec![
                format!("{l}:add_norm AttnNorm"),
                format!("{l}:linear Qkv"),
                format!("{l}:qkv_rope_kv"),
            ];
            if last {
                v.push("keep_logit_rows".into());
            }
            v.extend([
                format!("{l}:attention"),
                format!("{l}:linear O"),
                format!("{l}:add_norm FfnNorm"),
                format!("{l}:linear GateUp"),
                format!("{l}:ffn_activation"),
                format!("{l}:linear Down"),
            ]);
            v
        };
        let mut want = vec!["embed".to_string()];
        want.extend(layer(0, false));
        want.extend(layer(1, true));
        want.push("logits".into());
        assert_eq!(t.0, want);
    }

    #[test]
    fn gemma4_layers_add_post_norms_the_per_layer_input_and_the_output_scale() {
        let c = preset("gemma4-tiny").unwrap();
        let mut t = Trace::default();
        run_step(&c.spec(), &mut t).unwrap();
        assert_eq!(t.0[..2], ["embed", "per_layer_inputs"]);
        let layer0: Vec<&str> = t.0[2..]
            .iter()
            .take_while(|s| s.starts_with("0:"))
            .map(|s| s.as_str())
            .collect();
        assert_eq!(
            layer0,
            [
                "0:add_norm AttnNorm",
                "0:linear Qkv",
                "0:qkv_rope_kv",
                "0:attention",
                "0:linear O",
                "0:norm_delta PostAttnNorm",
                "0:add_norm FfnNorm",
                "0:linear GateUp",
                "0:ffn_activation",
                "0:linear Down",
                "0:norm_delta PostFfnNorm",
                "0:linear PerLayerGate",
                "0:per_layer_activation",
                "0:linear PerLayerProj",
                "0:norm_delta PerLayerPostNorm",
                "0:scale_residual",
            ]
        );
        assert_eq!(t.0.last().map(String::as_str), Some("logits"));
    }
}
