//! `Footprint::of` (worked out on the host, for the sizing checks of `kiln bench` and `kiln
//! serve`) against what `CudaBackend::new` allocates, byte for byte: dummy:tiny under small
//! and large options, the Qwen3 8B shape (Q/K norms, its own LM head) and dummy:gemma4-tiny
//! (per-layer input buffers, no KV room for the layers that read another's); dummy:tiny stored
//! in f32 and f16 as well, and with block-quantised matrices (llama.cpp's Q4_K_M mix: the
//! blocks and the prefill scratch); with fp8 projections on the host and on the device.

use crate::common;

use common::gpu_or_skip;
use kiln_cuda::{CudaBackend, CudaOptions, Footprint, StoreType};
use kiln_model::dummy::DummySource;
use kiln_model::WeightSource;

#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn the_predicted_footprint_is_what_the_backend_allocates() {
    let Some(_gpu) = gpu_or_skip("the_predicted_footprint_is_what_the_backend_allocates") else {
        return;
    };
    let small = CudaOptions {
        kv_cache_bytes: Some(64 << 20),
        max_seqs: 3,
        prefill_chunk: 64,
        max_context: Some(700),
        ..CudaOptions::default()
    };
    let large = CudaOptions {
        kv_cache_bytes: Some(256 << 20),
        max_seqs: 40,
        max_batch_tokens: Some(1000),
        ..CudaOptions::default()
    };
    for preset in ["tiny", "qwen3-8b", "gemma4-tiny", "tiny:q4_k_m"] {
        let src = DummySource::preset(preset).expect("a preset");
        let config = src.config().clone();
        for opts in [small.clone(), large.clone()] {
            if preset == "qwen3-8b" && opts.max_seqs > 3 {
                continue; // the 8B weights once are enough
            }
            let predicted = Footprint::of_source(&src, &opts);
            if src.quant().is_none() {
                assert_eq!(
                    predicted,
                    Footprint::of(&config.spec(), config.max_position, &opts)
                );
            }
            let backend = CudaBackend::new(&src, opts.clone(), None).expect("the backend starts");
            assert_eq!(
                backend.allocated(),
                predicted,
                "dummy:{preset} with {opts:?}"
            );
        }
    }
    let src = DummySource::preset("tiny").expect("dummy:tiny");
    let config = src.config().clone();
    let bf16 = Footprint::of(&config.spec(), config.max_position, &small);
    for dtype in [StoreType::F32, StoreType::F16] {
        let opts = CudaOptions {
            dtype,
            ..small.clone()
        };
        let predicted = Footprint::of(&config.spec(), config.max_position, &opts);
        let backend = CudaBackend::new(&src, opts.clone(), None).expect("the backend starts");
        assert_eq!(backend.allocated(), predicted, "dummy:tiny with {opts:?}");
        let wider = dtype.bytes() / 2;
        assert_eq!(predicted.kv_block, bf16.kv_block * wider, "{dtype}");
        assert!(predicted.weights > bf16.weights || wider == 1, "{dtype}");
    }
}

/// `--quantize fp8` on the Llama-3-8B shape, worked out on the host: each layer's four
/// projections take a byte a value and an f32 a row instead of two bytes a value (32 layers of
/// 218,103,808 values in 43,008 rows: 6,973,816,832 bytes less), and the buffers gain the
/// step's fp8 input rows (2,304 tokens of the widest input, 14,336, and their scales), the
/// fp8 GEMM's workspace and, as the fp8 decode rows take the wgmma row order by default (on
/// sm_90; counted on any GPU), its split launches' workspace: four chains of 128 rows of
/// 16,384 floats, and 4,096 counters (128 rows in blocks of 8 tokens, 16,384 places in blocks
/// of 64).
#[test]
fn fp8_projections_take_a_byte_a_value() {
    let src = DummySource::preset("llama3-8b").expect("dummy:llama3-8b");
    let config = src.config().clone();
    let at = |fp8| {
        let opts = CudaOptions {
            fp8: Some(fp8),
            ..CudaOptions::default()
        };
        Footprint::of(&config.spec(), config.max_position, &opts)
    };
    let (bf16, fp8) = (at(false), at(true));
    assert_eq!(bf16.weights - fp8.weights, 6_973_816_832);
    let tokens = 2048 + 256;
    let wg_rows = match kiln_cuda::switches::Switches::from_env().fp8_wg {
        true => 4 * 128 * 16_384 * 4 + 16 * 256 * 4,
        false => 0,
    };
    assert_eq!(
        fp8.buffers - bf16.buffers,
        tokens * 14_336 + tokens * 4 + (32 << 20) + wg_rows
    );
    assert_eq!(fp8.kv_block, bf16.kv_block);
}

/// The same check with fp8 projections: dummy:tiny and the Qwen3 8B shape.
#[test]
#[ignore = "needs an NVIDIA GPU (scripts/gpu-check.sh, or cargo test -- --include-ignored)"]
fn the_fp8_footprint_is_what_the_backend_allocates() {
    let Some(_gpu) = gpu_or_skip("the_fp8_footprint_is_what_the_backend_allocates") else {
        return;
    };
    for preset in ["tiny", "qwen3-8b"] {
        let src = DummySource::preset(preset).expect("a preset");
        let opts = CudaOptions {
            kv_cache_bytes: Some(64 << 20),
            max_seqs: 3,
            prefill_chunk: 64,
            max_context: Some(700),
            fp8: Some(true),
            ..CudaOptions::default()
        };
        let predicted = Footprint::of_source(&src, &opts);
        let backend = CudaBackend::new(&src, opts.clone(), None).expect("the backend starts");
        assert_eq!(backend.allocated(), predicted, "dummy:{preset} with fp8");
    }
}
