//! Confidence figures of one sampled token, read from its row of logits:
//! the sampled token's log-probability under the raw model distribution
//! and the top-1 minus top-2 probability margin, from the maximum, the
//! second-largest logit and the log-sum-exp. Also the per-completion
//! summaries built from per-token figures ([`low_quantile`]). It must not
//! touch llama.cpp or sample anything.
//!
//! Speed: this runs once per generated token over the whole vocabulary
//! (49k to 262k logits). The passes themselves are `local::simd`'s
//! vectorised loops (a polynomial `exp`, f32 lanes summed in f64 per
//! block); the generation loop runs `simd::scan` once, takes the greedy
//! token from it, and hands it here ([`from_pass`]), so a token costs one
//! max/top-2 pass and one exp-sum pass and no allocation.

use super::simd;

/// What one token's logits say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenScan {
    /// log softmax(logits)\[chosen\]; `-inf` when `chosen` is out of range.
    pub logprob: f32,
    /// softmax top-1 minus top-2 probability, in `[0, 1]`.
    pub margin: f32,
    /// log(sum(exp(logits))): a logit minus this is its log-probability.
    pub log_sum_exp: f64,
}

/// Scans `logits` (both passes) for the token at `chosen`.
#[cfg(test)]
pub(super) fn scan(logits: &[f32], chosen: usize) -> TokenScan {
    from_pass(logits, &simd::scan(logits), chosen)
}

/// The figures of the token at `chosen`, given `simd::scan` of the same
/// `logits` (the exp-sum pass runs here).
pub fn from_pass(logits: &[f32], pass: &simd::Scan, chosen: usize) -> TokenScan {
    let lse = f64::from(pass.max) + simd::sum_exp(logits, pass.max).ln();
    let logprob = logits
        .get(chosen)
        .map_or(f32::NEG_INFINITY, |&l| (f64::from(l) - lse) as f32);
    let p = |l: f32| {
        if l == f32::NEG_INFINITY {
            0.0
        } else {
            (f64::from(l) - lse).exp()
        }
    };
    TokenScan {
        logprob,
        margin: (p(pass.max) - p(pass.second)).clamp(0.0, 1.0) as f32,
        log_sum_exp: lse,
    }
}

/// log softmax(logits)\[chosen\] alone (a prompt token's score): two
/// passes over the row, no margin.
pub(super) fn token_logprob(logits: &[f32], chosen: usize) -> f32 {
    let max = simd::scan(logits).max;
    let lse = f64::from(max) + simd::sum_exp(logits, max).ln();
    logits
        .get(chosen)
        .map_or(f32::NEG_INFINITY, |&l| (f64::from(l) - lse) as f32)
}

/// The `n` most likely tokens of `logits` with their log-probabilities
/// (`log_sum_exp` from [`from_pass`]), most likely first, ties by id:
/// what a request's `top_logprobs` asks for. One partial selection over
/// the row, only when asked.
pub(super) fn top_logprobs(logits: &[f32], log_sum_exp: f64, n: usize) -> Vec<(usize, f32)> {
    let n = n.min(logits.len());
    if n == 0 {
        return Vec::new();
    }
    let by_rank = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    if n < ids.len() {
        ids.select_nth_unstable_by(n - 1, by_rank);
        ids.truncate(n);
    }
    ids.sort_unstable_by(by_rank);
    ids.into_iter()
        .map(|i| (i, (f64::from(logits[i]) - log_sum_exp) as f32))
        .collect()
}

/// The `q`-quantile (0 < q <= 1) of `values` by nearest rank: the value at
/// rank ceil(q*n) of the sorted finite values (the bench's percentile
/// method); `None` when there is none. With fewer than 1/q values it is the
/// minimum.
pub(crate) fn low_quantile(values: &[f32], q: f64) -> Option<f32> {
    let mut v: Vec<f32> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f32::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The obvious two-pass computation in f64.
    fn naive(logits: &[f32], chosen: usize) -> (f64, f64) {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let sum: f64 = logits.iter().map(|&l| (f64::from(l) - max).exp()).sum();
        let lse = max + sum.ln();
        let mut sorted: Vec<f64> = logits.iter().map(|&l| f64::from(l)).collect();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let margin = (sorted[0] - lse).exp() - (sorted[1] - lse).exp();
        (f64::from(logits[chosen]) - lse, margin)
    }

    fn logits(n: usize, seed: u64, spread: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * spread
            })
            .collect()
    }

    #[test]
    fn one_pass_matches_the_naive_f64_reference() {
        for (n, seed, spread) in [
            (49_152, 1, 30.0),
            (262_144, 2, 40.0),
            (37, 3, 8.0),
            (2, 4, 1.0),
        ] {
            let mut l = logits(n, seed, spread);
            // A peaked distribution late in the row, so the maximum moves.
            l[n - 1] += 25.0;
            for chosen in [0, n / 2, n - 1] {
                let got = scan(&l, chosen);
                let (lp, margin) = naive(&l, chosen);
                assert!(
                    (f64::from(got.logprob) - lp).abs() <= 1e-4 * lp.abs().max(1.0),
                    "n={n} chosen={chosen}: {} vs {lp}",
                    got.logprob
                );
                assert!((f64::from(got.margin) - margin).abs() < 1e-4, "n={n}");
            }
        }
    }

    #[test]
    fn ties_and_edges() {
        let s = scan(&[0.0, 0.0], 1);
        assert!((s.logprob - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(s.margin, 0.0);
        let total: f32 = (0..3)
            .map(|t| scan(&[1.0, 2.0, 3.0], t).logprob.exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert_eq!(scan(&[1.0, 2.0], 9).logprob, f32::NEG_INFINITY);
        let one = scan(&[f32::NEG_INFINITY, 5.0, f32::NEG_INFINITY], 1);
        assert_eq!(one.logprob, 0.0);
        assert_eq!(one.margin, 1.0);
    }

    #[test]
    fn quantile_is_nearest_rank() {
        let v: Vec<f32> = (1..=20).map(|i| -(i as f32)).collect();
        // Sorted: -20 .. -1; rank ceil(0.1 * 20) = 2 -> -19.
        assert_eq!(low_quantile(&v, 0.1), Some(-19.0));
        assert_eq!(low_quantile(&[-1.0, -2.0, -3.0], 0.1), Some(-3.0));
        assert_eq!(low_quantile(&[f32::NAN], 0.1), None);
        assert_eq!(low_quantile(&[], 0.1), None);
    }

    #[test]
    fn top_logprobs_are_the_best_ranked_with_their_log_probabilities() {
        let l = [1.0, 3.0, 2.0, 3.0, -1.0];
        let scan = scan(&l, 1);
        let top = top_logprobs(&l, scan.log_sum_exp, 3);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 3, 2]);
        assert!((top[0].1 - scan.logprob).abs() < 1e-6);
        let total: f64 = (0..5)
            .map(|i| (f64::from(l[i]) - scan.log_sum_exp).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert_eq!(top_logprobs(&l, scan.log_sum_exp, 9).len(), 5);
        assert!(top_logprobs(&l, scan.log_sum_exp, 0).is_empty());
    }
}
