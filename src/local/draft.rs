//! Speculative decoding's drafts (contract point 16): the settings
//! (`--spec-type`, `--draft-max`, `--draft-min`, named as llama-server
//! names them) and their one check, n-gram prompt lookup (which tokens to
//! propose next), and the per-sequence back-off that stops proposing when
//! proposals keep failing.
//!
//! Prompt lookup, as llama.cpp's lookup decoding: the last n tokens of
//! what the sequence holds (prompt and answer so far, n from
//! [`NGRAM_MAX`] down to [`NGRAM_MIN`]) are looked for earlier in the same tokens, the
//! most recent occurrence first, and the tokens that followed it are the
//! draft. Answers that copy spans of their prompt (an extraction, a
//! rewrite, a JSON object naming the prompt's fields) repeat runs the
//! lookup finds.
//!
//! Why the back-off is eager: on a CPU a verify step's rows are not free
//! (measured on SmolLM2, one thread: a step of about 12 rows took as long
//! as 5-6 steps of one), so a draft pays only when most of it is kept.
//! A proposal starts short and doubles while it is kept whole; a step
//! that keeps less than half of its drafts is a miss, and two misses in a
//! row pause drafting (8 steps, then 16, ... 256; a good step starts the
//! pauses over). Single-token matches are not looked up: in plain text
//! they are everywhere and rarely right.
//!
//! A draft is only a guess: the decode loop (`batch`) decodes it with the
//! sequence's next token in one step and keeps the drafts the sequence's
//! own picker would have chosen, so the answer never depends on it. This
//! module must not decode, pick or count anything; it only proposes.

use serde::{Deserialize, Serialize};

/// Longest n-gram looked up (then shorter ones, down to [`NGRAM_MIN`]).
pub(super) const NGRAM_MAX: usize = 3;
/// Shortest n-gram looked up.
pub(super) const NGRAM_MIN: usize = 2;

/// Misses (steps keeping less than half of their drafts) in a row after
/// which a sequence stops drafting for a while.
const MISSES_BEFORE_PAUSE: u32 = 2;
/// Steps without drafts after the first pause; each further pause
/// doubles it, up to [`MAX_PAUSE`]. An accepted draft starts it over.
const FIRST_PAUSE: u32 = 8;
const MAX_PAUSE: u32 = 256;
/// The fewest drafts proposed after a partial acceptance (the length
/// cap then grows back, doubling, while drafts are accepted whole).
const MIN_CAP: usize = 2;
/// The most drafts a sequence's first proposal has.
const FIRST_CAP: usize = 4;

/// Whether and how the local lane drafts tokens (llama-server's
/// `--spec-type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecType {
    /// No speculation (the default).
    #[default]
    Off,
    /// n-gram prompt lookup: drafts copied from the prompt and the answer
    /// so far, for sequences that pick greedily (temperature 0); sampled
    /// sequences do not draft.
    Ngram,
}

impl SpecType {
    /// The name used by the CLI, the config file and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Ngram => "ngram",
        }
    }
}

impl std::fmt::Display for SpecType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SpecType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "ngram" => Ok(Self::Ngram),
            other => Err(format!(
                "unknown speculation type {other:?} (expected off or ngram)"
            )),
        }
    }
}

/// The most drafts one step may propose for one sequence.
pub const DRAFT_MAX_LIMIT: u32 = 128;

/// What is wrong with the speculation settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{key}`: {detail}")]
pub struct SpecSettingError {
    /// The setting, by its config key (`draft_max`, `draft_min`).
    pub key: &'static str,
    /// What is wrong.
    pub detail: String,
}

/// The one check of the speculation settings: `draft_max` in
/// 1..=[`DRAFT_MAX_LIMIT`], `draft_min` at most `draft_max`.
pub fn check_settings(draft_max: u32, draft_min: u32) -> Result<(), SpecSettingError> {
    if !(1..=DRAFT_MAX_LIMIT).contains(&draft_max) {
        return Err(SpecSettingError {
            key: "draft_max",
            detail: format!("must be 1 to {DRAFT_MAX_LIMIT}, not {draft_max}"),
        });
    }
    if draft_min > draft_max {
        return Err(SpecSettingError {
            key: "draft_min",
            detail: format!("must be at most draft_max ({draft_max}), not {draft_min}"),
        });
    }
    Ok(())
}

/// The tokens that followed the most recent earlier occurrence of the
/// last n tokens of `history` (n from [`NGRAM_MAX`] down to [`NGRAM_MIN`], the
/// longest match found wins), at most `max` of them, into `out` (cleared
/// first). Nothing when no suffix occurs earlier.
pub(super) fn lookup<T: PartialEq + Copy>(history: &[T], max: usize, out: &mut Vec<T>) {
    out.clear();
    if max == 0 {
        return;
    }
    let len = history.len();
    for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
        if len <= n {
            continue;
        }
        let suffix = &history[len - n..];
        // Earlier occurrences only: the suffix itself starts at len - n.
        let found = (0..len - n).rev().find(|&i| &history[i..i + n] == suffix);
        if let Some(i) = found {
            let from = i + n;
            let to = (from + max).min(len);
            out.extend_from_slice(&history[from..to]);
            return;
        }
    }
}

/// One sequence's drafting: when to propose, and how many at most.
#[derive(Debug, Clone)]
pub(super) struct Drafter {
    draft_max: usize,
    draft_min: usize,
    /// How many drafts the next proposal may have (it follows how many
    /// were accepted lately).
    cap: usize,
    /// Misses in a row.
    misses: u32,
    /// Steps left without drafting, and the next pause's length.
    paused: u32,
    next_pause: u32,
}

impl Drafter {
    pub(super) fn new(draft_max: u32, draft_min: u32) -> Self {
        let draft_max = draft_max.max(1) as usize;
        Self {
            draft_max,
            draft_min: draft_min as usize,
            cap: FIRST_CAP.min(draft_max),
            misses: 0,
            paused: 0,
            next_pause: FIRST_PAUSE,
        }
    }

    /// The drafts to verify after the sequence's `history` (prompt,
    /// answer so far and its next token), at most `room` of them, into
    /// `out`; none while paused or when fewer than `draft_min` are found.
    pub(super) fn propose<T: PartialEq + Copy>(
        &mut self,
        history: &[T],
        room: usize,
        out: &mut Vec<T>,
    ) {
        out.clear();
        if self.paused > 0 {
            self.paused -= 1;
            return;
        }
        lookup(history, self.cap.min(room), out);
        if out.len() < self.draft_min.max(1) {
            out.clear();
        }
    }

    /// How a proposal of `drafted` tokens went: `accepted` of them were
    /// the sequence's own picks.
    pub(super) fn verified(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.cap = if accepted == drafted {
            (self.cap * 2).min(self.draft_max)
        } else {
            (2 * accepted).clamp(MIN_CAP, self.draft_max)
        };
        if 2 * accepted < drafted {
            self.misses += 1;
            if self.misses >= MISSES_BEFORE_PAUSE {
                self.misses = 0;
                self.paused = self.next_pause;
                self.next_pause = (self.next_pause * 2).min(MAX_PAUSE);
            }
            return;
        }
        self.misses = 0;
        self.next_pause = FIRST_PAUSE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(history: &[u32], max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        lookup(history, max, &mut out);
        out
    }

    #[test]
    fn the_longest_suffix_found_earlier_gives_what_followed_it() {
        // "1 2 3" occurred before, followed by 4 5 6.
        assert_eq!(
            look(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 8),
            [4, 5, 6, 9, 1, 2, 3]
        );
        assert_eq!(look(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 2), [4, 5]);
    }

    #[test]
    fn the_most_recent_occurrence_wins() {
        // "7 8" twice before: the later one was followed by 2.
        assert_eq!(look(&[7, 8, 1, 0, 7, 8, 2, 0, 7, 8], 1), [2]);
    }

    #[test]
    fn a_longer_match_beats_a_more_recent_shorter_one() {
        // "5 6 7" occurs at the start (then 1); "6 7" alone later (then 2).
        assert_eq!(look(&[5, 6, 7, 1, 9, 6, 7, 2, 4, 5, 6, 7], 1), [1]);
    }

    #[test]
    fn shorter_suffixes_are_tried_down_to_two_tokens() {
        assert_eq!(look(&[4, 5, 9, 1, 3, 4, 5], 3), [9, 1, 3]);
        // One token alone is not looked up.
        assert!(look(&[4, 9, 1, 2, 4], 3).is_empty());
    }

    #[test]
    fn nothing_without_an_earlier_occurrence() {
        assert!(look(&[1, 2, 3, 4], 5).is_empty());
        assert!(look(&[], 5).is_empty());
        assert!(look(&[1], 5).is_empty());
        assert!(look(&[1, 2, 1, 2], 0).is_empty());
    }

    #[test]
    fn a_run_proposes_its_own_continuation() {
        // A repeated token: the earlier occurrence is followed by itself.
        assert_eq!(look(&[3, 3, 3, 3], 4), [3]);
        assert_eq!(look(&[3, 3, 3], 4), [3]);
        assert_eq!(look(&[1, 2, 1, 2, 1, 2], 4), [1, 2]);
    }

    #[test]
    fn draft_min_and_room_bound_a_proposal() {
        let history = [1, 2, 3, 4, 5, 1, 2];
        let mut out = Vec::new();
        let mut d = Drafter::new(16, 0);
        d.propose(&history, 2, &mut out);
        assert_eq!(out, [3, 4]);
        d.propose(&history, 16, &mut out);
        assert_eq!(out, [3, 4, 5, 1], "the first proposals are short");
        let mut d = Drafter::new(16, 4);
        d.propose(&history, 16, &mut out);
        assert_eq!(out, [3, 4, 5, 1]);
        d.propose(&history, 3, &mut out);
        assert!(out.is_empty(), "fewer than draft_min");
    }

    #[test]
    fn misses_pause_drafting_for_longer_each_time() {
        let history = [1, 2, 3, 1, 2];
        let mut out = Vec::new();
        let mut d = Drafter::new(16, 0);
        let mut pauses = Vec::new();
        for _ in 0..3 {
            for _ in 0..MISSES_BEFORE_PAUSE {
                d.propose(&history, 16, &mut out);
                assert!(!out.is_empty());
                d.verified(out.len(), 0);
            }
            let mut paused = 0;
            loop {
                d.propose(&history, 16, &mut out);
                if !out.is_empty() {
                    break;
                }
                paused += 1;
            }
            d.verified(out.len(), 0);
            // The proposal after the pause was a miss too: count it in
            // the next round.
            d.misses = 0;
            pauses.push(paused);
        }
        assert_eq!(pauses, [FIRST_PAUSE, FIRST_PAUSE * 2, FIRST_PAUSE * 4]);
        // An accepted draft starts the pauses over.
        d.verified(2, 1);
        assert_eq!(d.next_pause, FIRST_PAUSE);
    }

    #[test]
    fn the_cap_follows_acceptance() {
        let mut d = Drafter::new(16, 0);
        assert_eq!(d.cap, FIRST_CAP);
        d.verified(4, 4);
        assert_eq!(d.cap, 8);
        d.verified(8, 8);
        assert_eq!(d.cap, 16);
        d.verified(16, 16);
        assert_eq!(d.cap, 16);
        d.verified(16, 3);
        assert_eq!(d.cap, 6);
        d.verified(6, 0);
        assert_eq!(d.cap, MIN_CAP);
    }

    #[test]
    fn keeping_less_than_half_is_a_miss() {
        let mut d = Drafter::new(16, 0);
        d.verified(8, 3);
        d.verified(8, 3);
        assert_eq!(d.paused, FIRST_PAUSE, "two misses pause");
        let mut d = Drafter::new(16, 0);
        d.verified(8, 3);
        d.verified(8, 4);
        d.verified(8, 3);
        assert_eq!(d.paused, 0, "half kept is not a miss and resets the count");
    }

    #[test]
    fn settings_are_checked() {
        assert!(check_settings(16, 0).is_ok());
        assert!(check_settings(1, 1).is_ok());
        assert_eq!(check_settings(0, 0).unwrap_err().key, "draft_max");
        assert_eq!(
            check_settings(DRAFT_MAX_LIMIT + 1, 0).unwrap_err().key,
            "draft_max"
        );
        assert_eq!(check_settings(4, 5).unwrap_err().key, "draft_min");
        assert_eq!("ngram".parse::<SpecType>(), Ok(SpecType::Ngram));
        assert_eq!("off".parse::<SpecType>(), Ok(SpecType::Off));
        assert!("draft".parse::<SpecType>().is_err());
    }
}
