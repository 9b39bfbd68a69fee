//! The results of a run as a readable table and as the JSON the scripts read: `date`, `commit`,
//! `device`, `model` and `rows`, each row with `engine`, `test`, `tokens`, `concurrency` and
//! `tok_s` (the median) plus its spread.

use serde_json::{json, Value};

use super::constrained::ConstrainedTiming;
use super::runner::{DecodeTiming, PrefillTiming, ResumedTiming};
use super::speculative::SpecTiming;
use super::stats::{rate, Spread};
use super::target::Memory;

/// One measured case.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Prefill(PrefillTiming),
    Decode(DecodeTiming),
    Resumed(ResumedTiming),
    Speculative(SpecTiming),
    Constrained(ConstrainedTiming),
}

impl Row {
    /// Total tokens per second over the repeats (all streams together for decode).
    pub fn tok_s(&self) -> Spread {
        match self {
            Row::Prefill(p) => p.forward_s.map(|t| rate(p.tokens, t)),
            Row::Decode(d) => d.elapsed_s.map(|t| rate(d.steps * d.concurrency, t)),
            // Tokens of the prompt over the time to its first token.
            Row::Resumed(r) => r.ttft_s.map(|t| rate(r.history + r.new_tokens, t)),
            Row::Speculative(s) => s.drafted_tok_s,
            Row::Constrained(c) => c.constrained_tok_s,
        }
    }

    pub fn to_json(&self) -> Value {
        let tok_s = self.tok_s();
        match self {
            Row::Prefill(p) => {
                let ttft_ms = p.ttft_s.map(|t| t * 1e3);
                json!({
                    "engine": "kiln",
                    "test": "prefill",
                    "tokens": p.tokens,
                    "concurrency": 1,
                    "tok_s": tok_s.median,
                    "tok_s_min": tok_s.min,
                    "tok_s_max": tok_s.max,
                    "ttft_ms": ttft_ms.median,
                    "ttft_ms_min": ttft_ms.min,
                    "ttft_ms_max": ttft_ms.max,
                })
            }
            Row::Decode(d) => {
                let per_stream = tok_s.map(|r| r / d.concurrency as f64);
                let step_ms = d.elapsed_s.map(|t| t * 1e3 / d.steps.max(1) as f64);
                json!({
                    "engine": "kiln",
                    "test": "decode",
                    "tokens": d.depth,
                    "concurrency": d.concurrency,
                    "generated": d.steps,
                    "tok_s": tok_s.median,
                    "tok_s_min": tok_s.min,
                    "tok_s_max": tok_s.max,
                    "tok_s_per_stream": per_stream.median,
                    "tok_s_per_stream_min": per_stream.min,
                    "tok_s_per_stream_max": per_stream.max,
                    "step_ms": step_ms.median,
                    "step_ms_min": step_ms.min,
                    "step_ms_max": step_ms.max,
                })
            }
            Row::Speculative(s) => {
                let c = s.counts;
                json!({
                    "engine": "kiln",
                    "test": "decode",
                    "tokens": s.prompt_tokens,
                    "concurrency": 1,
                    "draft": s.drafter,
                    "generated": s.generated,
                    "tok_s": tok_s.median,
                    "tok_s_min": tok_s.min,
                    "tok_s_max": tok_s.max,
                    "plain_tok_s": s.plain_tok_s.median,
                    "plain_tok_s_min": s.plain_tok_s.min,
                    "plain_tok_s_max": s.plain_tok_s.max,
                    "speed_up": tok_s.median / s.plain_tok_s.median,
                    "proposed": c.proposed,
                    "accepted": c.accepted,
                    "target_passes": c.target_passes,
                })
            }
            Row::Constrained(c) => json!({
                "engine": "kiln",
                "test": "decode",
                "tokens": c.tokens,
                "concurrency": c.streams,
                "grammar": c.grammar,
                "tok_s": tok_s.median,
                "tok_s_min": tok_s.min,
                "tok_s_max": tok_s.max,
                "plain_tok_s": c.plain_tok_s.median,
                "plain_tok_s_min": c.plain_tok_s.min,
                "plain_tok_s_max": c.plain_tok_s.max,
                "constrained_over_plain": tok_s.median / c.plain_tok_s.median,
                "generated_per_stream": c.constrained_generated,
                "mask_ms_per_step": c.mask_ms_per_step,
                "masks_per_step": c.masks_per_step,
            }),
            Row::Resumed(r) => {
                let (ttft, cold) = (r.ttft_s.map(|t| t * 1e3), r.cold_ttft_s.map(|t| t * 1e3));
                json!({
                    "engine": "kiln",
                    "test": "resumed",
                    "tokens": r.history + r.new_tokens,
                    "concurrency": 1,
                    "cached_tokens": r.cached,
                    "new_tokens": r.new_tokens,
                    "tok_s": tok_s.median,
                    "ttft_ms": ttft.median,
                    "ttft_ms_min": ttft.min,
                    "ttft_ms_max": ttft.max,
                    "cold_ttft_ms": cold.median,
                    "cold_ttft_ms_min": cold.min,
                    "cold_ttft_ms_max": cold.max,
                    "resumed_over_cold": ttft.median / cold.median,
                    "host_ttft_ms": r.host_ttft_s.map(|h| h.median * 1e3),
                    "host_ttft_ms_min": r.host_ttft_s.map(|h| h.min * 1e3),
                    "host_ttft_ms_max": r.host_ttft_s.map(|h| h.max * 1e3),
                })
            }
        }
    }

    /// One line of the table: test, tokens, streams, tok/s median [min-max], per stream, latency.
    fn cells(&self) -> [String; 6] {
        let t = self.tok_s();
        let range = format!("{:.1} [{:.1}-{:.1}]", t.median, t.min, t.max);
        match self {
            Row::Prefill(p) => [
                format!("prefill {}", p.tokens),
                "-".into(),
                "1".into(),
                range,
                "-".into(),
                format!("TTFT {:.1} ms", p.ttft_s.median * 1e3),
            ],
            Row::Decode(d) => [
                format!("decode {}", d.steps),
                d.depth.to_string(),
                d.concurrency.to_string(),
                range,
                format!("{:.1}", t.median / d.concurrency as f64),
                format!(
                    "step {:.2} ms",
                    d.elapsed_s.median * 1e3 / d.steps.max(1) as f64
                ),
            ],
            Row::Speculative(s) => [
                format!("decode {}, draft {}", s.generated, s.drafter),
                s.prompt_tokens.to_string(),
                "1".into(),
                range,
                "-".into(),
                format!(
                    "{:.2}x plain {:.1}; {} of {} drafts kept",
                    t.median / s.plain_tok_s.median,
                    s.plain_tok_s.median,
                    s.counts.accepted,
                    s.counts.proposed
                ),
            ],
            Row::Constrained(c) => [
                format!("decode {}, grammar {}", c.tokens, c.grammar),
                "-".into(),
                c.streams.to_string(),
                range,
                format!("{:.1}", t.median / c.streams as f64),
                format!(
                    "{:.2}x plain {:.1}; masks {:.3} ms/step ({:.1} rows)",
                    t.median / c.plain_tok_s.median,
                    c.plain_tok_s.median,
                    c.mask_ms_per_step,
                    c.masks_per_step
                ),
            ],
            Row::Resumed(r) => [
                format!("resumed {}+{}", r.history, r.new_tokens),
                r.cached.to_string(),
                "1".into(),
                range,
                "-".into(),
                match r.host_ttft_s {
                    Some(h) => format!(
                        "TTFT {:.1} ms (from host {:.1} ms, cold {:.1} ms)",
                        r.ttft_s.median * 1e3,
                        h.median * 1e3,
                        r.cold_ttft_s.median * 1e3
                    ),
                    None => format!(
                        "TTFT {:.1} ms (cold {:.1} ms)",
                        r.ttft_s.median * 1e3,
                        r.cold_ttft_s.median * 1e3
                    ),
                },
            ],
        }
    }
}

/// Everything a run reports besides its rows.
#[derive(Debug, Clone)]
pub struct Header {
    pub date: String,
    pub commit: String,
    pub device: String,
    pub backend: &'static str,
    pub model: String,
    /// Shapes and size of the model, for the scripts' hardware-floor figures.
    pub model_info: Value,
    pub settings: Value,
    pub memory: Option<Memory>,
}

pub fn to_json(header: &Header, rows: &[Row]) -> Value {
    let mut out = json!({
        "date": header.date,
        "commit": header.commit,
        "device": header.device,
        "backend": header.backend,
        "model": header.model,
        "model_info": header.model_info,
        "settings": header.settings,
        "rows": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
    });
    if let Some(m) = &header.memory {
        out["peak_memory_bytes"] = json!(m.bytes);
        out["peak_memory_what"] = json!(m.what);
    }
    out
}

/// The table printed on stdout.
pub fn table(header: &Header, rows: &[Row]) -> String {
    let titles = [
        "test",
        "depth",
        "streams",
        "tok/s median [min-max]",
        "tok/s/stream",
        "latency",
    ];
    let lines: Vec<[String; 6]> = rows.iter().map(Row::cells).collect();
    let mut widths = titles.map(str::len);
    for l in &lines {
        for (w, c) in widths.iter_mut().zip(l) {
            *w = (*w).max(c.len());
        }
    }
    let fmt = |cells: [&str; 6]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        format!("| {} |\n", parts.join(" | "))
    };
    let mut out = format!(
        "kiln bench: {} on {} ({}), commit {}, {}\n",
        header.model, header.device, header.backend, header.commit, header.date
    );
    out.push_str(&fmt(titles));
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
    for l in &lines {
        out.push_str(&fmt([&l[0], &l[1], &l[2], &l[3], &l[4], &l[5]]));
    }
    if let Some(m) = &header.memory {
        out.push_str(&format!(
            "memory: {:.2} GiB ({})\n",
            m.bytes as f64 / (1u64 << 30) as f64,
            m.what
        ));
    }
    out
}

/// The current UTC time as "YYYY-MM-DDTHH:MM:SSZ".
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_from_unix(secs)
}

/// Calendar date of a Unix time (days-from-civil, inverted).
pub fn utc_from_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// KILN_COMMIT when set (the GPU machine has no git checkout), else the checkout's short hash
/// with "-dirty" when tracked files changed, else "unknown".
pub fn commit() -> String {
    if let Ok(c) = std::env::var("KILN_COMMIT") {
        if !c.trim().is_empty() {
            return c.trim().to_string();
        }
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(median: f64, min: f64, max: f64) -> Spread {
        Spread { median, min, max }
    }

    fn rows() -> Vec<Row> {
        vec![
            Row::Prefill(PrefillTiming {
                tokens: 2048,
                forward_s: s(0.5, 0.4, 1.0),
                ttft_s: s(0.51, 0.41, 1.01),
            }),
            Row::Decode(DecodeTiming {
                depth: 512,
                concurrency: 8,
                steps: 128,
                elapsed_s: s(2.0, 1.0, 4.0),
            }),
        ]
    }

    #[test]
    fn rows_carry_rates_and_spreads() {
        let r = rows();
        let p = r[0].to_json();
        assert_eq!(p["test"], "prefill");
        assert_eq!(p["tokens"], 2048);
        assert_eq!(p["tok_s"], 4096.0);
        assert_eq!(p["tok_s_min"], 2048.0);
        assert_eq!(p["tok_s_max"], 5120.0);
        assert_eq!(p["ttft_ms"], 510.0);
        let d = r[1].to_json();
        assert_eq!(d["engine"], "kiln");
        assert_eq!(
            (d["tokens"].as_u64(), d["concurrency"].as_u64()),
            (Some(512), Some(8))
        );
        // 8 streams x 128 tokens in 2 s.
        assert_eq!(d["tok_s"], 512.0);
        assert_eq!(d["tok_s_per_stream"], 64.0);
        assert_eq!(
            (d["tok_s_min"].as_f64(), d["tok_s_max"].as_f64()),
            (Some(256.0), Some(1024.0))
        );
        assert_eq!(d["step_ms"], 2000.0 / 128.0);
    }

    #[test]
    fn table_and_json_hold_the_header() {
        let header = Header {
            date: utc_from_unix(0),
            commit: "abc".into(),
            device: "test CPU (2 threads)".into(),
            backend: "cpu",
            model: "dummy:tiny".into(),
            model_info: json!({"params": 1}),
            settings: json!({"repeats": 3}),
            memory: Some(Memory {
                bytes: 3 << 30,
                what: "peak",
            }),
        };
        let j = to_json(&header, &rows());
        assert_eq!(j["date"], "1970-01-01T00:00:00Z");
        assert_eq!(j["rows"].as_array().unwrap().len(), 2);
        assert_eq!(j["peak_memory_bytes"], 3u64 << 30);
        let t = table(&header, &rows());
        assert!(
            t.contains("prefill 2048") && t.contains("4096.0 [2048.0-5120.0]"),
            "{t}"
        );
        assert!(t.contains("memory: 3.00 GiB"), "{t}");
        let widths: Vec<usize> = t.lines().skip(1).take(4).map(str::len).collect();
        assert!(
            widths.windows(2).all(|w| w[0] == w[1]),
            "ragged table:\n{t}"
        );
    }

    #[test]
    fn unix_times_become_calendar_dates() {
        assert_eq!(utc_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_from_unix(1_795_949_130), "2026-11-29T10:45:30Z");
    }
}
