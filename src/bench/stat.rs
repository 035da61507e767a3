//! The median and range of one measured quantity over a benchmark's iterations: what every
//! benchmark reports (machines are shared and noisy, so never a single run).

use serde::{Deserialize, Serialize};

/// Median and range of one measured quantity over the iterations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// Panics on an empty slice (every benchmark measures at least one iteration).
    pub fn of(values: &[f64]) -> Stat {
        assert!(!values.is_empty(), "no measurements");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Stat {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    /// `median (min–max)` with each value formatted by `f`.
    pub fn show(&self, f: impl Fn(f64) -> String) -> String {
        format!("{} ({}–{})", f(self.median), f(self.min), f(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_median_and_range() {
        assert_eq!(
            Stat::of(&[3.0, 1.0, 2.0]),
            Stat {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(Stat::of(&[5.0]).median, 5.0);
    }
}
