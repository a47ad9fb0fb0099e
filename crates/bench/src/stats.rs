//! Distribution figures (percentiles, mean, extremes) over a sample. Pure
//! arithmetic: no I/O, no knowledge of runs or lanes.
//!
//! # Percentile method
//! Nearest rank, on the sorted sample: the p-th percentile of n values is
//! the value at 1-based rank `ceil(p * n / 100)` (at least 1). It is
//! always a value that was measured (no interpolation), and with fewer
//! than 100 values p99 is the maximum, which is the honest answer for a
//! small sample. The rank is computed in integers, so it never suffers
//! from floating-point rounding.

use serde::{Deserialize, Serialize};

/// The nearest-rank `p`-th percentile (`p` in 1..=100) of `sorted`
/// (ascending, no NaN). `None` for an empty sample.
pub fn percentile(sorted: &[f64], p: u32) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(1, 100) as usize;
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    Some(sorted[rank - 1])
}

/// The shape of one sample: its size, extremes, mean and percentiles.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// How many values.
    pub n: u64,
    /// Smallest value.
    pub min: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Distribution {
    /// The distribution of `values`, ignoring non-finite ones; `None` when
    /// no finite value is left.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let pick = |p| percentile(&v, p).expect("the sample is not empty");
        Some(Self {
            n: n as u64,
            min: v[0],
            p50: pick(50),
            p95: pick(95),
            p99: pick(99),
            max: v[n - 1],
            mean: v.iter().sum::<f64>() / n as f64,
        })
    }
}

/// `part / whole`, or `None` when `whole` is zero.
pub(crate) fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_on_known_samples() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        // ceil(0.5 * 20) = 10, ceil(0.95 * 20) = 19, ceil(0.99 * 20) = 20.
        assert_eq!(percentile(&v, 50), Some(10.0));
        assert_eq!(percentile(&v, 95), Some(19.0));
        assert_eq!(percentile(&v, 99), Some(20.0));
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 99), Some(198.0));
        assert_eq!(percentile(&[7.0], 50), Some(7.0));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn distribution_sorts_and_skips_non_finite() {
        let d = Distribution::of([3.0, f64::NAN, 1.0, 2.0, f64::INFINITY]).unwrap();
        assert_eq!(d.n, 3);
        assert_eq!((d.min, d.p50, d.max, d.mean), (1.0, 2.0, 3.0, 2.0));
        assert!(Distribution::of([f64::NAN]).is_none());
    }
}
