//! The built-in arbitration rule, used when no arbiter is configured and as
//! the documented default when a user arbiter panics, answers out of range
//! or does not answer by the deadline. Pure function of its input; it must
//! not know which lane is which.

use super::callbacks::Scored;
use std::cmp::Ordering;

/// The built-in rule: the highest score wins; a scored candidate beats an
/// unscored one; ties (and all-unscored) go to the candidate that finished
/// first. `None` only for an empty slice.
pub fn pick_highest(candidates: &[Scored]) -> Option<usize> {
    (0..candidates.len()).min_by(|&a, &b| {
        let (ca, cb) = (&candidates[a], &candidates[b]);
        let sa = ca.score.as_ref().map(|s| s.value).filter(|v| v.is_finite());
        let sb = cb.score.as_ref().map(|s| s.value).filter(|v| v.is_finite());
        // Higher score first: compare b to a.
        let by_score = match (sa, sb) {
            (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_score.then(ca.finished_after.cmp(&cb.finished_after))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::backend::Candidate;
    use crate::harness::callbacks::Score;
    use crate::lane::{FinishReason, Lane};
    use std::time::Duration;

    fn scored(lane: Lane, score: Option<f64>, ms: u64) -> Scored {
        Scored {
            lane,
            candidate: Candidate::new("x", FinishReason::Stop),
            score: score.map(Score::new),
            finished_after: Duration::from_millis(ms),
        }
    }

    #[test]
    fn highest_score_then_earliest() {
        let c = [
            scored(Lane::Local, Some(0.2), 1),
            scored(Lane::Cloud, Some(0.9), 5),
        ];
        assert_eq!(pick_highest(&c), Some(1));
        let c = [
            scored(Lane::Local, Some(0.5), 9),
            scored(Lane::Cloud, Some(0.5), 5),
        ];
        assert_eq!(pick_highest(&c), Some(1));
        let c = [
            scored(Lane::Local, None, 1),
            scored(Lane::Cloud, Some(0.0), 5),
        ];
        assert_eq!(pick_highest(&c), Some(1));
        let c = [scored(Lane::Local, None, 7), scored(Lane::Cloud, None, 5)];
        assert_eq!(pick_highest(&c), Some(1));
        assert_eq!(pick_highest(&[]), None);
    }
}
