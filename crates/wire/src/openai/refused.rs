//! The one list of request fields no lane can honour today. A request that
//! sets one (to anything but its neutral value) is refused, never answered
//! as if it had not asked: `serve` answers 400 naming the field, a bench
//! workload line is an error (dropping the field would benchmark a
//! different request). Supporting one of them later means a typed field
//! in `ChatRequest` and taking its entry out of this list, as
//! `response_format`, `tools`, `tool_choice`, `logprobs` and
//! `top_logprobs` were (issue 24); nothing else refuses them. The legacy
//! `functions`/`function_call` stay refused: `tools` replaces them.

use super::error::FieldError;
use serde_json::{Map, Value};

/// What value of a refused field still means "not asked for".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neutral {
    /// Absent, `null`, an empty list or `"none"` (how clients say "no
    /// tools").
    Unset,
}

/// A field that is refused unless neutral.
#[derive(Debug, Clone, Copy)]
pub struct Refused {
    pub field: &'static str,
    pub neutral: Neutral,
}

const fn refused(field: &'static str, neutral: Neutral) -> Refused {
    Refused { field, neutral }
}

/// Every refused field, in the order they are checked.
pub const REFUSED: &[Refused] = &[
    refused("functions", Neutral::Unset),
    refused("function_call", Neutral::Unset),
    refused("audio", Neutral::Unset),
    refused("prediction", Neutral::Unset),
    refused("web_search_options", Neutral::Unset),
];

/// Whether `name` is in the list.
pub(crate) fn is_refused(name: &str) -> bool {
    REFUSED.iter().any(|r| r.field == name)
}

/// The first refused field `obj` sets; `at` prefixes field names.
pub(crate) fn check(obj: &Map<String, Value>, at: &str) -> Result<(), FieldError> {
    for r in REFUSED {
        let Some(v) = obj.get(r.field).filter(|v| !v.is_null()) else {
            continue;
        };
        let param = format!("{at}{}", r.field);
        let neutral = match r.neutral {
            Neutral::Unset => match v {
                Value::Array(a) => a.is_empty(),
                Value::String(s) => s == "none",
                _ => false,
            },
        };
        if !neutral {
            let message = format!("`{param}` is not supported");
            return Err(FieldError::refused(param, message));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn first(v: Value) -> Option<String> {
        check(v.as_object().unwrap(), "").err().map(|e| e.param)
    }

    #[test]
    fn neutral_values_pass_and_others_are_named() {
        assert_eq!(
            first(json!({"functions": [], "function_call": "none", "audio": null})),
            None
        );
        for (field, value) in [
            ("functions", json!([{"name": "f"}])),
            ("function_call", json!("auto")),
            ("web_search_options", json!({})),
        ] {
            assert_eq!(first(json!({ field: value })).as_deref(), Some(field));
        }
        assert!(is_refused("functions") && !is_refused("tools") && !is_refused("temperature"));
    }
}
