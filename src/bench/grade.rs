//! Graders: whether one answer is right, given a workload item's reference
//! and how it is graded ([`Grader`]). Pure functions of two strings; this
//! module must not run anything nor know about lanes. Answers are read by
//! `crate::answer`, as the local lane's vote between samples reads them
//! ([`Grader::answer_kind`]).
//!
//! | grader | the answer is right when |
//! |---|---|
//! | `contains` (default) | it contains the reference (case-insensitive, the reference trimmed) |
//! | `exact` | it equals the reference once both are normalised: lower case, Unicode whitespace collapsed, surrounding quotes, brackets and final punctuation removed |
//! | `number` | the final number in the answer equals the reference number (GSM8K style): after the last `####` when there is one, else the last number in the text; `1,234`, `$5`, `-3`, `2.50`, a trailing period and `5%` are read as numbers |
//! | `choice` | the letter it picks (`B`, `(B)`, `B)`, `B.`, `Answer: B`, `the answer is (B)`) is the reference letter |
//! | `regex` | the regular expression (the reference) matches somewhere in the answer |
//!
//! Decisions a user may want to know: `number` compares values (so `18`,
//! `18.0` and `$18.00` are all 18) with a relative tolerance of 1e-9; a
//! reply with no number is wrong. `choice` accepts letters A to H (so the pronoun "I" is never read as a choice); when
//! the reply says "answer" the letter after the last "answer" counts, else
//! the first standalone capital letter. A lower-case letter counts only
//! when it is the whole reply (so the article "a" is never read as a
//! choice).

use crate::answer::{final_number, normalise, picked_letter, reference_letter};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How an item's answer is graded (the workload's `grader` field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grader {
    /// The answer contains the reference (case-insensitive).
    #[default]
    Contains,
    /// The normalised answer equals the normalised reference.
    Exact,
    /// The final number in the answer equals the reference number.
    Number,
    /// The multiple-choice letter picked is the reference letter.
    Choice,
    /// The reference, a regular expression, matches the answer.
    Regex,
}

impl Grader {
    /// Every grader, in documentation order.
    pub const ALL: [Grader; 5] = [
        Grader::Contains,
        Grader::Exact,
        Grader::Number,
        Grader::Choice,
        Grader::Regex,
    ];

    /// The name used in workloads.
    pub fn as_str(self) -> &'static str {
        match self {
            Grader::Contains => "contains",
            Grader::Exact => "exact",
            Grader::Number => "number",
            Grader::Choice => "choice",
            Grader::Regex => "regex",
        }
    }

    /// How the local lane reads this grader's answers when several samples
    /// vote (self-consistency): `number` and `choice` by their own kind,
    /// the others by the normalised text.
    pub fn answer_kind(self) -> crate::answer::AnswerKind {
        use crate::answer::AnswerKind;
        match self {
            Grader::Number => AnswerKind::Number,
            Grader::Choice => AnswerKind::Choice,
            Grader::Contains | Grader::Exact | Grader::Regex => AnswerKind::Text,
        }
    }

    /// Checks that `reference` can be graded this way (a number for
    /// `number`, a letter for `choice`, a valid pattern for `regex`).
    pub fn check_reference(self, reference: &str) -> Result<(), String> {
        match self {
            Grader::Contains | Grader::Exact if reference.trim().is_empty() => {
                Err("the expected answer is blank".into())
            }
            Grader::Number if final_number(reference).is_none() => Err(format!(
                "grader `number` needs a number as the expected answer, got `{reference}`"
            )),
            Grader::Choice if reference_letter(reference).is_none() => Err(format!(
                "grader `choice` needs one letter A-H as the expected answer, got `{reference}`"
            )),
            Grader::Regex => regex::Regex::new(reference)
                .map(drop)
                .map_err(|e| format!("grader `regex`: invalid pattern: {e}")),
            _ => Ok(()),
        }
    }

    /// Whether `answer` is right against `reference`.
    pub fn grade(self, reference: &str, answer: &str) -> bool {
        match self {
            Grader::Contains => answer
                .to_lowercase()
                .contains(&reference.trim().to_lowercase()),
            Grader::Exact => {
                let want = normalise(reference);
                !want.is_empty() && normalise(answer) == want
            }
            Grader::Number => match (final_number(reference), final_number(answer)) {
                (Some(want), Some(got)) => {
                    (want - got).abs() <= 1e-9 * want.abs().max(got.abs()).max(1.0)
                }
                _ => false,
            },
            Grader::Choice => match (reference_letter(reference), picked_letter(answer)) {
                (Some(want), Some(got)) => want == got,
                _ => false,
            },
            Grader::Regex => regex::Regex::new(reference).is_ok_and(|re| re.is_match(answer)),
        }
    }
}

impl fmt::Display for Grader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Grader {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        Grader::ALL
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| {
                format!("unknown grader `{s}`; expected contains, exact, number, choice or regex")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(grader: Grader, reference: &str, answer: &str) -> bool {
        grader.check_reference(reference).expect("valid reference");
        grader.grade(reference, answer)
    }

    #[test]
    fn contains_is_case_insensitive() {
        assert!(g(Grader::Contains, " Paris ", "The capital is paris."));
        assert!(!g(Grader::Contains, "Paris", "It is Lyon."));
    }

    #[test]
    fn exact_normalises_both_sides() {
        assert!(g(Grader::Exact, "Paris", "  \"paris.\" "));
        assert!(g(Grader::Exact, "New  York", "new york!"));
        assert!(!g(Grader::Exact, "Paris", "Paris, France"));
        assert!(!g(Grader::Exact, "Paris", "The answer is Paris."));
        assert!(Grader::Exact.check_reference("  ").is_err());
    }

    #[test]
    fn number_reads_the_final_number_gsm8k_style() {
        assert!(g(Grader::Number, "18", "She makes 9 * $2 = $18 every day."));
        assert!(g(
            Grader::Number,
            "70000",
            "So he made a profit of $70,000."
        ));
        assert!(g(
            Grader::Number,
            "18",
            "16 - 3 - 4 = 9\n9 * 2 = 18\n#### 18"
        ));
        assert!(g(
            Grader::Number,
            "#### 18",
            "... #### 18.00 dollars, not 7"
        ));
        assert!(g(Grader::Number, "-3", "The change is -3."));
        assert!(g(Grader::Number, "2.5", "It takes 2.50 hours."));
        assert!(g(Grader::Number, "5", "The answer is 5%."));
        assert!(g(Grader::Number, "1234567", "1,234,567"));
        // The last number counts, not the first.
        assert!(!g(Grader::Number, "18", "18 eggs, so 9 * 2 = 20"));
        assert!(!g(Grader::Number, "18", "I do not know."));
        assert!(!g(Grader::Number, "3", "#### 4 (not 3)"));
        // A hyphen inside a word is not a sign.
        assert!(g(Grader::Number, "7", "a 3-legged stool has 7"));
        assert!(Grader::Number.check_reference("eighteen").is_err());
    }

    #[test]
    fn choice_finds_the_picked_letter() {
        assert!(g(Grader::Choice, "B", "B"));
        assert!(g(Grader::Choice, "(B)", "b"));
        assert!(g(Grader::Choice, "B", "(B) because the sky is blue"));
        assert!(g(Grader::Choice, "C", "I think the answer is (C)."));
        assert!(g(Grader::Choice, "D", "A is wrong and so is B. Answer: D"));
        assert!(!g(Grader::Choice, "B", "A) the first one"));
        assert!(!g(Grader::Choice, "B", "a reply with no letter picked"));
        assert!(Grader::Choice.check_reference("BC").is_err());
        assert!(Grader::Choice.check_reference("Z").is_err());
    }

    #[test]
    fn regex_matches_anywhere() {
        assert!(g(Grader::Regex, r"(?i)\bparis\b", "It is PARIS."));
        assert!(!g(Grader::Regex, r"^\d+$", "42 apples"));
        assert!(Grader::Regex.check_reference("(unclosed").is_err());
    }

    #[test]
    fn names_round_trip() {
        for gr in Grader::ALL {
            assert_eq!(gr.as_str().parse::<Grader>(), Ok(gr));
        }
        assert!("fuzzy".parse::<Grader>().is_err());
    }
}
