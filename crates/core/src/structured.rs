//! Structured answers (issue 24): what a request says its answer must be
//! ([`ResponseFormat`], carried on [`Sampling`](crate::Sampling) so it
//! flows with the other generation settings from the caller to every
//! lane), the JSON-schema subset edgecloud supports ([`check_schema`]) and
//! the validator that says whether an answer meets it ([`validate`]).
//!
//! The supported subset is what the local lane's grammar (llama.cpp's
//! `json_schema_to_grammar`) enforces *and* what [`validate`] checks, so
//! that a schema is never silently unconstrained: `type` (one name or a
//! list), `properties`, `required`, `additionalProperties` (`false`, `true`
//! or a schema), `items`, `enum`, `const`, `minItems`/`maxItems`,
//! `minLength`/`maxLength`, and the annotations `title`, `description`,
//! `$schema`, `$id`, `default`, `examples`. Any other keyword is refused
//! naming it (serve answers 400). Plain data and pure functions: no lane,
//! grammar or HTTP knowledge lives here.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the answer must be, spelt as OpenAI's `response_format` (the
/// `{"type": "text"}` default is `None` on [`Sampling`](crate::Sampling)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON valid against a schema.
    JsonSchema {
        /// The schema and its name.
        json_schema: JsonSchema,
    },
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchema {
    /// The schema's name (OpenAI requires one).
    pub name: String,
    /// What the schema is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The schema itself; absent means any JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// OpenAI's strict mode; passed through to a cloud provider. The local
    /// lane is always strict (its grammar cannot be left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

impl ResponseFormat {
    /// A `json_schema` format.
    pub fn json_schema(name: impl Into<String>, schema: Value) -> Self {
        Self::JsonSchema {
            json_schema: JsonSchema {
                name: name.into(),
                description: None,
                schema: Some(schema),
                strict: Some(true),
            },
        }
    }

    /// The schema an answer must meet: `{"type": "object"}` for
    /// `json_object`.
    pub fn schema(&self) -> Value {
        match self {
            Self::JsonSchema {
                json_schema: JsonSchema {
                    schema: Some(s), ..
                },
            } => s.clone(),
            _ => serde_json::json!({"type": "object"}),
        }
    }

    /// Checks the schema is inside the supported subset.
    pub fn check(&self) -> Result<(), SchemaError> {
        check_schema(&self.schema())
    }

    /// Whether `text` is an acceptable answer: it parses as JSON and meets
    /// the schema.
    pub fn accepts(&self, text: &str) -> Result<(), InvalidAnswer> {
        let value: Value = serde_json::from_str(text.trim()).map_err(|e| InvalidAnswer {
            at: String::new(),
            reason: format!("not JSON: {e}"),
        })?;
        validate(&self.schema(), &value)
    }
}

/// A schema outside the supported subset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported JSON-schema keyword `{keyword}` at `{at}`")]
#[non_exhaustive]
pub struct SchemaError {
    /// The keyword (or the bad value's key).
    pub keyword: String,
    /// Where in the schema, as a JSON pointer (`/properties/name`).
    pub at: String,
}

/// An answer that does not parse or does not meet its schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the answer is not valid{}: {reason}", if at.is_empty() { String::new() } else { format!(" at `{at}`") })]
#[non_exhaustive]
pub struct InvalidAnswer {
    /// Where in the answer, as a JSON pointer (empty: the whole answer).
    pub at: String,
    /// What is wrong.
    pub reason: String,
}

impl InvalidAnswer {
    /// An answer that is not valid at `at` (a JSON pointer; empty: the
    /// whole answer) for `reason`.
    pub fn new(at: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            at: at.into(),
            reason: reason.into(),
        }
    }
}

const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$schema",
    "$id",
    "default",
    "examples",
];
const TYPES: &[&str] = &[
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Checks that `schema` uses only the supported keywords (see the module
/// docs), naming the first one that is not.
pub fn check_schema(schema: &Value) -> Result<(), SchemaError> {
    check_at(schema, "")
}

fn check_at(schema: &Value, at: &str) -> Result<(), SchemaError> {
    let bad = |keyword: &str| SchemaError {
        keyword: keyword.to_string(),
        at: if at.is_empty() { "/".into() } else { at.into() },
    };
    let obj = match schema {
        // `true` accepts anything, which the grammar can say.
        Value::Bool(true) => return Ok(()),
        Value::Object(o) => o,
        _ => return Err(bad("(a schema must be an object)")),
    };
    for (k, v) in obj {
        match k.as_str() {
            "type" => {
                let names: Vec<&Value> = match v {
                    Value::Array(a) => a.iter().collect(),
                    one => vec![one],
                };
                if names
                    .iter()
                    .any(|n| !n.as_str().is_some_and(|n| TYPES.contains(&n)))
                {
                    return Err(bad("type"));
                }
            }
            "properties" => {
                let Value::Object(props) = v else {
                    return Err(bad("properties"));
                };
                for (name, sub) in props {
                    check_at(sub, &format!("{at}/properties/{name}"))?;
                }
            }
            "required" => {
                if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                    return Err(bad("required"));
                }
            }
            "additionalProperties" => match v {
                Value::Bool(_) => {}
                sub => check_at(sub, &format!("{at}/additionalProperties"))?,
            },
            "items" => check_at(v, &format!("{at}/items"))?,
            "enum" => {
                if !v.is_array() {
                    return Err(bad("enum"));
                }
            }
            "const" => {}
            "minItems" | "maxItems" | "minLength" | "maxLength" => {
                if v.as_u64().is_none() {
                    return Err(bad(k));
                }
            }
            k if ANNOTATIONS.contains(&k) => {}
            other => return Err(bad(other)),
        }
    }
    Ok(())
}

/// Whether `value` meets `schema` (a schema [`check_schema`] accepts;
/// keywords outside the subset are not looked at).
pub fn validate(schema: &Value, value: &Value) -> Result<(), InvalidAnswer> {
    validate_at(schema, value, "")
}

fn validate_at(schema: &Value, value: &Value, at: &str) -> Result<(), InvalidAnswer> {
    let fail = |reason: String| InvalidAnswer {
        at: at.to_string(),
        reason,
    };
    let Some(obj) = schema.as_object() else {
        return Ok(());
    };
    if let Some(t) = obj.get("type") {
        let names: Vec<&str> = match t {
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            one => one.as_str().into_iter().collect(),
        };
        if !names.iter().any(|n| has_type(value, n)) {
            return Err(fail(format!("expected {}", names.join(" or "))));
        }
    }
    if let Some(Value::Array(allowed)) = obj.get("enum") {
        if !allowed.contains(value) {
            return Err(fail("not one of the `enum` values".into()));
        }
    }
    if let Some(c) = obj.get("const") {
        if c != value {
            return Err(fail("not the `const` value".into()));
        }
    }
    match value {
        Value::Object(fields) => object(obj, fields, at)?,
        Value::Array(items) => {
            let n = items.len() as u64;
            if obj
                .get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
            {
                return Err(fail(format!("fewer than `minItems` items ({n})")));
            }
            if obj
                .get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                return Err(fail(format!("more than `maxItems` items ({n})")));
            }
            if let Some(item) = obj.get("items") {
                for (i, v) in items.iter().enumerate() {
                    validate_at(item, v, &format!("{at}/{i}"))?;
                }
            }
        }
        Value::String(s) => {
            let n = s.chars().count() as u64;
            if obj
                .get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
            {
                return Err(fail(format!("shorter than `minLength` ({n})")));
            }
            if obj
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                return Err(fail(format!("longer than `maxLength` ({n})")));
            }
        }
        _ => {}
    }
    Ok(())
}

fn object(
    schema: &Map<String, Value>,
    fields: &Map<String, Value>,
    at: &str,
) -> Result<(), InvalidAnswer> {
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = schema.get("required") {
        if let Some(missing) = required
            .iter()
            .filter_map(Value::as_str)
            .find(|r| !fields.contains_key(*r))
        {
            return Err(InvalidAnswer {
                at: at.to_string(),
                reason: format!("required property `{missing}` is missing"),
            });
        }
    }
    for (k, v) in fields {
        let here = format!("{at}/{k}");
        match props.and_then(|p| p.get(k)) {
            Some(sub) => validate_at(sub, v, &here)?,
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    return Err(InvalidAnswer {
                        at: at.to_string(),
                        reason: format!("property `{k}` is not allowed"),
                    })
                }
                Some(sub @ Value::Object(_)) => validate_at(sub, v, &here)?,
                _ => {}
            },
        }
    }
    Ok(())
}

fn has_type(v: &Value, name: &str) -> bool {
    match name {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn person() -> Value {
        json!({"type": "object", "additionalProperties": false,
            "required": ["name", "age"],
            "properties": {"name": {"type": "string", "maxLength": 20},
                "age": {"type": "integer"},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}})
    }

    #[test]
    fn the_subset_is_accepted_and_other_keywords_are_named() {
        assert_eq!(check_schema(&person()), Ok(()));
        let e = check_schema(&json!({"type": "object",
            "properties": {"x": {"type": "string", "pattern": "^a"}}}))
        .unwrap_err();
        assert_eq!(
            (e.keyword.as_str(), e.at.as_str()),
            ("pattern", "/properties/x")
        );
        assert_eq!(
            check_schema(&json!({"anyOf": []})).unwrap_err().keyword,
            "anyOf"
        );
        assert_eq!(
            check_schema(&json!({"type": "date"})).unwrap_err().keyword,
            "type"
        );
    }

    #[test]
    fn answers_are_validated_against_the_subset() {
        let f = ResponseFormat::json_schema("person", person());
        assert_eq!(
            f.accepts(r#" {"name": "Ann", "age": 3, "tags": ["a"]} "#),
            Ok(())
        );
        for (bad, at) in [
            (r#"{"name": "Ann"}"#, ""),
            (r#"{"name": "Ann", "age": 3.5}"#, "/age"),
            (r#"{"name": "Ann", "age": 3, "x": 1}"#, ""),
            (r#"{"name": "Ann", "age": 3, "tags": ["c"]}"#, "/tags/0"),
            (
                r#"{"name": "Ann", "age": 3, "tags": ["a", "a", "b"]}"#,
                "/tags",
            ),
            ("Sure! Here is", ""),
        ] {
            assert_eq!(f.accepts(bad).unwrap_err().at, at, "{bad}");
        }
        assert!(ResponseFormat::JsonObject.accepts("{}").is_ok());
        assert!(ResponseFormat::JsonObject.accepts("[1]").is_err());
    }

    #[test]
    fn the_wire_shape_is_openai_s() {
        let f: ResponseFormat = serde_json::from_value(json!({"type": "json_schema",
            "json_schema": {"name": "p", "schema": {"type": "object"}, "strict": true}}))
        .unwrap();
        assert_eq!(
            f,
            ResponseFormat::json_schema("p", json!({"type": "object"}))
        );
        assert_eq!(
            serde_json::to_value(ResponseFormat::JsonObject).unwrap(),
            json!({"type": "json_object"})
        );
    }
}
