//! The speculative-sampling acceptance rule (contract point 16) for a
//! sampled answer's drafts: whether a drafted token is kept, and what is
//! drawn instead when it is not, so that every token still has the
//! distribution the answer's own sampler gives it.
//!
//! The drafts here are deterministic (a prompt lookup, a draft model's
//! greedy pick), so the draft distribution `q` is a point mass on the
//! drafted token `x`. The standard rule (Leviathan et al., Chen et al.)
//! keeps `x` with probability `min(1, p(x) / q(x)) = p(x)`, `p` the
//! target's final distribution at that position (after top-k, top-p and
//! temperature: what the sampler would draw from), and on rejection draws
//! from the residual `max(0, p - q)` normalised, which for a point mass is
//! `p` with `x` taken out and the rest renormalised. Then `P(x) = p(x)`
//! and `P(y) = (1 - p(x)) p(y) / (1 - p(x)) = p(y)` for every other `y`:
//! the answer's distribution is unchanged, token by token.
//!
//! Its draws come from its own seeded generator ([`Draws`]), seeded from
//! the request's seed, so a seeded request with drafts gives the same
//! answer every time (not the same answer as without drafts: the draws
//! differ, their distribution does not).
//!
//! This module must not know about llama.cpp: it takes a distribution and
//! gives a token.

/// A small seeded generator (SplitMix64): uniform draws in [0, 1).
#[derive(Debug, Clone)]
pub(super) struct Draws {
    state: u64,
}

impl Draws {
    pub(super) fn new(seed: u64) -> Self {
        // A different stream from the sampler's own seed.
        Self {
            state: seed ^ 0x5bd1_e995_9e37_79b9,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1) (53 bits).
    pub(super) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The token at this position, given the drafted `draft` and the final
/// distribution `dist` as (token, weight) pairs (weights need not sum to
/// one; they are normalised here; tokens absent have probability 0):
/// `draft` with probability `p(draft)`, else a draw from `p` without
/// `draft`. `None` when `dist` is empty or has no positive weight.
pub(super) fn accept_or_resample(
    dist: &[(i32, f64)],
    draft: i32,
    draws: &mut Draws,
) -> Option<i32> {
    let total: f64 = dist.iter().map(|&(_, w)| w.max(0.0)).sum();
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let p_draft: f64 = dist
        .iter()
        .filter(|&&(t, _)| t == draft)
        .map(|&(_, w)| w.max(0.0))
        .sum::<f64>()
        / total;
    if draws.uniform() < p_draft {
        return Some(draft);
    }
    // The residual: p without the draft, renormalised.
    let rest = total * (1.0 - p_draft);
    if rest <= 0.0 {
        return Some(draft);
    }
    let target = draws.uniform() * rest;
    let mut sum = 0.0;
    let mut last = None;
    for &(t, w) in dist {
        if t == draft || w <= 0.0 {
            continue;
        }
        sum += w;
        last = Some(t);
        if target < sum {
            return Some(t);
        }
    }
    // Rounding: the last token with weight.
    last.or(Some(draft))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts of each outcome over `n` positions with `draft` drafted.
    fn counts(dist: &[(i32, f64)], draft: i32, n: usize) -> Vec<usize> {
        let mut draws = Draws::new(7);
        let mut seen = vec![0; 8];
        for _ in 0..n {
            let t = accept_or_resample(dist, draft, &mut draws).unwrap();
            seen[t as usize] += 1;
        }
        seen
    }

    /// Pearson's chi-square of the counts against `dist` (normalised).
    fn chi_square(seen: &[usize], dist: &[(i32, f64)], n: usize) -> f64 {
        let total: f64 = dist.iter().map(|d| d.1).sum();
        dist.iter()
            .map(|&(t, w)| {
                let expected = n as f64 * w / total;
                let d = seen[t as usize] as f64 - expected;
                d * d / expected
            })
            .sum()
    }

    /// The outcomes follow `p` whatever is drafted: a likely token, an
    /// unlikely one, one `p` does not hold. The draws are seeded, so the
    /// test is deterministic; the bound is chi-square's 0.999 quantile for
    /// 3 degrees of freedom (16.27): a correct rule fails it for one seed
    /// in a thousand.
    #[test]
    fn every_token_keeps_its_probability() {
        let dist = [(0, 0.5), (1, 0.25), (2, 0.15), (3, 0.10)];
        let n = 40_000;
        for draft in [0, 2, 3, 5] {
            let seen = counts(&dist, draft, n);
            let chi = chi_square(&seen, &dist, n);
            assert!(chi < 16.27, "draft {draft}: {seen:?} chi-square {chi}");
        }
    }

    /// The same statistic catches a wrong rule (keeping every draft that
    /// `p` allows): the test has power.
    #[test]
    fn keeping_every_draft_would_fail_the_same_check() {
        let dist = [(0, 0.5), (1, 0.25), (2, 0.15), (3, 0.10)];
        let n = 40_000;
        let mut seen = vec![0; 8];
        seen[2] = n;
        assert!(chi_square(&seen, &dist, n) > 16.27);
    }

    #[test]
    fn edges() {
        let mut draws = Draws::new(1);
        assert_eq!(accept_or_resample(&[], 3, &mut draws), None);
        assert_eq!(accept_or_resample(&[(3, 0.0)], 3, &mut draws), None);
        // A certain draft is always kept; an impossible one never.
        for _ in 0..100 {
            assert_eq!(accept_or_resample(&[(3, 2.0)], 3, &mut draws), Some(3));
            assert_eq!(
                accept_or_resample(&[(3, 0.0), (4, 1.0)], 3, &mut draws),
                Some(4)
            );
        }
        let u: Vec<f64> = (0..1000).map(|_| draws.uniform()).collect();
        assert!(u.iter().all(|x| (0.0..1.0).contains(x)));
    }
}
