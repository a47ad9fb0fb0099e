//! What an answer says, and what several answers to one request agree on.
//!
//! - [`AnswerKind::extract`]: the answer a reply gives, as a key that equal
//!   answers share: the final number (GSM8K style, compared as a value),
//!   the multiple-choice letter, or the normalised text.
//! - [`majority`]: the consensus of several replies (self-consistency,
//!   Wang et al. 2023): the most frequent extracted answer, the first reply
//!   that gives it, and the share of replies that agree with it.
//!
//! The bench's graders (`bench::grade`) read answers with the same
//! functions, so a sample's vote and its grade never disagree about what
//! it said. Pure functions of strings: this module must not run anything
//! nor know about lanes.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How the answer is read out of a reply, for a vote between samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    /// The final number: after the last `####` when there is one, else the
    /// last number in the text; `1,234`, `$5`, `2.50`, `5%` read as numbers
    /// and compared as values (`18`, `18.0` and `$18.00` agree).
    Number,
    /// The multiple-choice letter picked (A to H): `B`, `(B)`, `Answer: B`,
    /// "the answer is (C)".
    Choice,
    /// The whole reply, lower-cased, whitespace collapsed, surrounding
    /// quotes, brackets and final punctuation removed.
    #[default]
    Text,
}

impl AnswerKind {
    /// Every kind, in documentation order.
    pub const ALL: [AnswerKind; 3] = [AnswerKind::Number, AnswerKind::Choice, AnswerKind::Text];

    /// The snake-case name (`number`).
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerKind::Number => "number",
            AnswerKind::Choice => "choice",
            AnswerKind::Text => "text",
        }
    }

    /// The answer `text` gives, as a key that equal answers share (a
    /// number's value printed the shortest way, the letter, or the
    /// normalised text); `None` when it gives none (no number, no letter,
    /// blank).
    pub fn extract(self, text: &str) -> Option<String> {
        match self {
            AnswerKind::Number => final_number(text).map(number_key),
            AnswerKind::Choice => picked_letter(text).map(String::from),
            AnswerKind::Text => Some(normalise(text)).filter(|t| !t.is_empty()),
        }
    }
}

impl fmt::Display for AnswerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`AnswerKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown answer kind `{0}`; expected number, choice or text")]
pub struct UnknownAnswerKind(pub String);

impl FromStr for AnswerKind {
    type Err = UnknownAnswerKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase();
        AnswerKind::ALL
            .into_iter()
            .find(|k| k.as_str() == norm)
            .ok_or_else(|| UnknownAnswerKind(s.to_string()))
    }
}

/// What several replies to one request agree on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    /// The majority answer (its key); `None` when no reply gave one.
    pub answer: Option<String>,
    /// The first reply giving the majority answer (0 when none did): the
    /// reply that stands for the consensus.
    pub chosen: usize,
    /// Replies giving the majority answer.
    pub agreeing: usize,
    /// Replies in all (those without an answer included).
    pub samples: usize,
}

impl Agreement {
    /// The share of replies that agree with the majority, in `[0, 1]`
    /// (0 without replies or without any answer).
    pub fn share(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.agreeing as f64 / self.samples as f64
        }
    }
}

/// The majority answer of `replies` read as `kind`. Ties go to the answer
/// given first, so the result depends only on the replies and their order.
/// Replies without an answer vote for nothing but count in the share.
pub fn majority<S: AsRef<str>>(kind: AnswerKind, replies: &[S]) -> Agreement {
    // (answer, first reply giving it, votes), in order of first appearance.
    let mut tally: Vec<(String, usize, usize)> = Vec::new();
    for (i, reply) in replies.iter().enumerate() {
        let Some(answer) = kind.extract(reply.as_ref()) else {
            continue;
        };
        match tally.iter_mut().find(|(a, _, _)| *a == answer) {
            Some(entry) => entry.2 += 1,
            None => tally.push((answer, i, 1)),
        }
    }
    // The first of the largest: `max_by_key` keeps the last maximum, so
    // fold by hand.
    let best = tally
        .into_iter()
        .fold(None::<(String, usize, usize)>, |best, e| match best {
            Some(b) if b.2 >= e.2 => Some(b),
            _ => Some(e),
        });
    match best {
        Some((answer, chosen, agreeing)) => Agreement {
            answer: Some(answer),
            chosen,
            agreeing,
            samples: replies.len(),
        },
        None => Agreement {
            answer: None,
            chosen: 0,
            agreeing: 0,
            samples: replies.len(),
        },
    }
}

/// A number as a key: integers without a fraction, others the shortest
/// way that reads back the same value; `-0` is `0`.
fn number_key(v: f64) -> String {
    let v = if v == 0.0 { 0.0 } else { v };
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Lower case, whitespace collapsed, surrounding quotes/brackets and final
/// punctuation stripped.
pub fn normalise(text: &str) -> String {
    let lower = text.to_lowercase();
    let collapsed = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    let strip: &[char] = &[
        '"', '\'', '`', '(', ')', '[', ']', '{', '}', '*', '.', ',', ';', ':', '!', '?', ' ',
        '\u{201c}', '\u{201d}', '\u{2018}', '\u{2019}',
    ];
    collapsed.trim_matches(strip).to_string()
}

/// The final number of `text`: after the last `####` if present, else the
/// last number anywhere. Commas between digit groups, a leading `$` or a
/// trailing `%` or period do not stop a number from being read.
pub fn final_number(text: &str) -> Option<f64> {
    let tail = match text.rfind("####") {
        Some(at) => &text[at + 4..],
        None => text,
    };
    let numbers = numbers_in(tail);
    // After `####` the first number is the answer; elsewhere the last.
    if text.contains("####") {
        numbers.first().copied()
    } else {
        numbers.last().copied()
    }
}

/// Every number in `text`, in order.
fn numbers_in(text: &str) -> Vec<f64> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_digit = chars[i].is_ascii_digit();
        let starts_signed = (chars[i] == '-' || chars[i] == '.')
            && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit())
            && (i == 0 || !chars[i - 1].is_ascii_alphanumeric());
        if !(starts_digit || starts_signed) {
            i += 1;
            continue;
        }
        let mut s = String::new();
        if chars[i] == '-' {
            s.push('-');
            i += 1;
        }
        let mut seen_point = false;
        while i < chars.len() {
            let c = chars[i];
            let next_digit = chars.get(i + 1).is_some_and(|c| c.is_ascii_digit());
            if c.is_ascii_digit() {
                s.push(c);
            } else if c == ',' && next_digit && !seen_point {
                // A thousands separator: `1,234`.
            } else if c == '.' && next_digit && !seen_point {
                seen_point = true;
                s.push('.');
            } else {
                break;
            }
            i += 1;
        }
        if let Ok(v) = s.parse::<f64>() {
            out.push(v);
        }
    }
    out
}

/// A reference letter: one letter A-H, optionally in brackets or followed
/// by punctuation.
pub fn reference_letter(reference: &str) -> Option<char> {
    let t = reference
        .trim()
        .trim_matches(|c: char| "()[]. :".contains(c));
    let mut it = t.chars();
    match (it.next(), it.next()) {
        (Some(c), None) if ('A'..='H').contains(&c.to_ascii_uppercase()) => {
            Some(c.to_ascii_uppercase())
        }
        _ => None,
    }
}

/// The letter a reply picks: the whole reply when it is one letter; else
/// after the last "answer", the first standalone capital A-H; else the
/// first one anywhere (so the pronoun "I" and the article "a" never count).
pub fn picked_letter(answer: &str) -> Option<char> {
    if let Some(c) = reference_letter(answer) {
        return Some(c);
    }
    let lower = answer.to_lowercase();
    let scope = match lower.rfind("answer") {
        // `to_lowercase` can change byte lengths; fall back to the whole
        // reply when the offset is not a boundary of the original.
        Some(at) if answer.is_char_boundary(at + "answer".len()) => &answer[at + "answer".len()..],
        _ => answer,
    };
    let letters = |text: &str| {
        text.split(|c: char| !c.is_alphanumeric()).find_map(|w| {
            let mut it = w.chars();
            match (it.next(), it.next()) {
                (Some(c), None) if ('A'..='H').contains(&c) => Some(c),
                _ => None,
            }
        })
    };
    letters(scope).or_else(|| letters(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_keys_by_value() {
        let k = AnswerKind::Number;
        assert_eq!(k.extract("So 9 * $2 = $18.00."), Some("18".into()));
        assert_eq!(k.extract("The answer is 18"), k.extract("#### 18.0"));
        assert_eq!(k.extract("It takes 2.50 hours."), Some("2.5".into()));
        assert_eq!(k.extract("a change of -3"), Some("-3".into()));
        assert_eq!(k.extract("$1,234,567 in all"), Some("1234567".into()));
        assert_eq!(k.extract("-0"), Some("0".into()));
        assert_eq!(k.extract("I do not know."), None);
    }

    #[test]
    fn choices_and_text_are_keys_too() {
        assert_eq!(
            AnswerKind::Choice.extract("I think the answer is (C)."),
            Some("C".into())
        );
        assert_eq!(AnswerKind::Choice.extract("no letter here"), None);
        assert_eq!(
            AnswerKind::Text.extract("  \"Paris.\" "),
            AnswerKind::Text.extract("paris")
        );
        assert_eq!(AnswerKind::Text.extract("  ... "), None);
        for k in AnswerKind::ALL {
            assert_eq!(k.as_str().parse::<AnswerKind>(), Ok(k));
        }
        assert!("letters".parse::<AnswerKind>().is_err());
    }

    #[test]
    fn the_majority_wins_and_ties_go_to_the_first_answer() {
        let a = majority(
            AnswerKind::Number,
            &["so 7", "the answer is 12", "#### 12", "no idea", "12.0"],
        );
        assert_eq!(a.answer.as_deref(), Some("12"));
        assert_eq!((a.chosen, a.agreeing, a.samples), (1, 3, 5));
        assert!((a.share() - 0.6).abs() < 1e-12);
        // 2 against 2: the answer given first.
        let t = majority(AnswerKind::Number, &["9", "4", "4", "9"]);
        assert_eq!(
            (t.answer.as_deref(), t.chosen, t.agreeing),
            (Some("9"), 0, 2)
        );
        // Nobody answers: no majority, share 0, the first reply stands.
        let none = majority(AnswerKind::Number, &["hmm", "well"]);
        assert_eq!(
            (none.answer.clone(), none.chosen, none.share()),
            (None, 0, 0.0)
        );
        assert_eq!(majority::<&str>(AnswerKind::Text, &[]).share(), 0.0);
        // One reply agrees with itself.
        assert_eq!(majority(AnswerKind::Choice, &["B"]).share(), 1.0);
    }

    #[test]
    fn a_lower_cased_answer_word_never_splits_a_character() {
        // 'İ' lower-cases to two characters (3 bytes for 2): the end of
        // "answer" in the lower-cased text falls inside the original's 'é'.
        assert_eq!(picked_letter("İİİ answer: é B"), Some('B'));
    }
}
