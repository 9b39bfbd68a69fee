//! The models kiln ships (models/, see models/README.md): the GGUF and the HF folder of each hold
//! the same weights and give identical logits, and kiln's greedy output and logits match the
//! reference that PyTorch computed at training time (reference.json).

use std::path::{Path, PathBuf};

use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_engine::{Backend, ChunkInput};
use kiln_formats::GgufFile;
use kiln_model::{GgufSource, HfSource, TensorId, WeightSource};
use kiln_tokenizer::Tokenizer;
use serde_json::Value;

const MODELS: [&str; 2] = ["kiln-4m", "kiln-4m-draft"];
const BLOCK: usize = 16;
// kiln's f32 forward against PyTorch's f32 forward: the same maths in another order.
const LOGIT_TOLERANCE: f32 = 1e-3;
// Below this top-1/top-2 gap the two float32 implementations may legitimately disagree.
const NEAR_TIE: f64 = 1e-3;

fn model_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(name)
}

fn gguf_path(name: &str) -> PathBuf {
    model_dir(name).join(format!("{name}-f16.gguf"))
}

fn reference(name: &str) -> Value {
    let path = model_dir(name).join("reference.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the shipped model is missing)", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn backend(src: &dyn WeightSource) -> CpuBackend {
    let opts = CpuOptions {
        kv_blocks: 8,
        block_size: BLOCK,
        threads: None,
        host_blocks: 0,
        fp8: false,
    };
    CpuBackend::new(src, opts, None).unwrap()
}

/// Prefill `prompt`, then decode greedily until a stop id or `max_new` tokens.
/// Returns the prompt's last logits and the generated ids.
fn greedy(
    b: &mut CpuBackend,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
) -> (Vec<f32>, Vec<u32>) {
    let table: Vec<u32> = (0..8).collect();
    let chunk = ChunkInput {
        tokens: prompt,
        start_pos: 0,
        block_table: &table,
        want_logits: true,
    };
    let first = b.forward(&[chunk]).unwrap();
    let mut logits = first.clone();
    let mut out = Vec::new();
    while out.len() < max_new {
        let next = argmax(&logits);
        out.push(next);
        if stop.contains(&next) || out.len() == max_new {
            break;
        }
        let step = ChunkInput {
            tokens: &out[out.len() - 1..],
            start_pos: prompt.len() + out.len() - 1,
            block_table: &table,
            want_logits: true,
        };
        logits = b.forward(&[step]).unwrap();
    }
    (first, out)
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn gguf_and_hf_folder_hold_identical_weights() {
    for name in MODELS {
        let gguf = GgufSource::open(&gguf_path(name)).unwrap();
        let hf = HfSource::open(&model_dir(name).join("hf")).unwrap();
        let (gc, hc) = (gguf.config(), hf.config());
        assert_eq!(
            gc, hc,
            "{name}: GGUF and config.json describe different models"
        );
        let all = TensorId::all(gc);
        assert!(all.len() > 10, "{name}: too few tensors ({})", all.len());
        for id in all {
            assert_eq!(
                gguf.has(id),
                hf.has(id),
                "{name}: {id:?} present in one file only"
            );
            if !gguf.has(id) {
                continue;
            }
            let (a, b) = (gguf.load_f32(id).unwrap(), hf.load_f32(id).unwrap());
            assert_eq!(a.shape, b.shape, "{name}: {id:?} shape");
            let same = a
                .data
                .iter()
                .zip(&b.data)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{name}: {id:?} values differ between GGUF and safetensors"
            );
        }
    }
}

#[test]
fn gguf_and_hf_folder_give_identical_logits() {
    for name in MODELS {
        let reference = reference(name);
        let gguf = GgufSource::open(&gguf_path(name)).unwrap();
        let hf = HfSource::open(&model_dir(name).join("hf")).unwrap();
        let (mut a, mut b) = (backend(&gguf), backend(&hf));
        for p in reference["prompts"].as_array().unwrap() {
            let prompt = ids(&p["prompt_ids"]);
            let (la, ga) = greedy(&mut a, &prompt, 8, &[]);
            let (lb, gb) = greedy(&mut b, &prompt, 8, &[]);
            assert_eq!(
                la.len(),
                gguf.config().vocab_size,
                "{name}: logits row length"
            );
            let same = la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{name}: GGUF and HF logits differ for {:?}",
                p["prompt"]
            );
            assert_eq!(ga, gb, "{name}: GGUF and HF continuations differ");
        }
    }
}

#[test]
fn both_tokenizers_encode_the_reference_prompts_like_the_trainer() {
    for name in MODELS {
        let reference = reference(name);
        let from_gguf = Tokenizer::from_gguf(&GgufFile::open(gguf_path(name)).unwrap()).unwrap();
        let from_hf = Tokenizer::from_hf_dir(&model_dir(name).join("hf")).unwrap();
        for p in reference["prompts"].as_array().unwrap() {
            let text = p["prompt"].as_str().unwrap();
            let want = ids(&p["prompt_ids"]);
            assert_eq!(
                from_gguf.encode(text, true).unwrap(),
                want,
                "{name} GGUF: {text:?}"
            );
            assert_eq!(
                from_hf.encode(text, true).unwrap(),
                want,
                "{name} HF: {text:?}"
            );
            let greedy_ids = ids(&p["greedy_ids"]);
            let text_out = p["greedy_text"].as_str().unwrap();
            assert_eq!(
                from_gguf.decode(&greedy_ids, false),
                text_out,
                "{name} GGUF decode"
            );
            assert_eq!(
                from_hf.decode(&greedy_ids, false),
                text_out,
                "{name} HF decode"
            );
        }
    }
}

#[test]
fn greedy_output_and_logits_match_the_pytorch_reference() {
    for name in MODELS {
        let reference = reference(name);
        let max_new = reference["max_new_tokens"].as_u64().unwrap() as usize;
        let stop = ids(&reference["stop_ids"]);
        let src = GgufSource::open(&gguf_path(name)).unwrap();
        let mut b = backend(&src);
        for p in reference["prompts"].as_array().unwrap() {
            let prompt = ids(&p["prompt_ids"]);
            let (logits, out) = greedy(&mut b, &prompt, max_new, &stop);
            let want: Vec<f32> = p["last_prompt_logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(logits.len(), want.len(), "{name}: vocabulary size");
            let spread = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(spread > 1.0, "{name}: reference logits are flat ({spread})");
            let err = logits
                .iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                err < LOGIT_TOLERANCE,
                "{name}: logits differ from PyTorch by {err} for {:?}",
                p["prompt"]
            );
            let expected = ids(&p["greedy_ids"]);
            if p["min_top2_gap"].as_f64().unwrap() > NEAR_TIE {
                assert_eq!(
                    out, expected,
                    "{name}: greedy continuation of {:?}",
                    p["prompt"]
                );
            } else {
                // A near-tie somewhere: the continuations must agree up to it at least.
                assert_eq!(
                    out[0], expected[0],
                    "{name}: first greedy token of {:?}",
                    p["prompt"]
                );
            }
        }
    }
}
