//! The fused weight schema: which canonical tensors every backend holds together as one (Q, K
//! and V as one projection, gate and up as another), in what order, and what stands in for a
//! part the file does not have. Declared once here; backends only pack or upload what it names.

use crate::spec::{FfnSpec, LayerSpec, ModelSpec};
use crate::{Role, TensorId, WeightSource};

/// A weight of one layer as the backends hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerWeight {
    AttnNorm,
    /// `[q_dim + 2 kv_dim, hidden]`: Q rows, then K, then V.
    Qkv,
    /// `[q_dim + 2 kv_dim]`, in the order of `Qkv`.
    QkvBias,
    QNorm,
    KNorm,
    O,
    FfnNorm,
    /// `[2 intermediate, hidden]`: gate rows, then up.
    GateUp,
    Down,
    /// Norms of the attention and feed-forward outputs (Gemma).
    PostAttnNorm,
    PostFfnNorm,
    /// The per-layer input's gate `[width, hidden]`, projection `[hidden, width]` and the norm
    /// of its output (Gemma 4).
    PerLayerGate,
    PerLayerProj,
    PerLayerPostNorm,
    /// `[1]`: the factor of the layer's output (Gemma 4's `layer_scalar`).
    OutputScale,
}

impl LayerWeight {
    /// Every layer weight, in load order.
    pub const ALL: [LayerWeight; 15] = [
        LayerWeight::AttnNorm,
        LayerWeight::Qkv,
        LayerWeight::QkvBias,
        LayerWeight::QNorm,
        LayerWeight::KNorm,
        LayerWeight::O,
        LayerWeight::PostAttnNorm,
        LayerWeight::FfnNorm,
        LayerWeight::GateUp,
        LayerWeight::Down,
        LayerWeight::PostFfnNorm,
        LayerWeight::PerLayerGate,
        LayerWeight::PerLayerProj,
        LayerWeight::PerLayerPostNorm,
        LayerWeight::OutputScale,
    ];

    /// A dense index, for backends that keep a layer's weights in an array.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The projections `--quantize fp8` keeps in fp8 (kiln_formats::fp8), with their input
    /// rows rounded to it: a layer's four large GEMMs. The embedding, the LM head and Gemma
    /// 4's per-layer projections stay in the backend's format.
    pub fn fp8_projection(self) -> bool {
        matches!(
            self,
            LayerWeight::Qkv | LayerWeight::O | LayerWeight::GateUp | LayerWeight::Down
        )
    }
}

/// A weight of the whole model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GlobalWeight {
    /// `[vocab, hidden]`; also the LM head when embeddings are tied.
    Embedding,
    /// `[vocab, hidden]`, absent when tied.
    LmHead,
    OutputNorm,
    /// Gemma 4's per-layer inputs: the token table `[vocab, layers * width]`, the projection
    /// of the embedding `[layers * width, hidden]` and its norm `[width]`.
    PerLayerEmbedding,
    PerLayerProjection,
    PerLayerProjNorm,
    /// A draft model's projections from and to its target (`[hidden, 2 backbone]` and
    /// `[backbone, hidden]`), and its ordered LM head's centroids `[centroids, hidden]` and
    /// token ordering `[vocab]` (ids, exact in f32).
    DraftPreProjection,
    DraftPostProjection,
    Centroids,
    TokenOrdering,
}

/// What a missing part becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfAbsent {
    /// Loading fails, naming the tensor.
    Error,
    /// Zeros (a bias the file leaves out adds nothing).
    Zeros,
    /// Ones (a scale the file leaves out changes nothing).
    Ones,
}

/// One canonical tensor inside a fused one: `rows` rows (elements, for a vector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub id: TensorId,
    pub rows: usize,
}

/// A weight as backends hold it: its parts stacked along the rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fused<W> {
    pub weight: W,
    /// Columns of a matrix (its input width); None for a vector.
    pub cols: Option<usize>,
    pub parts: Vec<Part>,
    pub if_absent: IfAbsent,
}

impl<W> Fused<W> {
    pub fn rows(&self) -> usize {
        self.parts.iter().map(|p| p.rows).sum()
    }

    /// Elements in all.
    pub fn len(&self) -> usize {
        self.rows() * self.cols.unwrap_or(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each part with the element offset it starts at.
    pub fn offsets(&self) -> impl Iterator<Item = (Part, usize)> + '_ {
        let cols = self.cols.unwrap_or(1);
        self.parts.iter().scan(0, move |at, p| {
            let start = *at;
            *at += p.rows * cols;
            Some((*p, start))
        })
    }

    /// What stands in for an absent part, element by element.
    pub fn absent_value(&self) -> f32 {
        match self.if_absent {
            IfAbsent::Ones => 1.0,
            IfAbsent::Zeros | IfAbsent::Error => 0.0,
        }
    }

    /// Whether the source must be asked for this part (or it is left as `if_absent` says).
    pub fn loads(&self, part: &Part, src: &dyn WeightSource) -> bool {
        self.if_absent == IfAbsent::Error || src.has(part.id)
    }
}

fn matrix<W>(weight: W, cols: usize, parts: Vec<Part>) -> Fused<W> {
    Fused {
        weight,
        cols: Some(cols),
        parts,
        if_absent: IfAbsent::Error,
    }
}

fn vector<W>(weight: W, parts: Vec<Part>, if_absent: IfAbsent) -> Fused<W> {
    Fused {
        weight,
        cols: None,
        parts,
        if_absent,
    }
}

/// The weights layer `layer` has, in load order.
pub fn layer_weights(layer: usize, spec: &LayerSpec, hidden: usize) -> Vec<Fused<LayerWeight>> {
    let part = |role, rows| Part {
        id: TensorId::layer(layer, role),
        rows,
    };
    let norm = |w, role, rows| vector(w, vec![part(role, rows)], IfAbsent::Error);
    let a = &spec.attn;
    let (q, hd) = (a.q_dim(), a.head_dim);
    // A layer that reads another's KV has no K or V projection; V may be K itself.
    let mut qkv = vec![part(Role::Q, q)];
    if a.k_rows() > 0 {
        qkv.push(part(Role::K, a.k_rows()));
    }
    if a.v_rows() > 0 {
        qkv.push(part(Role::V, a.v_rows()));
    }
    let mut out = vec![
        norm(LayerWeight::AttnNorm, Role::AttnNorm, hidden),
        matrix(LayerWeight::Qkv, hidden, qkv),
    ];
    if a.qkv_bias {
        let mut parts = vec![part(Role::QBias, q)];
        if a.k_rows() > 0 {
            parts.push(part(Role::KBias, a.k_rows()));
        }
        if a.v_rows() > 0 {
            parts.push(part(Role::VBias, a.v_rows()));
        }
        out.push(vector(LayerWeight::QkvBias, parts, IfAbsent::Zeros));
    }
    if a.qk_norm {
        out.push(norm(LayerWeight::QNorm, Role::QNorm, hd));
        if a.writes_kv() {
            out.push(norm(LayerWeight::KNorm, Role::KNorm, hd));
        }
    }
    out.push(matrix(LayerWeight::O, q, vec![part(Role::O, hidden)]));
    if spec.post_norms {
        out.push(norm(LayerWeight::PostAttnNorm, Role::PostAttnNorm, hidden));
    }
    out.push(norm(LayerWeight::FfnNorm, Role::FfnNorm, hidden));
    match spec.ffn {
        FfnSpec::Gated { intermediate, .. } => {
            out.push(matrix(
                LayerWeight::GateUp,
                hidden,
                vec![part(Role::Gate, intermediate), part(Role::Up, intermediate)],
            ));
            out.push(matrix(
                LayerWeight::Down,
                intermediate,
                vec![part(Role::Down, hidden)],
            ));
        }
    }
    if spec.post_norms {
        out.push(norm(LayerWeight::PostFfnNorm, Role::PostFfnNorm, hidden));
    }
    if let Some(width) = spec.per_layer_input {
        out.push(matrix(
            LayerWeight::PerLayerGate,
            hidden,
            vec![part(Role::PerLayerGate, width)],
        ));
        out.push(matrix(
            LayerWeight::PerLayerProj,
            width,
            vec![part(Role::PerLayerProj, hidden)],
        ));
        out.push(norm(
            LayerWeight::PerLayerPostNorm,
            Role::PerLayerPostNorm,
            hidden,
        ));
    }
    if spec.output_scale {
        let parts = vec![part(Role::LayerOutputScale, 1)];
        out.push(vector(LayerWeight::OutputScale, parts, IfAbsent::Ones));
    }
    out
}

/// The model's global weights, in load order (no LM head when it is tied).
pub fn global_weights(spec: &ModelSpec) -> Vec<Fused<GlobalWeight>> {
    let (v, h) = (spec.vocab_size, spec.hidden_size);
    let part = |role, rows| Part {
        id: TensorId::global(role),
        rows,
    };
    let mut out = vec![matrix(
        GlobalWeight::Embedding,
        h,
        vec![part(Role::TokenEmbd, v)],
    )];
    if !spec.tie_embeddings {
        out.push(matrix(GlobalWeight::LmHead, h, vec![part(Role::Output, v)]));
    }
    out.push(vector(
        GlobalWeight::OutputNorm,
        vec![part(Role::OutputNorm, h)],
        IfAbsent::Error,
    ));
    if let Some(ple) = &spec.per_layer_input {
        let all = ple.width * spec.layers.len();
        out.push(matrix(
            GlobalWeight::PerLayerEmbedding,
            all,
            vec![part(Role::PerLayerTokenEmbd, v)],
        ));
        out.push(matrix(
            GlobalWeight::PerLayerProjection,
            h,
            vec![part(Role::PerLayerModelProj, all)],
        ));
        out.push(vector(
            GlobalWeight::PerLayerProjNorm,
            vec![part(Role::PerLayerProjNorm, ple.width)],
            IfAbsent::Error,
        ));
    }
    if let Some(d) = &spec.draft {
        out.push(matrix(
            GlobalWeight::DraftPreProjection,
            2 * d.backbone_hidden,
            vec![part(Role::DraftPreProjection, h)],
        ));
        out.push(matrix(
            GlobalWeight::DraftPostProjection,
            h,
            vec![part(Role::DraftPostProjection, d.backbone_hidden)],
        ));
        if let Some(o) = &d.ordered {
            out.push(matrix(
                GlobalWeight::Centroids,
                h,
                vec![part(Role::Centroids, o.centroids)],
            ));
            out.push(vector(
                GlobalWeight::TokenOrdering,
                vec![part(Role::TokenOrdering, v)],
                IfAbsent::Error,
            ));
        }
    }
    out
}

/// Every canonical tensor a model of this spec has, globals first, then layer by layer, with
/// what stands in when a file lacks it.
pub fn tensors(spec: &ModelSpec) -> Vec<(TensorId, IfAbsent)> {
    fn parts<W>(f: Fused<W>) -> impl Iterator<Item = (TensorId, IfAbsent)> {
        let if_absent = f.if_absent;
        f.parts.into_iter().map(move |p| (p.id, if_absent))
    }
    let globals = global_weights(spec).into_iter().flat_map(parts);
    let layers = spec.layers.iter().enumerate().flat_map(|(l, s)| {
        layer_weights(l, s, spec.hidden_size)
            .into_iter()
            .flat_map(parts)
    });
    globals.chain(layers).collect()
}

/// Every canonical tensor a model of this spec has (see [`tensors`]).
pub fn all_tensors(spec: &ModelSpec) -> Vec<TensorId> {
    tensors(spec).into_iter().map(|(id, _)| id).collect()
}

/// Tensors a backend loads from `src` (for progress reports): the parts the schema asks for.
pub fn tensors_to_load(spec: &ModelSpec, src: &dyn WeightSource) -> usize {
    let globals = global_weights(spec)
        .iter()
        .map(|f| f.parts.iter().filter(|p| f.loads(p, src)).count())
        .sum::<usize>();
    let layers = spec
        .layers
        .iter()
        .enumerate()
        .flat_map(|(l, s)| layer_weights(l, s, spec.hidden_size))
        .map(|f| f.parts.iter().filter(|p| f.loads(p, src)).count())
        .sum::<usize>();
    globals + layers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;

    #[test]
    fn qkv_and_gate_up_are_stacked_in_order() {
        let c = preset("qwen3-8b").unwrap();
        let s = c.spec();
        let w = layer_weights(3, &s.layers[3], s.hidden_size);
        let names: Vec<_> = w.iter().map(|f| f.weight).collect();
        assert_eq!(
            names,
            [
                LayerWeight::AttnNorm,
                LayerWeight::Qkv,
                LayerWeight::QNorm,
                LayerWeight::KNorm,
                LayerWeight::O,
                LayerWeight::FfnNorm,
                LayerWeight::GateUp,
                LayerWeight::Down
            ]
        );
        let qkv = &w[1];
        let offsets: Vec<_> = qkv.offsets().map(|(p, at)| (p.id.role, at)).collect();
        assert_eq!(
            offsets,
            [(Role::Q, 0), (Role::K, 4096 * 4096), (Role::V, 5120 * 4096)]
        );
        assert_eq!((qkv.rows(), qkv.len()), (6144, 6144 * 4096));
        assert_eq!(w[6].rows(), 2 * 12_288);
        assert_eq!(w[7].cols, Some(12_288));
    }

    #[test]
    fn the_tensor_list_matches_the_parameter_count() {
        for name in crate::presets::PRESETS {
            let c = preset(name).unwrap();
            let s = c.spec();
            let ids = all_tensors(&s);
            let total: usize = ids
                .iter()
                .map(|id| id.shape(&c).iter().product::<usize>())
                .sum();
            assert_eq!(total as u64, c.param_count(), "{name}");
            assert_eq!(ids, TensorId::all(&c), "{name}");
        }
    }
}
