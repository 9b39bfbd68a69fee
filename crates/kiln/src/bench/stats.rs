//! Median and spread of repeated measurements.

/// The median, minimum and maximum of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// None for no samples or a non-finite one (a timing gone wrong is not averaged away).
    pub fn of(samples: &[f64]) -> Option<Spread> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: s[0],
            max: s[n - 1],
        })
    }

    /// The spread of `f` applied to each sample, for a monotone `f` (a rate from a time).
    pub fn map(self, f: impl Fn(f64) -> f64) -> Spread {
        let (a, b) = (f(self.min), f(self.max));
        Spread {
            median: f(self.median),
            min: a.min(b),
            max: a.max(b),
        }
    }
}

/// Tokens per second; 0 when no time passed (a clock too coarse for the case).
pub fn rate(tokens: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn a_rate_from_times_swaps_min_and_max() {
        // Times of 1, 2 and 4 seconds for 8 tokens: the slowest time is the lowest rate.
        let times = Spread::of(&[2.0, 1.0, 4.0]).unwrap();
        let rates = times.map(|t| rate(8, t));
        assert_eq!((rates.median, rates.min, rates.max), (4.0, 2.0, 8.0));
        assert_eq!(rate(5, 0.0), 0.0);
    }
}
