//! Malformed steps, weights and options give clear errors, never a panic, and a rejected step
//! leaves the backend as it was.

use crate::support;

use kiln_cpu::{CpuBackend, CpuOptions};
use kiln_model::{HostTensor, ModelConfig, Role, TensorId, WeightSource};
use kiln_step::{Backend, ChunkInput};
use support::{backend, configs, same_bits, RandomSource};

fn chunk<'a>(tokens: &'a [u32], start_pos: usize, table: &'a [u32]) -> ChunkInput<'a> {
    ChunkInput {
        tokens,
        start_pos,
        block_table: table,
        want_logits: true,
    }
}

fn error_of(b: &mut CpuBackend, chunks: &[ChunkInput<'_>]) -> String {
    b.forward(chunks)
        .expect_err("the step should be rejected")
        .to_string()
}

#[test]
fn malformed_steps_are_rejected_with_the_reason() {
    let src = RandomSource::new(configs::llama(), 1);
    let mut b = backend(&src, 8, 4);
    let cases: Vec<(Vec<ChunkInput<'_>>, &str)> = vec![
        (
            vec![chunk(&[1, 2], 0, &[0]), chunk(&[101], 0, &[1])],
            "chunk 1: token id 101 is outside the vocabulary of 101",
        ),
        (
            vec![chunk(&[1, 2, 3, 4, 5], 0, &[0])],
            "chunk 0: its block table covers 4 positions, the chunk reaches position 5",
        ),
        (
            vec![chunk(&[1], 4, &[0, 8])],
            "chunk 0: block id 8 is outside the KV pool of 8 blocks",
        ),
        (vec![chunk(&[], 0, &[0])], "chunk 0 has no tokens"),
        (vec![chunk(&[1], usize::MAX, &[0])], "overflows"),
        (
            vec![chunk(&[1, 2], 0, &[3]), chunk(&[1], 1, &[3])],
            "two tokens of one step write KV slot 13",
        ),
    ];
    for (chunks, expected) in &cases {
        let err = error_of(&mut b, chunks);
        assert!(err.contains(expected), "got '{err}', expected '{expected}'");
    }
}

#[test]
fn a_rejected_step_changes_nothing() {
    let src = RandomSource::new(configs::qwen3(), 2);
    let tokens = [5, 6, 7, 8, 9];
    let mut fresh = backend(&src, 8, 4);
    let want = fresh.forward(&[chunk(&tokens, 0, &[2, 3])]).unwrap();

    let mut b = backend(&src, 8, 4);
    // Valid first chunk, bad second: the whole step is refused before anything is written.
    let _ = error_of(
        &mut b,
        &[chunk(&tokens, 0, &[2, 3]), chunk(&[1000], 0, &[4])],
    );
    let got = b.forward(&[chunk(&tokens, 0, &[2, 3])]).unwrap();
    assert!(same_bits(&got, &want));
    assert!(b.forward(&[]).unwrap().is_empty());
}

/// A source that lies about one tensor's shape.
struct WrongShape(RandomSource);

impl WeightSource for WrongShape {
    fn config(&self) -> &ModelConfig {
        self.0.config()
    }
    fn has(&self, id: TensorId) -> bool {
        self.0.has(id)
    }
    fn load_f32(&self, id: TensorId) -> anyhow::Result<HostTensor> {
        let mut t = self.0.load_f32(id)?;
        if id == TensorId::layer(1, Role::Down) {
            t.shape.reverse();
        }
        Ok(t)
    }
}

#[test]
fn bad_weights_and_options_are_errors() {
    let wrong = WrongShape(RandomSource::new(configs::llama(), 3));
    let err = CpuBackend::new(&wrong, CpuOptions::default(), None)
        .err()
        .expect("wrong shape")
        .to_string();
    assert!(
        err.contains("tensor blk.1.ffn_down.weight has shape [100, 72]"),
        "{err}"
    );

    let src = RandomSource::new(configs::llama(), 3);
    let opts = |kv_blocks, block_size, threads| CpuOptions {
        kv_blocks,
        block_size,
        threads,
        host_blocks: 0,
        fp8: false,
    };
    for (o, expected) in [
        (opts(0, 16, None), "at least one block"),
        (opts(4, 0, None), "block size"),
        (opts(4, 16, Some(0)), "thread count"),
        (opts(1 << 40, 16, None), "KV cache"),
        (opts(usize::MAX / 2, 16, None), "does not fit"),
    ] {
        let err = format!(
            "{:#}",
            CpuBackend::new(&src, o, None).err().expect("bad options")
        );
        assert!(err.contains(expected), "{o:?}: got '{err}'");
    }
}

#[test]
fn loading_reports_progress_for_every_tensor() {
    let src = RandomSource::new(configs::qwen2(), 4);
    let seen = std::cell::RefCell::new(Vec::new());
    let report = |done: usize, total: usize| seen.borrow_mut().push((done, total));
    CpuBackend::new(&src, CpuOptions::default(), Some(&report)).unwrap();
    let seen = seen.into_inner();
    let total = TensorId::all(src.config()).len();
    assert_eq!(seen, (1..=total).map(|d| (d, total)).collect::<Vec<_>>());
}
