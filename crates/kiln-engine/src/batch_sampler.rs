//! Samples every logits row of a step, spread over threads when the rows are many: sampling a
//! large vocabulary is a few hundred microseconds a row, which adds up at 64 sequences.

use std::sync::OnceLock;

use crate::request::SamplingParams;
use crate::sampler::{self, History, SampleError, Sampled};

/// One row to sample and what the sampler needs to know about its sequence.
pub(crate) struct SampleJob<'a> {
    pub row: &'a [f32],
    pub params: &'a SamplingParams,
    pub history: History<'a>,
    pub seed: u64,
    pub index: u64,
    pub logprobs: Option<usize>,
}

impl SampleJob<'_> {
    fn run(&self) -> Result<Sampled, SampleError> {
        sampler::sample(
            self.row,
            self.params,
            self.history,
            self.seed,
            self.index,
            self.logprobs,
        )
    }
}

/// Logits values below which one thread samples everything (thread start-up would dominate).
const SERIAL_WORK: usize = 1 << 18;

/// Samples each job; results in job order. Each result depends only on its own job.
pub(crate) fn sample_all(jobs: &[SampleJob<'_>]) -> Vec<Result<Sampled, SampleError>> {
    let work: usize = jobs.iter().map(|j| j.row.len()).sum();
    let threads = cores().min(jobs.len());
    if threads <= 1 || work < SERIAL_WORK {
        return jobs.iter().map(SampleJob::run).collect();
    }
    let per_thread = jobs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks(per_thread)
            .map(|group| scope.spawn(move || group.iter().map(SampleJob::run).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_results_equal_serial_ones_in_order() {
        let vocab = 50_000;
        let rows: Vec<Vec<f32>> = (0..12)
            .map(|r| {
                (0..vocab)
                    .map(|i| ((i * 7 + r * 13) % 101) as f32 * 0.05)
                    .collect()
            })
            .collect();
        let params = SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            ..SamplingParams::default()
        };
        let history = History {
            prompt: &[1, 2, 3],
            generated: &[],
        };
        let jobs: Vec<SampleJob> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| SampleJob {
                row,
                params: &params,
                history,
                seed: i as u64,
                index: 3,
                logprobs: Some(2),
            })
            .collect();
        assert!(
            jobs.len() * vocab >= SERIAL_WORK,
            "big enough to take the parallel path"
        );
        let serial: Vec<_> = jobs.iter().map(SampleJob::run).collect();
        assert_eq!(sample_all(&jobs), serial);
        assert_eq!(sample_all(&jobs[..1]), serial[..1]);
        assert!(sample_all(&[]).is_empty());
    }
}
