//! Logit bias and grammar masks inside a step. The masks of the step's constrained rows are
//! computed on other threads while the backend runs the forward pass (a backend that samples
//! on its device waits for them only just before sampling), so a grammar costs the step little
//! more than the mask's upload. Rows without a bias or a grammar carry no adjustment and pay
//! nothing.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln_grammar::Constraint;
use kiln_step::{RowAdjust, StepAdjust, TokenSet};

use crate::active::Active;
use crate::scheduler::{ScheduledChunk, Scheduler};
use crate::sequence::SeqId;

/// A step's adjustments once computed, and the rows whose grammar failed.
pub(crate) struct StepAdjustments {
    pub adjust: StepAdjust,
    /// (logits row, why): the first row of a sequence whose grammar gave no allowed set. Its
    /// request ends with that reason rather than with whatever the empty set made the sampler
    /// say.
    pub errors: Vec<(usize, String)>,
    /// Rows that got a grammar mask, and the seconds their computation took (wall time).
    pub masks: usize,
    pub mask_seconds: f64,
}

/// Set `KILN_MASK_OVERLAP=0` to compute the masks before the step instead of beside it.
fn overlap_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_MASK_OVERLAP").map_or(true, |v| v != "0"))
}

/// One constrained sequence's rows in the step.
struct MaskJob<'a> {
    first_row: usize,
    rows: usize,
    /// The drafted tokens its verify rows follow.
    drafts: &'a [u32],
    bias: Arc<[(u32, f32)]>,
    penalty: Option<Arc<kiln_step::Penalty>>,
    constraint: Mutex<&'a mut Constraint>,
}

/// Whether any logits row of the plan is adjusted.
pub(crate) fn plan_adjusts(plan: &[ScheduledChunk], active: &HashMap<SeqId, Active>) -> bool {
    plan.iter()
        .any(|c| c.rows() > 0 && active.get(&c.seq).is_some_and(Active::adjusts))
}

/// Runs `step` while the plan's grammar masks are computed on another thread (spread over
/// cores when there are several), and returns its result with the adjustments.
pub(crate) fn run_adjusted<R>(
    plan: &[ScheduledChunk],
    active: &mut HashMap<SeqId, Active>,
    scheduler: &Scheduler,
    step: impl FnOnce(&StepAdjust) -> R,
) -> (R, StepAdjustments) {
    let total: usize = plan.iter().map(ScheduledChunk::rows).sum();
    let mut fixed: Vec<Option<RowAdjust>> = vec![None; total];
    let mut place: HashMap<SeqId, (usize, usize, usize)> = HashMap::new();
    let mut row = 0;
    for c in plan {
        place.insert(c.seq, (row, c.rows(), c.draft));
        row += c.rows();
    }
    let mut jobs = Vec::new();
    for (id, a) in active.iter_mut() {
        let Some(&(first_row, rows, draft)) = place.get(id) else {
            continue;
        };
        if rows == 0 {
            continue;
        }
        let fixed_row = a.fixed_adjust();
        let penalty = fixed_row.as_ref().and_then(|r| r.penalty.clone());
        match a.req.constraint.as_mut() {
            Some(constraint) => jobs.push(MaskJob {
                first_row,
                rows,
                drafts: scheduler
                    .get(*id)
                    .map_or(&[][..], |s| &s.draft()[..draft.min(s.draft().len())]),
                bias: a.bias.clone(),
                penalty,
                constraint: Mutex::new(constraint),
            }),
            None => fixed[first_row..first_row + rows].fill(fixed_row),
        }
    }
    let adjust = StepAdjust::new();
    let errors = Mutex::new(Vec::new());
    let mut mask_seconds = 0.0;
    let masks = jobs.iter().map(|j| j.rows).sum();
    let fixed = Mutex::new(Some(fixed));
    let result = std::thread::scope(|scope| {
        // Captures only references: a copy runs inline if no thread can be had.
        let compute = || {
            let t = Instant::now();
            let fixed = fixed.lock().ok().and_then(|mut f| f.take());
            let rows = fill_masks(&jobs, fixed.unwrap_or_default(), &errors);
            adjust.fill(rows);
            t.elapsed().as_secs_f64()
        };
        let worker = if overlap_enabled() {
            std::thread::Builder::new()
                .name("kiln-masks".into())
                .spawn_scoped(scope, compute)
                .ok()
        } else {
            None
        };
        match worker {
            Some(worker) => {
                let r = step(&adjust);
                mask_seconds = worker.join().unwrap_or(0.0);
                r
            }
            // Switched off, or no thread to be had: the masks first, then the step.
            None => {
                mask_seconds = compute();
                step(&adjust)
            }
        }
    });
    let errors = errors.into_inner().unwrap_or_default();
    (
        result,
        StepAdjustments {
            adjust,
            errors,
            masks,
            mask_seconds,
        },
    )
}

/// Every row's adjustment: `fixed` (bias alone, or none) with each job's masks in place. Always
/// returns, whatever the grammars do: a row whose mask failed allows nothing.
fn fill_masks(
    jobs: &[MaskJob<'_>],
    mut rows: Vec<Option<RowAdjust>>,
    errors: &Mutex<Vec<(usize, String)>>,
) -> Vec<Option<RowAdjust>> {
    // A mask is tens of microseconds to a millisecond: worth a thread each from two up.
    let work = jobs.len() * (kiln_step::par::SERIAL_WORK / 2);
    let computed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        kiln_step::par::map_rows(jobs, work, |job| match job.constraint.lock() {
            Ok(mut c) => c.allowed_along(job.drafts, job.rows),
            Err(_) => vec![Err("the grammar's state was lost".to_string()); job.rows],
        })
    }));
    let per_job = computed.unwrap_or_else(|_| {
        jobs.iter()
            .map(|j| vec![Err("the grammar failed (internal error)".to_string()); j.rows])
            .collect()
    });
    let mut failed = Vec::new();
    for (job, sets) in jobs.iter().zip(per_job) {
        for (j, set) in sets.into_iter().enumerate() {
            let allowed = set.unwrap_or_else(|e| {
                // Rows after the first follow drafts; only the first speaks for the request.
                if j == 0 {
                    failed.push((job.first_row, e));
                }
                TokenSet::empty(0)
            });
            if let Some(slot) = rows.get_mut(job.first_row + j) {
                *slot = Some(RowAdjust {
                    bias: job.bias.clone(),
                    allowed: Some(Arc::new(allowed)),
                    penalty: job.penalty.clone(),
                });
            }
        }
    }
    if let Ok(mut e) = errors.lock() {
        e.extend(failed);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_grammar::{Grammar, TokenSpace};
    use kiln_tokenizer::Tokenizer;

    /// A grammar that has failed gives its row an empty set (nothing can be sampled) and its
    /// reason, and leaves the other rows alone: the request ends with the reason, never waits.
    #[test]
    fn a_failed_grammar_ends_its_row_with_its_reason() {
        let tok = Tokenizer::byte_level(300);
        let space = TokenSpace::new(&tok, 300).unwrap();
        let mut broken = space.compile(&Grammar::Regex("ab".into())).unwrap();
        assert!(broken.commit(b'z' as u32).is_err());
        let mut fine = space.compile(&Grammar::Regex("ab".into())).unwrap();
        let bias: Arc<[(u32, f32)]> = vec![(1, 2.0)].into();
        let jobs = vec![
            MaskJob {
                first_row: 0,
                rows: 2,
                drafts: &[b'a' as u32],
                bias: bias.clone(),
                penalty: None,
                constraint: Mutex::new(&mut broken),
            },
            MaskJob {
                first_row: 2,
                rows: 1,
                drafts: &[],
                bias: Arc::from(Vec::new()),
                penalty: None,
                constraint: Mutex::new(&mut fine),
            },
        ];
        let errors = Mutex::new(Vec::new());
        let rows = fill_masks(&jobs, vec![None; 4], &errors);
        let errors = errors.into_inner().unwrap();
        assert_eq!(
            errors.len(),
            1,
            "one reason, for the first row of the failed grammar"
        );
        assert_eq!(errors[0].0, 0);
        assert!(!errors[0].1.is_empty());
        let set = |r: &Option<RowAdjust>| r.as_ref().unwrap().allowed.clone().unwrap();
        assert!(set(&rows[0]).is_empty() && set(&rows[1]).is_empty());
        assert_eq!(rows[0].as_ref().unwrap().bias, bias);
        let ok = set(&rows[2]);
        assert!(ok.contains(b'a' as u32) && ok.count() == 1);
        assert!(rows[3].is_none(), "a row without a job is untouched");
    }
}
