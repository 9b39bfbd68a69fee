use super::*;

fn params(temperature: f32) -> SamplingParams {
    SamplingParams {
        temperature,
        ..SamplingParams::default()
    }
}

const NONE: History<'static> = History {
    prompt: &[],
    generated: &[],
};

fn pick(logits: &[f32], p: &SamplingParams, seed: u64, index: u64) -> u32 {
    sample(logits, p, NONE, seed, index, None).unwrap().id
}

/// Logits whose softmax is exactly `probs`.
fn logits_of(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

#[test]
fn greedy_takes_the_largest_and_the_lowest_id_on_ties() {
    let p = params(0.0);
    assert_eq!(pick(&[0.1, 3.0, -1.0, 2.9], &p, 1, 0), 1);
    assert_eq!(pick(&[0.5, 2.0, 2.0, 1.0], &p, 1, 0), 1);
    assert_eq!(pick(&[f32::NAN, 1.0, f32::NAN, 0.5], &p, 1, 0), 1);
}

#[test]
fn no_finite_logit_is_an_error_not_a_panic() {
    let row = [f32::NAN, f32::NEG_INFINITY];
    assert_eq!(
        sample(&row, &params(0.0), NONE, 0, 0, None),
        Err(SampleError::NoFiniteLogits)
    );
    assert_eq!(
        sample(&row, &params(1.0), NONE, 0, 0, None),
        Err(SampleError::NoFiniteLogits)
    );
}

#[test]
fn uniform_draws_are_in_range_and_spread() {
    let n = 20_000;
    let draws: Vec<f64> = (0..n).map(|k| uniform(42, k)).collect();
    assert!(draws.iter().all(|&u| (0.0..1.0).contains(&u)));
    let mean = draws.iter().sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    let mut buckets = [0usize; 10];
    for u in &draws {
        buckets[(u * 10.0) as usize] += 1;
    }
    assert!(
        buckets.iter().all(|&b| (1800..2200).contains(&b)),
        "{buckets:?}"
    );
}

#[test]
fn the_draw_depends_only_on_seed_and_index() {
    let row: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
    let p = params(1.0);
    let a: Vec<u32> = (0..64).map(|k| pick(&row, &p, 7, k)).collect();
    let b: Vec<u32> = (0..64).map(|k| pick(&row, &p, 7, k)).collect();
    let c: Vec<u32> = (0..64).map(|k| pick(&row, &p, 8, k)).collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
    // Drawing index 40 alone gives what it gave inside the run.
    assert_eq!(pick(&row, &p, 7, 40), a[40]);
}

#[test]
fn temperature_one_follows_the_softmax() {
    let probs = [0.4, 0.3, 0.2, 0.1];
    let row = logits_of(&probs);
    let p = params(1.0);
    let n = 40_000;
    let mut counts = [0usize; 4];
    for k in 0..n {
        counts[pick(&row, &p, 3, k) as usize] += 1;
    }
    for (c, q) in counts.iter().zip(probs) {
        let f = *c as f64 / n as f64;
        assert!((f - q).abs() < 0.01, "{counts:?}");
    }
}

#[test]
fn low_temperature_sharpens_and_high_temperature_flattens() {
    let row = logits_of(&[0.6, 0.4]);
    let share_of_first = |t: f32| {
        let p = params(t);
        (0..10_000).filter(|&k| pick(&row, &p, 11, k) == 0).count() as f64 / 10_000.0
    };
    // p0 = 0.6^(1/t) / (0.6^(1/t) + 0.4^(1/t)).
    assert!((share_of_first(0.5) - 0.6923).abs() < 0.015);
    assert!((share_of_first(4.0) - 0.5253).abs() < 0.015);
}

#[test]
fn top_k_keeps_only_the_k_most_likely() {
    let row = logits_of(&[0.05, 0.3, 0.1, 0.25, 0.3]);
    let p = SamplingParams {
        temperature: 1.0,
        top_k: 3,
        ..Default::default()
    };
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..2000 {
        seen.insert(pick(&row, &p, 5, k));
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 3, 4]);
    let one = SamplingParams { top_k: 1, ..p };
    assert!((0..200).all(|k| pick(&row, &one, 5, k) == 1));
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_the_mass() {
    let row = logits_of(&[0.15, 0.5, 0.05, 0.3]);
    let kept = |top_p: f32| {
        let p = SamplingParams {
            temperature: 1.0,
            top_p,
            ..Default::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..3000 {
            seen.insert(pick(&row, &p, 9, k));
        }
        seen.into_iter().collect::<Vec<_>>()
    };
    assert_eq!(kept(0.5), vec![1]);
    assert_eq!(kept(0.79), vec![1, 3]);
    assert_eq!(kept(0.81), vec![0, 1, 3]);
    assert_eq!(kept(1.0), vec![0, 1, 2, 3]);
}

#[test]
fn top_p_on_a_flat_row_grows_past_the_first_prefix() {
    // (The prefix itself is checked in kiln_step::sampling's tests.)
    let row = vec![0.0f32; 1000];
    let p = SamplingParams {
        temperature: 1.0,
        top_p: 0.9,
        ..Default::default()
    };
    assert!((0..500).all(|k| pick(&row, &p, 1, k) < 900));
}

#[test]
fn min_p_drops_tokens_below_a_share_of_the_best() {
    let row = logits_of(&[0.5, 0.3, 0.15, 0.05]);
    let p = SamplingParams {
        temperature: 1.0,
        min_p: 0.5,
        ..Default::default()
    };
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..2000 {
        seen.insert(pick(&row, &p, 2, k));
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0, 1]);
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative_logits() {
    let row = [2.0f32, 1.5, -1.0, -1.2];
    let p = SamplingParams {
        repetition_penalty: 2.0,
        ..Default::default()
    };
    let h = History {
        prompt: &[0],
        generated: &[2, 0],
    };
    let out = apply_penalties(&row, &p, h).unwrap();
    assert_eq!(out, vec![1.0, 1.5, -2.0, -1.2]);
    assert_eq!(sample(&row, &p, h, 0, 0, None).unwrap().id, 1);
}

#[test]
fn presence_and_frequency_penalties_count_generated_tokens_only() {
    let row = [1.0f32, 1.0, 1.0];
    let p = SamplingParams {
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        ..Default::default()
    };
    let h = History {
        prompt: &[2, 2, 2],
        generated: &[0, 0, 1],
    };
    let out = apply_penalties(&row, &p, h).unwrap();
    assert_eq!(out, vec![1.0 - 0.5 - 0.5, 1.0 - 0.5 - 0.25, 1.0]);
    assert_eq!(sample(&row, &p, h, 0, 0, None).unwrap().id, 2);
}

#[test]
fn a_history_token_outside_the_vocabulary_is_an_error() {
    let p = SamplingParams {
        repetition_penalty: 1.1,
        ..Default::default()
    };
    let h = History {
        prompt: &[9],
        generated: &[],
    };
    assert_eq!(
        sample(&[0.0, 1.0], &p, h, 0, 0, None),
        Err(SampleError::TokenOutOfRange { id: 9, vocab: 2 })
    );
}

#[test]
fn logprobs_are_the_log_softmax_of_the_raw_logits() {
    let row = [1.0f32, 3.0, 2.0, -4.0];
    // Penalties and temperature change the choice, never the reported log-probabilities.
    let p = SamplingParams {
        temperature: 0.0,
        repetition_penalty: 10.0,
        ..Default::default()
    };
    let h = History {
        prompt: &[1],
        generated: &[],
    };
    let s = sample(&row, &p, h, 0, 0, Some(2)).unwrap();
    let lse = row.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln();
    assert_eq!(s.id, 2);
    assert!((s.logprob.unwrap() as f64 - (2.0 - lse)).abs() < 1e-6);
    assert_eq!(s.top_logprobs.len(), 2);
    assert_eq!(s.top_logprobs[0].0, 1);
    assert_eq!(s.top_logprobs[1].0, 2);
    assert!((s.top_logprobs[0].1 as f64 - (3.0 - lse)).abs() < 1e-6);
    let all = sample(&row, &p, h, 0, 0, Some(10)).unwrap().top_logprobs;
    assert_eq!(
        all.iter().map(|t| t.0).collect::<Vec<_>>(),
        vec![1, 2, 0, 3]
    );
    let mass: f64 = all.iter().map(|t| (t.1 as f64).exp()).sum();
    assert!((mass - 1.0).abs() < 1e-6);
    assert!(sample(&row, &p, h, 0, 0, None)
        .unwrap()
        .top_logprobs
        .is_empty());
}

#[test]
fn without_penalties_the_engine_samples_as_the_row_sampler_does() {
    let row = logits_of(&[0.4, 0.3, 0.2, 0.1]);
    let p = SamplingParams {
        temperature: 0.7,
        top_k: 3,
        top_p: 0.95,
        min_p: 0.01,
        ..Default::default()
    };
    let history = History {
        prompt: &[1, 2],
        generated: &[3],
    };
    for index in 0..50 {
        let r = kiln_step::RowSampling {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            uniform: uniform(9, index),
            logprobs: Some(2),
        };
        assert_eq!(
            sample(&row, &p, history, 9, index, Some(2)),
            sample_row(&row, &r)
        );
    }
}
