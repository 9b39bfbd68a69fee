//! Where an engine step's time goes: the host's own work (taking requests, scheduling,
//! launching, sampling, handing tokens out), the time it waits for the device, and the device's
//! busy and idle time when the backend measures them. Kept as histograms (one observation per
//! step and phase) that /metrics exposes, and summed into a log line every few seconds
//! (`KILN_STEP_LOG_SECS`, default 10; 0: none).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One part of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// New requests taken and cancelled ones dropped before the step is planned.
    Admit,
    /// The plan, KV block copies, stats, sampling rows, inputs and feeds.
    Schedule,
    /// The backend call that queues the step (a whole step's call less the device's time on
    /// it, when the backend measures that; else all of it).
    Launch,
    /// Waiting for the device to finish a step (inside a whole step's call: the device's time).
    Wait,
    /// Sampling on the host, for rows whose logits came back.
    Sample,
    /// Tokens resolved and handed to their requests (text, stop checks, events), prefix-cache
    /// registration, drafts.
    Output,
    /// The device's time on the step (first copy to last), as the backend measured it.
    DeviceBusy,
    /// The device idle between the step before and this one.
    DeviceIdle,
}

impl Phase {
    pub const ALL: [Phase; 8] = [
        Phase::Admit,
        Phase::Schedule,
        Phase::Launch,
        Phase::Wait,
        Phase::Sample,
        Phase::Output,
        Phase::DeviceBusy,
        Phase::DeviceIdle,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Admit => "admit",
            Phase::Schedule => "schedule",
            Phase::Launch => "launch",
            Phase::Wait => "wait",
            Phase::Sample => "sample",
            Phase::Output => "output",
            Phase::DeviceBusy => "device_busy",
            Phase::DeviceIdle => "device_idle",
        }
    }

    /// Work the engine thread does itself (not waiting, not the device).
    fn is_host(self) -> bool {
        !matches!(self, Phase::Wait | Phase::DeviceBusy | Phase::DeviceIdle)
    }
}

/// Upper bounds of the buckets, in seconds (10 us to 1 s; a last bucket takes the rest).
pub const BOUNDS: &[f64] = &[
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0,
];

#[derive(Debug)]
struct Hist {
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
}

impl Hist {
    fn new() -> Hist {
        Hist {
            counts: (0..=BOUNDS.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let slot = BOUNDS.iter().position(|&b| s <= b).unwrap_or(BOUNDS.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }
}

/// The engine's step timings, shared with its handles.
#[derive(Debug)]
pub(crate) struct StepTimings {
    phases: Vec<Hist>,
    /// Steps launched, their logits rows and their tokens.
    steps: AtomicU64,
    rows: AtomicU64,
    tokens: AtomicU64,
}

impl Default for StepTimings {
    fn default() -> Self {
        StepTimings {
            phases: Phase::ALL.iter().map(|_| Hist::new()).collect(),
            steps: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
        }
    }
}

impl StepTimings {
    pub fn observe(&self, phase: Phase, d: Duration) {
        self.phases[phase as usize].observe(d);
    }

    pub fn observe_since(&self, phase: Phase, since: Instant) {
        self.observe(phase, since.elapsed());
    }

    pub fn count_step(&self, rows: usize, tokens: usize) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows as u64, Ordering::Relaxed);
        self.tokens.fetch_add(tokens as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self, overlap: bool) -> StepTimingSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StepTimingSnapshot {
            bounds: BOUNDS,
            phases: Phase::ALL
                .iter()
                .zip(&self.phases)
                .map(|(&p, h)| PhaseTiming {
                    phase: p,
                    counts: h.counts.iter().map(load).collect(),
                    sum_s: load(&h.sum_ns) as f64 * 1e-9,
                })
                .collect(),
            steps: load(&self.steps),
            rows: load(&self.rows),
            tokens: load(&self.tokens),
            overlap,
        }
    }
}

/// One phase's histogram: observations per bucket (not cumulative; the last is past every
/// bound) and their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseTiming {
    pub phase: Phase,
    pub counts: Vec<u64>,
    pub sum_s: f64,
}

impl PhaseTiming {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The step timings at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTimingSnapshot {
    /// The buckets' upper bounds, in seconds.
    pub bounds: &'static [f64],
    pub phases: Vec<PhaseTiming>,
    pub steps: u64,
    pub rows: u64,
    pub tokens: u64,
    /// Whether the engine prepares the next step while the device runs one.
    pub overlap: bool,
}

impl StepTimingSnapshot {
    pub fn sum(&self, phase: Phase) -> f64 {
        self.phases
            .iter()
            .find(|p| p.phase == phase)
            .map_or(0.0, |p| p.sum_s)
    }

    /// What happened between `earlier` and this snapshot, as one line: per step, the device's
    /// time, the host's and each host phase's, in milliseconds.
    pub fn summary_since(&self, earlier: &StepTimingSnapshot, secs: f64) -> Option<String> {
        let steps = self.steps.saturating_sub(earlier.steps);
        if steps == 0 {
            return None;
        }
        let n = steps as f64;
        let ms = |p: Phase| (self.sum(p) - earlier.sum(p)) * 1e3 / n;
        let host: f64 = Phase::ALL
            .iter()
            .filter(|p| p.is_host())
            .map(|&p| ms(p))
            .sum();
        let parts: Vec<String> = Phase::ALL
            .iter()
            .filter(|p| p.is_host())
            .map(|&p| format!("{} {:.3}", p.name(), ms(p)))
            .collect();
        let device = if self.phases[Phase::DeviceBusy as usize].count()
            > earlier.phases[Phase::DeviceBusy as usize].count()
        {
            format!(
                "device {:.3} busy + {:.3} idle",
                ms(Phase::DeviceBusy),
                ms(Phase::DeviceIdle)
            )
        } else {
            "device not measured".to_string()
        };
        Some(format!(
            "engine: {steps} steps in {secs:.1} s, {:.1} rows and {:.1} tokens a step; ms a step: {device}; host {host:.3} ({}); waiting for the device {:.3}; overlap {}",
            self.rows.saturating_sub(earlier.rows) as f64 / n,
            self.tokens.saturating_sub(earlier.tokens) as f64 / n,
            parts.join(", "),
            ms(Phase::Wait),
            if self.overlap { "on" } else { "off" },
        ))
    }
}

/// Seconds between the engine's step summary lines (`KILN_STEP_LOG_SECS`; 0: none).
pub(crate) fn log_interval() -> Option<Duration> {
    let secs = std::env::var("KILN_STEP_LOG_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(10.0);
    (secs > 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets_and_the_summary_divides_by_steps() {
        let t = StepTimings::default();
        let before = t.snapshot(true);
        t.observe(Phase::Schedule, Duration::from_micros(30));
        t.observe(Phase::Schedule, Duration::from_micros(70));
        t.observe(Phase::DeviceBusy, Duration::from_millis(20));
        t.observe(Phase::Wait, Duration::from_millis(2));
        t.count_step(128, 128);
        t.count_step(64, 2048);
        let now = t.snapshot(true);
        let sched = &now.phases[Phase::Schedule as usize];
        assert_eq!(sched.counts[2], 1, "30 us: the 50 us bucket");
        assert_eq!(sched.counts[3], 1, "70 us: the 100 us bucket");
        assert!((sched.sum_s - 100e-6).abs() < 1e-9);
        let line = now.summary_since(&before, 1.0).unwrap();
        assert!(line.contains("2 steps"), "{line}");
        assert!(line.contains("96.0 rows"), "{line}");
        assert!(line.contains("schedule 0.050"), "{line}");
        assert!(line.contains("device 10.000 busy"), "{line}");
        assert!(line.contains("waiting for the device 1.000"), "{line}");
        assert!(now.summary_since(&now, 1.0).is_none());
    }
}
