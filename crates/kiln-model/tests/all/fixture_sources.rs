//! The two copies of each parity fixture, read through kiln's sources, must be the same model:
//! same hyper-parameters, same RoPE frequencies and bit-identical tensors once the GGUF's Q/K
//! rows are un-permuted. The reference data must be what the parity tests rely on.

use crate::support;

use kiln_model::{Arch, GgufSource, HfSource, Role, RopeScaling, TensorId, WeightSource};
use support::fixtures::{argmax, Fixture};

fn expected_arch(name: &str) -> Arch {
    match name {
        "llama" => Arch::Llama,
        "mistral" => Arch::Mistral,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        "gemma4" | "gemma4_kv" => Arch::Gemma4,
        other => panic!("unknown fixture {other}"),
    }
}

#[test]
fn hf_folder_and_gguf_describe_the_same_model() {
    for f in Fixture::all() {
        let hf = HfSource::open(&f.hf_dir).unwrap();
        let gg = GgufSource::open(&f.gguf).unwrap();
        let (a, b) = (hf.config(), gg.config());
        assert_eq!(a.arch, expected_arch(&f.name), "{}", f.name);
        // Scaling may be spelled differently (llama3 parameters vs GGUF factors), but the
        // frequencies must be the same f32 values; then everything else must match.
        assert_eq!(a.rope_inv_freq(), b.rope_inv_freq(), "{}", f.name);
        assert_eq!(
            a.rope_attention_factor(),
            b.rope_attention_factor(),
            "{}",
            f.name
        );
        let mut b_same = b.clone();
        b_same.rope_scaling = a.rope_scaling.clone();
        assert_eq!(a, &b_same, "{}", f.name);
    }
}

#[test]
fn fixtures_cover_each_feature() {
    let cfg = |n: &str| {
        HfSource::open(&Fixture::load(n).hf_dir)
            .unwrap()
            .config()
            .clone()
    };
    let (llama, mistral, qwen2, qwen3) = (cfg("llama"), cfg("mistral"), cfg("qwen2"), cfg("qwen3"));
    assert!(matches!(llama.rope_scaling, RopeScaling::Llama3 { .. }));
    assert!(llama.num_kv_heads < llama.num_heads && !llama.tie_embeddings);
    let window = mistral.sliding_window.unwrap();
    assert!(window < Fixture::load("mistral").prompt_ids.len());
    assert!(qwen2.qkv_bias && qwen2.tie_embeddings);
    assert!(matches!(qwen2.rope_scaling, RopeScaling::Linear { .. }));
    assert!(qwen3.qk_norm && qwen3.head_dim != qwen3.hidden_size / qwen3.num_heads);
    assert!(matches!(qwen3.rope_scaling, RopeScaling::Yarn { .. }));
    assert!(qwen3.rope_attention_factor() > 1.0);
    // GGUF spells Llama 3.1 scaling as per-frequency factors.
    let gg = GgufSource::open(&Fixture::load("llama").gguf).unwrap();
    assert!(matches!(
        gg.config().rope_scaling,
        RopeScaling::FreqFactors(_)
    ));

    // Gemma 4: both layer types, a window shorter than the prompt, wider heads on full layers,
    // KV sharing of both types, per-layer inputs and a soft cap; the other fixture V from K
    // and double-wide feed-forwards.
    let (g, kv) = (cfg("gemma4"), cfg("gemma4_kv"));
    let s = g.spec();
    assert!(s.layers.iter().any(|l| l.attn.window.is_some()));
    assert!(s.layers.iter().any(|l| l.attn.window.is_none()));
    assert!(g.sliding_window.unwrap() < Fixture::load("gemma4").prompt_ids.len());
    assert!(s.layers[1].attn.head_dim > s.layers[0].attn.head_dim);
    let shared: Vec<_> = s.layers.iter().map(|l| l.attn.kv_from).collect();
    assert_eq!(shared, [None, None, Some(0), Some(1)]);
    assert!(g.per_layer_input > 0 && g.logit_softcap.is_some());
    assert!(kv.full_attention_v_from_k && kv.double_wide_mlp && kv.per_layer_input == 0);
    assert!(kv.spec().layers[1].attn.num_kv_heads < kv.spec().layers[0].attn.num_kv_heads);
    // llama.cpp's converter writes the full layers' proportional RoPE as rope_freqs factors;
    // kiln reads them back as the same RoPE transformers' config names.
    let gg = GgufSource::open(&Fixture::load("gemma4").gguf).unwrap();
    assert!(gg.file().tensor_info("rope_freqs.weight").is_some());
    assert!(matches!(
        gg.config().full_attention_rope.as_ref().unwrap().scaling,
        RopeScaling::Proportional {
            rotated_pairs: 4,
            ..
        }
    ));
}

#[test]
fn gguf_tensors_equal_hf_tensors_after_unpermuting() {
    for f in Fixture::all() {
        let hf = HfSource::open(&f.hf_dir).unwrap();
        let gg = GgufSource::open(&f.gguf).unwrap();
        let ids = TensorId::all(hf.config());
        assert_eq!(ids, TensorId::all(gg.config()));
        for id in ids {
            assert!(hf.has(id) && gg.has(id));
            let (a, b) = (hf.load_f32(id).unwrap(), gg.load_f32(id).unwrap());
            assert_eq!(a.shape, id.shape(hf.config()), "{}: {id}", f.name);
            assert!(
                a == b,
                "{}: tensor {id} differs between the HF folder and the GGUF",
                f.name
            );
        }
    }
}

#[test]
fn llama_gguf_rows_really_are_permuted_on_disk() {
    // Guards the test above against a converter that forgot to permute: the raw GGUF rows of
    // attn_q must differ from the HF rows, and only un-permuting makes them equal.
    let f = Fixture::load("llama");
    let g = kiln_formats::GgufFile::open(&f.gguf).unwrap();
    let raw = g.tensor("blk.0.attn_q.weight").unwrap();
    let raw: Vec<f32> = raw
        .data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let hf = HfSource::open(&f.hf_dir).unwrap();
    let q = hf.load_f32(TensorId::layer(0, Role::Q)).unwrap();
    assert_ne!(raw, q.data);
    let c = hf.config();
    let permuted =
        kiln_model::permute::permute_rows(&q.data, c.q_dim(), c.hidden_size, c.num_heads).unwrap();
    assert_eq!(raw, permuted);
}

#[test]
fn reference_data_is_consistent() {
    for f in Fixture::all() {
        let hf = HfSource::open(&f.hf_dir).unwrap();
        assert_eq!(f.vocab, hf.config().vocab_size, "{}", f.name);
        assert_eq!(f.prompt_ids.len(), 40, "{}", f.name);
        assert!(f
            .prompt_ids
            .iter()
            .chain(&f.continuation_ids)
            .all(|&t| (t as usize) < f.vocab));
        for (k, &tok) in f.continuation_ids.iter().enumerate() {
            assert_eq!(argmax(f.row(k)), tok, "{}: step {k} is not greedy", f.name);
        }
        // Margins far above float32 noise make the greedy comparison meaningful.
        assert!(
            f.min_margin >= 0.1,
            "{}: min margin {}",
            f.name,
            f.min_margin
        );
        assert!(f.fp32_max_abs_err * 1000.0 < f.min_margin, "{}", f.name);
        assert_eq!(f.margins.len(), f.continuation_ids.len());
    }
}

#[test]
fn quantized_gguf_matches_hf_within_q8_0_rounding() {
    // Q8_0 stores blocks of 32 as round(x / d) with d = max|x| / 127: each value is off by at
    // most half a step (plus d's own f16 rounding). A row in the wrong place would be off by
    // the size of the weights themselves.
    let f = Fixture::load("llama");
    let path = f.gguf.with_file_name("model-q8_0.gguf");
    let file = kiln_formats::GgufFile::open(&path).unwrap();
    assert_eq!(
        file.tensor_info("blk.0.attn_q.weight").unwrap().dtype,
        kiln_formats::DType::Q8_0
    );
    let q8 = GgufSource::open(&path).unwrap();
    let hf = HfSource::open(&f.hf_dir).unwrap();
    for id in TensorId::all(hf.config()) {
        let (exact, quant) = (hf.load_f32(id).unwrap(), q8.load_f32(id).unwrap());
        assert_eq!(exact.shape, quant.shape, "{id}");
        for (a, b) in exact.data.chunks(32).zip(quant.data.chunks(32)) {
            let step = a.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0;
            let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                worst <= 0.6 * step + 1e-7,
                "{id}: off by {worst} with a Q8_0 step of {step}"
            );
        }
    }
}
