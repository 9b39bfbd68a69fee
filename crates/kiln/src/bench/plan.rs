//! What one `kiln bench` run measures: the prefill lengths and decode cases, checked against the
//! model before any weight is loaded, and the KV pool they need.

use anyhow::{bail, ensure};

/// The cases of one run, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Prompt lengths to prefill, one sequence each.
    pub prefill: Vec<usize>,
    /// Tokens each decode case generates per stream (0: no decode cases).
    pub decode: usize,
    /// KV depths the decode cases start from.
    pub depths: Vec<usize>,
    /// Streams decoded together.
    pub concurrency: Vec<usize>,
    /// Timed runs per case.
    pub repeats: usize,
    /// Untimed runs per case before the timed ones.
    pub warmup: usize,
    /// Most prompt tokens in one forward (the engine's prefill chunk).
    pub chunk: usize,
    /// Histories whose resumed TTFT is measured (prefix cached), each with `new_turn` more.
    pub resumed: Vec<usize>,
    pub new_turn: usize,
}

impl Plan {
    /// Checks the cases against the model's context length.
    pub fn validate(&self, max_context: usize) -> anyhow::Result<()> {
        ensure!(self.repeats > 0, "--repeats must be at least 1");
        ensure!(self.chunk > 0, "--chunk must be at least 1");
        ensure!(
            !self.prefill.is_empty() || self.decode > 0 || !self.resumed.is_empty(),
            "nothing to measure: give --prefill or --resumed lengths or a --decode count above 0"
        );
        ensure!(
            self.resumed.is_empty() || self.new_turn >= 2,
            "--new-turn must be at least 2 tokens"
        );
        if let Some(&l) = self.prefill.iter().find(|&&l| l == 0) {
            bail!("--prefill lengths must be at least 1, got {l}");
        }
        if self.decode > 0 {
            ensure!(!self.depths.is_empty(), "--depth needs at least one value");
            ensure!(
                !self.concurrency.is_empty() && self.concurrency.iter().all(|&c| c > 0),
                "--concurrency values must be at least 1"
            );
        }
        let longest = self.longest_sequence();
        ensure!(
            longest <= max_context,
            "the longest sequence of this run has {longest} tokens but the model's context is \
             {max_context}; use shorter --prefill lengths or --depth values"
        );
        Ok(())
    }

    pub fn max_concurrency(&self) -> usize {
        if self.decode == 0 {
            return 1;
        }
        self.concurrency.iter().copied().max().unwrap_or(1)
    }

    /// The longest sequence any case runs.
    pub fn longest_sequence(&self) -> usize {
        let resumed = self.resumed.iter().map(|h| h + self.new_turn).max();
        let prefill = self
            .prefill
            .iter()
            .copied()
            .chain(resumed)
            .max()
            .unwrap_or(0);
        let decode = if self.decode > 0 {
            self.depths.iter().copied().max().unwrap_or(0) + self.decode
        } else {
            0
        };
        prefill.max(decode)
    }

    /// KV blocks the run needs at once: the longest prompt alone, or every decode stream at
    /// its deepest (prefill sequences are released before the decode cases start).
    pub fn kv_blocks(&self, block_size: usize) -> usize {
        let prefill = self
            .prefill
            .iter()
            .map(|l| l.div_ceil(block_size))
            .max()
            .unwrap_or(0);
        let decode = if self.decode > 0 {
            let deepest = self.depths.iter().copied().max().unwrap_or(0) + self.decode;
            self.max_concurrency() * deepest.div_ceil(block_size)
        } else {
            0
        };
        // A resumed case keeps the history cached while the new prompt runs beside it.
        let resumed = self
            .resumed
            .iter()
            .map(|h| 2 * (h + self.new_turn).div_ceil(block_size))
            .max()
            .unwrap_or(0);
        prefill.max(decode).max(resumed).max(1)
    }
}

impl Plan {
    /// Host-tier slots the resumed cases need to time a history copied back from host memory.
    pub fn host_blocks(&self, block_size: usize) -> usize {
        self.resumed
            .iter()
            .map(|h| h / block_size + 1)
            .max()
            .unwrap_or(0)
    }
}

/// The default prompt lengths and KV depths.
pub const DEFAULT_PREFILL: [usize; 3] = [2048, 8192, 32768];
pub const DEFAULT_DEPTHS: [usize; 2] = [0, 8192];

/// The default values of `flag` whose sequences (`value + extra` tokens) fit a context of
/// `context`, and a note naming those left out. When none fits, `fallback` stands in.
pub fn fit_defaults(
    defaults: &[usize],
    extra: usize,
    context: usize,
    flag: &str,
    fallback: impl FnOnce() -> Option<usize>,
) -> (Vec<usize>, Option<String>) {
    let (kept, dropped): (Vec<usize>, Vec<usize>) =
        defaults.iter().partition(|&&v| v + extra <= context);
    if dropped.is_empty() {
        return (kept, None);
    }
    let list = |v: &[usize]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut note = format!(
        "note: default {flag} {} left out: the model's context is {context} tokens",
        list(&dropped)
    );
    if extra > 0 {
        note.push_str(&format!(" and each decode case adds {extra}"));
    }
    let kept = match (kept.is_empty(), fallback()) {
        (true, Some(f)) => {
            note.push_str(&format!("; {flag} {f} instead"));
            vec![f]
        }
        _ => kept,
    };
    note.push_str(&format!(" (give {flag} to choose)"));
    (kept, Some(note))
}

/// The largest power of two up to `n` (for a prompt length that fits a short context).
pub fn power_of_two_up_to(n: usize) -> Option<usize> {
    (n > 0).then(|| 1 << (usize::BITS - 1 - n.leading_zeros()))
}

/// Parses "2048,8192,32768" (an empty string is an empty list; "k" multiplies by 1024).
pub fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    let s = s.trim();
    if s.is_empty() || s == "none" {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|part| {
            let p = part.trim();
            let (digits, scale) = match p.strip_suffix(['k', 'K']) {
                Some(d) => (d, 1024),
                None => (p, 1),
            };
            digits
                .parse::<usize>()
                .ok()
                .and_then(|v| v.checked_mul(scale))
                .ok_or_else(|| format!("`{p}` is not a whole number (in `{s}`)"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            prefill: vec![2048, 8192],
            decode: 128,
            depths: vec![0, 8192],
            concurrency: vec![1, 8, 32],
            repeats: 3,
            warmup: 1,
            chunk: 2048,
            resumed: vec![],
            new_turn: 100,
        }
    }

    #[test]
    fn defaults_beyond_the_context_are_dropped_with_a_note() {
        // dummy:tiny (4096 tokens) with --decode 16: depth 8192 goes, 0 stays.
        let (kept, note) = fit_defaults(&DEFAULT_DEPTHS, 16, 4096, "--depth", || None);
        assert_eq!(kept, vec![0]);
        let note = note.unwrap();
        assert!(
            note.contains("--depth 8192 left out") && note.contains("4096"),
            "{note}"
        );
        // kiln-4m (1024 tokens): no default prompt length fits, so the context's own
        // power of two stands in.
        let (kept, note) = fit_defaults(&DEFAULT_PREFILL, 0, 1024, "--prefill", || {
            power_of_two_up_to(1024)
        });
        assert_eq!(kept, vec![1024]);
        assert!(note.unwrap().contains("--prefill 1024 instead"));
        // A long context keeps them all, silently.
        let (kept, note) = fit_defaults(&DEFAULT_PREFILL, 0, 131_072, "--prefill", || None);
        assert_eq!((kept, note), (DEFAULT_PREFILL.to_vec(), None));
        assert_eq!(power_of_two_up_to(4096), Some(4096));
        assert_eq!(power_of_two_up_to(3000), Some(2048));
        assert_eq!(power_of_two_up_to(0), None);
    }

    #[test]
    fn lists_parse_with_k_suffix_and_reject_junk() {
        assert_eq!(parse_list("2048,8k, 32K").unwrap(), vec![2048, 8192, 32768]);
        assert_eq!(parse_list("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_list("none").unwrap(), Vec::<usize>::new());
        assert!(parse_list("12,abc").unwrap_err().contains("abc"));
        assert!(parse_list("-3").is_err());
        assert!(parse_list("1,,2").is_err());
    }

    #[test]
    fn kv_need_is_the_larger_of_longest_prompt_and_all_streams_at_depth() {
        let p = plan();
        // 32 streams of 8192 + 128 tokens, 16 per block: 32 * 520 blocks.
        assert_eq!(p.kv_blocks(16), 32 * 520);
        let prefill_only = Plan {
            decode: 0,
            ..plan()
        };
        assert_eq!(prefill_only.kv_blocks(16), 512);
        assert_eq!(prefill_only.max_concurrency(), 1);
    }

    #[test]
    fn validation_names_the_problem() {
        let err = plan().validate(4096).unwrap_err().to_string();
        assert!(err.contains("8320") && err.contains("4096"), "{err}");
        assert!(plan().validate(131_072).is_ok());
        let zero = Plan {
            repeats: 0,
            ..plan()
        };
        assert!(zero
            .validate(1 << 20)
            .unwrap_err()
            .to_string()
            .contains("--repeats"));
        let empty = Plan {
            prefill: vec![],
            decode: 0,
            ..plan()
        };
        assert!(empty
            .validate(1 << 20)
            .unwrap_err()
            .to_string()
            .contains("nothing"));
        let no_streams = Plan {
            concurrency: vec![0],
            ..plan()
        };
        assert!(no_streams.validate(1 << 20).is_err());
        let zero_len = Plan {
            prefill: vec![0],
            ..plan()
        };
        assert!(zero_len.validate(1 << 20).is_err());
    }
}
