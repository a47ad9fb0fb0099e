//! Graders: whether one answer is right, given a workload item's reference
//! and how it is graded ([`Grader`]). Pure functions of two strings; this
//! module must not run anything nor know about lanes. Answers are read by
//! `edgecloud_core::answer`, as the local lane's vote between samples reads them
//! ([`Grader::answer_kind`]).
//!
//! | grader | the answer is right when |
//! |---|---|
//! | `contains` (default) | it contains the reference (case-insensitive, the reference trimmed) |
//! | `exact` | it equals the reference once both are normalised: lower case, Unicode whitespace collapsed, surrounding quotes, brackets and final punctuation removed |
//! | `number` | the final number in the answer equals the reference number (GSM8K style): after the last `####` when there is one, else the last number in the text; `1,234`, `$5`, `-3`, `2.50`, a trailing period and `5%` are read as numbers |
//! | `choice` | the letter it picks (`B`, `(B)`, `B)`, `B.`, `Answer: B`, `the answer is (B)`) is the reference letter |
//! | `regex` | the regular expression (the reference) matches somewhere in the answer |
//! | `json_valid` | the answer (trimmed) is JSON; the reference is not looked at |
//! | `json_schema` | the answer is JSON that meets the reference, a JSON schema (the subset of [`edgecloud_core::structured`]) |
//! | `tool_call` | the answer calls the reference's function with the reference's arguments: the reference is `{"name": ..., "arguments": {...}}`; an answer that calls tools is graded as its first call in that shape ([`answer_text`]); arguments are equal when they have the same keys and equal values (strings without regard to case or surrounding space, numbers by value) |
//!
//! Decisions a user may want to know: `number` compares values (so `18`,
//! `18.0` and `$18.00` are all 18) with a relative tolerance of 1e-9; a
//! reply with no number is wrong. `choice` accepts letters A to H (so the pronoun "I" is never read as a choice); when
//! the reply says "answer" the letter after the last "answer" counts, else
//! the first standalone capital letter. A lower-case letter counts only
//! when it is the whole reply (so the article "a" is never read as a
//! choice).

use edgecloud_core::answer::{final_number, normalise, picked_letter, reference_letter};
use serde::{Deserialize, Serialize};
use serde_json::Value;
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
    /// The answer is JSON.
    JsonValid,
    /// The answer is JSON that meets the reference schema.
    JsonSchema,
    /// The answer calls the reference function with its arguments.
    ToolCall,
}

impl Grader {
    /// Every grader, in documentation order.
    pub const ALL: [Grader; 8] = [
        Grader::Contains,
        Grader::Exact,
        Grader::Number,
        Grader::Choice,
        Grader::Regex,
        Grader::JsonValid,
        Grader::JsonSchema,
        Grader::ToolCall,
    ];

    /// The name used in workloads.
    pub fn as_str(self) -> &'static str {
        match self {
            Grader::Contains => "contains",
            Grader::Exact => "exact",
            Grader::Number => "number",
            Grader::Choice => "choice",
            Grader::Regex => "regex",
            Grader::JsonValid => "json_valid",
            Grader::JsonSchema => "json_schema",
            Grader::ToolCall => "tool_call",
        }
    }

    /// How the local lane reads this grader's answers when several samples
    /// vote (self-consistency): `number` and `choice` by their own kind,
    /// the others by the normalised text.
    pub fn answer_kind(self) -> edgecloud_core::answer::AnswerKind {
        use edgecloud_core::answer::AnswerKind;
        match self {
            Grader::Number => AnswerKind::Number,
            Grader::Choice => AnswerKind::Choice,
            // JSON and calls vote on their normalised text too (the same
            // call written the same way agrees).
            Grader::Contains
            | Grader::Exact
            | Grader::Regex
            | Grader::JsonValid
            | Grader::JsonSchema
            | Grader::ToolCall => AnswerKind::Text,
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
            Grader::JsonSchema => serde_json::from_str::<Value>(reference)
                .map_err(|e| format!("grader `json_schema` needs a JSON schema: {e}"))
                .and_then(|s| {
                    edgecloud_core::structured::check_schema(&s)
                        .map_err(|e| format!("grader `json_schema`: {e}"))
                }),
            Grader::ToolCall => match serde_json::from_str::<Value>(reference) {
                Ok(v) if v.get("name").is_some_and(Value::is_string) => Ok(()),
                _ => Err(format!(
                    "grader `tool_call` needs {{\"name\": ..., \"arguments\": {{...}}}} as the \
                     expected answer, got `{reference}`"
                )),
            },
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
            Grader::JsonValid => serde_json::from_str::<Value>(answer.trim()).is_ok(),
            Grader::JsonSchema => {
                match (
                    serde_json::from_str::<Value>(reference),
                    serde_json::from_str::<Value>(answer.trim()),
                ) {
                    (Ok(schema), Ok(value)) => {
                        edgecloud_core::structured::validate(&schema, &value).is_ok()
                    }
                    _ => false,
                }
            }
            Grader::ToolCall => tool_call_matches(reference, answer),
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
                format!(
                    "unknown grader `{s}`; expected contains, exact, number, choice, regex, \
                     json_valid, json_schema or tool_call"
                )
            })
    }
}

/// The text an answer is graded as: its text, or, when it calls tools, its
/// first call as `{"name": ..., "arguments": {...}}` (what `tool_call`
/// compares with its reference).
pub fn answer_text(text: &str, tool_calls: &[edgecloud_core::tools::ToolCall]) -> String {
    match tool_calls.first() {
        None => text.to_string(),
        Some(c) => {
            let args = serde_json::from_str::<Value>(&c.function.arguments)
                .unwrap_or_else(|_| Value::String(c.function.arguments.clone()));
            serde_json::json!({"name": c.function.name, "arguments": args}).to_string()
        }
    }
}

/// Whether `answer` (a call as [`answer_text`] writes it) is the call
/// `reference` describes.
fn tool_call_matches(reference: &str, answer: &str) -> bool {
    let (Ok(want), Ok(got)) = (
        serde_json::from_str::<Value>(reference),
        serde_json::from_str::<Value>(answer.trim()),
    ) else {
        return false;
    };
    let empty = Value::Object(serde_json::Map::new());
    let args = |v: &Value| v.get("arguments").cloned().unwrap_or_else(|| empty.clone());
    want.get("name").is_some()
        && want.get("name") == got.get("name")
        && loosely_equal(&args(&want), &args(&got))
}

/// JSON equality with strings compared without regard to case or
/// surrounding space and numbers by value.
fn loosely_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.trim().to_lowercase() == y.trim().to_lowercase(),
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| loosely_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| loosely_equal(v, w)))
        }
        _ => a == b,
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

    #[test]
    fn structured_graders() {
        use edgecloud_core::tools::ToolCall;
        assert!(Grader::JsonValid.grade("", r#" {"a": 1} "#));
        assert!(!Grader::JsonValid.grade("", "Sure: {"));
        let schema =
            r#"{"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}"#;
        assert!(Grader::JsonSchema.check_reference(schema).is_ok());
        assert!(Grader::JsonSchema
            .check_reference(r#"{"pattern": "x"}"#)
            .is_err());
        assert!(Grader::JsonSchema.grade(schema, r#"{"n": 3}"#));
        assert!(!Grader::JsonSchema.grade(schema, r#"{"n": "3"}"#));
        let want = r#"{"name": "convert", "arguments": {"amount": 12.5, "to": "EUR"}}"#;
        assert!(Grader::ToolCall.check_reference(want).is_ok());
        assert!(Grader::ToolCall.check_reference("convert").is_err());
        let call =
            |args: serde_json::Value| answer_text("", &[ToolCall::new("c", "convert", &args)]);
        assert!(Grader::ToolCall.grade(
            want,
            &call(serde_json::json!({"amount": 12.50, "to": " eur"}))
        ));
        for wrong in [
            call(serde_json::json!({"amount": 12, "to": "EUR"})),
            call(serde_json::json!({"amount": 12.5})),
            call(serde_json::json!({"amount": 12.5, "to": "EUR", "x": 1})),
            answer_text("convert 12.5 to EUR", &[]),
        ] {
            assert!(!Grader::ToolCall.grade(want, &wrong), "{wrong}");
        }
        assert_eq!(
            answer_text("", &[ToolCall::new("c", "f", &serde_json::json!({}))]),
            r#"{"arguments":{},"name":"f"}"#
        );
    }
}
