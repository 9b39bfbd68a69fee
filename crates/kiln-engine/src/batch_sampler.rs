//! Samples every logits row of a step that needs the host (penalties read the history), spread
//! over threads when the rows are many (`kiln_step::par`).

use kiln_step::RowAdjust;

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
    /// Bias and grammar mask, applied after the penalties.
    pub adjust: Option<&'a RowAdjust>,
}

impl SampleJob<'_> {
    fn run(&self) -> Result<Sampled, SampleError> {
        sampler::sample_adjusted(
            self.row,
            self.params,
            self.history,
            self.seed,
            self.index,
            self.logprobs,
            self.adjust,
        )
    }
}

/// Samples each job; results in job order. Each result depends only on its own job.
pub(crate) fn sample_all(jobs: &[SampleJob<'_>]) -> Vec<Result<Sampled, SampleError>> {
    let work: usize = jobs.iter().map(|j| j.row.len()).sum();
    kiln_step::par::map_rows(jobs, work, SampleJob::run)
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
                adjust: None,
            })
            .collect();
        assert!(
            jobs.len() * vocab >= kiln_step::par::SERIAL_WORK,
            "big enough to take the parallel path"
        );
        let serial: Vec<_> = jobs.iter().map(SampleJob::run).collect();
        assert_eq!(sample_all(&jobs), serial);
        assert_eq!(sample_all(&jobs[..1]), serial[..1]);
        assert!(sample_all(&[]).is_empty());
    }
}
