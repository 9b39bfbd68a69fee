//! Server metrics and their Prometheus text exposition (format 0.0.4): request counts by
//! endpoint and status, token counters, latency histograms, plus gauges read from the engine.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    5.0, 10.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 240.0, 480.0,
    960.0,
];

/// A cumulative histogram with fixed upper bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// counts[i]: observations <= bounds[i] and > bounds[i-1]; the last slot is +Inf.
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let slot = self
            .bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(self.bounds.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = self
                .bounds
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    }
}

/// A value read at scrape time (from the engine's stats): a gauge, or a counter the engine
/// keeps.
pub struct Gauge {
    pub name: &'static str,
    pub help: &'static str,
    pub value: f64,
    pub counter: bool,
}

#[derive(Debug)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    finished: Mutex<BTreeMap<&'static str, u64>>,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub request_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::default(),
            finished: Mutex::default(),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            time_to_first_token: Histogram::new(TTFT_BUCKETS),
            inter_token_latency: Histogram::new(ITL_BUCKETS),
            request_duration: Histogram::new(E2E_BUCKETS),
        }
    }
}

/// A poisoned lock only means another thread panicked mid-increment; the counts stay usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    /// One HTTP response, by endpoint (a fixed label set, so unknown paths cannot blow it up).
    pub fn record_response(&self, endpoint: &'static str, status: u16) {
        *lock(&self.requests).entry((endpoint, status)).or_default() += 1;
    }

    /// One finished generation (one choice) and why it ended.
    pub fn record_finish(&self, reason: &'static str) {
        *lock(&self.finished).entry(reason).or_default() += 1;
    }

    pub fn add_prompt_tokens(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn add_generation_tokens(&self, n: usize) {
        self.generation_tokens
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn requests_with_status(&self, endpoint: &str, status: u16) -> u64 {
        lock(&self.requests)
            .iter()
            .filter(|((e, s), _)| *e == endpoint && *s == status)
            .map(|(_, n)| n)
            .sum()
    }

    pub fn render(&self, gauges: &[Gauge]) -> String {
        let mut out = String::new();
        out.push_str("# HELP kiln_requests_total HTTP responses by endpoint and status code.\n");
        out.push_str("# TYPE kiln_requests_total counter\n");
        for ((endpoint, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "kiln_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP kiln_request_finished_total Finished generations by finish reason.\n");
        out.push_str("# TYPE kiln_request_finished_total counter\n");
        for (reason, n) in lock(&self.finished).iter() {
            let _ = writeln!(
                out,
                "kiln_request_finished_total{{finish_reason=\"{reason}\"}} {n}"
            );
        }
        let counters = [
            (
                "kiln_prompt_tokens_total",
                "Prompt tokens of accepted requests.",
                &self.prompt_tokens,
            ),
            (
                "kiln_generation_tokens_total",
                "Generated tokens.",
                &self.generation_tokens,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        self.time_to_first_token.render(
            &mut out,
            "kiln_time_to_first_token_seconds",
            "Seconds from request arrival to a choice's first token.",
        );
        self.inter_token_latency.render(
            &mut out,
            "kiln_inter_token_latency_seconds",
            "Seconds between consecutive tokens of a choice.",
        );
        self.request_duration.render(
            &mut out,
            "kiln_request_duration_seconds",
            "Seconds from request arrival to its last token.",
        );
        for g in gauges {
            let kind = if g.counter { "counter" } else { "gauge" };
            let _ = writeln!(
                out,
                "# HELP {} {}\n# TYPE {} {kind}\n{} {}",
                g.name, g.help, g.name, g.name, g.value
            );
        }
        out
    }
}

/// The engine's step timings as one Prometheus histogram labelled by phase, with the rows and
/// tokens its steps ran and whether steps overlap.
pub fn render_step_timings(t: &kiln_engine::StepTimingSnapshot) -> String {
    let mut out = String::new();
    let name = "kiln_engine_step_phase_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Seconds per engine step in each phase: host work (admit, schedule, launch, \
         sample, output), waiting for the device (wait), and the device's own busy and idle time \
         when the backend measures them.\n# TYPE {name} histogram"
    );
    for p in &t.phases {
        let phase = p.phase.name();
        let mut cumulative = 0;
        for (i, c) in p.counts.iter().enumerate() {
            cumulative += c;
            let le = t
                .bounds
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "{name}_bucket{{phase=\"{phase}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(out, "{name}_sum{{phase=\"{phase}\"}} {}", p.sum_s);
        let _ = writeln!(out, "{name}_count{{phase=\"{phase}\"}} {cumulative}");
    }
    for (metric, help, kind, value) in [
        (
            "kiln_engine_steps_launched_total",
            "Engine steps launched.",
            "counter",
            t.steps,
        ),
        (
            "kiln_engine_step_rows_total",
            "Logits rows of the steps launched.",
            "counter",
            t.rows,
        ),
        (
            "kiln_engine_step_tokens_total",
            "Tokens of the steps launched (prompt chunks and decode rows).",
            "counter",
            t.tokens,
        ),
        (
            "kiln_engine_overlap",
            "1 when the engine plans and launches each step while the device runs the one before.",
            "gauge",
            t.overlap as u64,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric} {value}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the first sample line that starts with `prefix`.
    fn sample(text: &str, prefix: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        for ms in [0, 3, 30, 30, 200_000] {
            m.time_to_first_token.observe(Duration::from_millis(ms));
        }
        let text = m.render(&[]);
        assert_eq!(
            sample(
                &text,
                "kiln_time_to_first_token_seconds_bucket{le=\"0.001\"}"
            ),
            1.0
        );
        assert_eq!(
            sample(
                &text,
                "kiln_time_to_first_token_seconds_bucket{le=\"0.005\"}"
            ),
            2.0
        );
        assert_eq!(
            sample(
                &text,
                "kiln_time_to_first_token_seconds_bucket{le=\"0.04\"}"
            ),
            4.0
        );
        assert_eq!(
            sample(&text, "kiln_time_to_first_token_seconds_bucket{le=\"80\"}"),
            4.0
        );
        assert_eq!(
            sample(
                &text,
                "kiln_time_to_first_token_seconds_bucket{le=\"+Inf\"}"
            ),
            5.0
        );
        assert_eq!(sample(&text, "kiln_time_to_first_token_seconds_count"), 5.0);
        assert!((sample(&text, "kiln_time_to_first_token_seconds_sum") - 200.063).abs() < 1e-9);
        assert_eq!(m.time_to_first_token.count(), 5);
    }

    #[test]
    fn step_timings_render_as_one_histogram_per_phase() {
        use kiln_engine::{Phase, PhaseTiming, StepTimingSnapshot};
        let bounds: &'static [f64] = &[0.001, 0.01];
        let t = StepTimingSnapshot {
            bounds,
            phases: vec![
                PhaseTiming {
                    phase: Phase::Schedule,
                    counts: vec![3, 1, 0],
                    sum_s: 0.012,
                },
                PhaseTiming {
                    phase: Phase::DeviceBusy,
                    counts: vec![0, 2, 2],
                    sum_s: 0.5,
                },
            ],
            steps: 4,
            rows: 128,
            tokens: 300,
            overlap: true,
        };
        let text = render_step_timings(&t);
        let h = "kiln_engine_step_phase_seconds";
        assert_eq!(
            sample(
                &text,
                &format!("{h}_bucket{{phase=\"schedule\",le=\"0.01\"}}")
            ),
            4.0
        );
        assert_eq!(
            sample(
                &text,
                &format!("{h}_bucket{{phase=\"device_busy\",le=\"+Inf\"}}")
            ),
            4.0
        );
        assert_eq!(
            sample(&text, &format!("{h}_sum{{phase=\"device_busy\"}}")),
            0.5
        );
        assert_eq!(sample(&text, "kiln_engine_step_rows_total"), 128.0);
        assert_eq!(sample(&text, "kiln_engine_overlap"), 1.0);
        assert_eq!(
            text.matches("# TYPE kiln_engine_step_phase_seconds")
                .count(),
            1
        );
    }

    #[test]
    fn counters_and_gauges_render() {
        let m = Metrics::default();
        m.record_response("chat", 200);
        m.record_response("chat", 200);
        m.record_response("chat", 400);
        m.record_finish("stop");
        m.add_prompt_tokens(12);
        m.add_generation_tokens(5);
        let text = m.render(&[Gauge {
            name: "kiln_requests_running",
            help: "Running.",
            value: 3.0,
            counter: false,
        }]);
        assert_eq!(
            sample(
                &text,
                "kiln_requests_total{endpoint=\"chat\",status=\"200\"}"
            ),
            2.0
        );
        assert_eq!(
            sample(
                &text,
                "kiln_requests_total{endpoint=\"chat\",status=\"400\"}"
            ),
            1.0
        );
        assert_eq!(
            sample(&text, "kiln_request_finished_total{finish_reason=\"stop\"}"),
            1.0
        );
        assert_eq!(sample(&text, "kiln_prompt_tokens_total"), 12.0);
        assert_eq!(sample(&text, "kiln_generation_tokens_total"), 5.0);
        assert_eq!(sample(&text, "kiln_requests_running"), 3.0);
        assert!(text.contains("# TYPE kiln_requests_running gauge"));
        assert_eq!(m.requests_with_status("chat", 200), 2);
    }
}
