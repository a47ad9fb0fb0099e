//! Tool calls (issue 24), spelt as OpenAI's chat API spells them: the
//! functions a request declares ([`Tool`]), whether and which one the
//! model must call ([`ToolChoice`]), the calls an answer makes
//! ([`ToolCall`]), and the checks on both: [`check_tools`] (a request's
//! declarations, each function's `parameters` inside the JSON-schema
//! subset of [`crate::structured`]) and [`validate_call`] (a call names a
//! declared function and its arguments meet that function's
//! parameters). Plain data and pure functions: how a lane asks a model
//! for a call (templates, grammars) lives with the lane.

use crate::structured::{check_schema, validate, InvalidAnswer, SchemaError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Map, Value};

/// One declared tool: `{"type": "function", "function": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// Always `function` (the only kind of tool chat completions has).
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function.
    pub function: FunctionDef,
}

fn function_kind() -> String {
    "function".into()
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDef {
    /// Its name: letters, digits, `_` and `-`, at most 64.
    pub name: String,
    /// What it does (shown to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON schema of its arguments (an object); absent: no arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// OpenAI's strict mode; passed through to a cloud provider. The local
    /// lane's grammar is always strict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

impl Tool {
    /// A function tool.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self {
            kind: function_kind(),
            function: FunctionDef {
                name: name.into(),
                description: Some(description.into()),
                parameters: Some(parameters),
                strict: None,
            },
        }
    }

    /// The schema its arguments must meet (`{"type": "object"}` when it
    /// declares none).
    pub fn parameters(&self) -> Value {
        self.function
            .parameters
            .clone()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
    }
}

/// Whether the model must call a tool: OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ToolChoice {
    /// No call: the tools are not offered to the model.
    None,
    /// The model decides (the default when tools are given).
    #[default]
    Auto,
    /// The model must call one of the tools.
    Required,
    /// The model must call this function.
    Function(String),
}

impl ToolChoice {
    /// Whether an answer must be a call.
    pub fn forces_call(&self) -> bool {
        matches!(self, ToolChoice::Required | ToolChoice::Function(_))
    }
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolChoice::None => s.serialize_str("none"),
            ToolChoice::Auto => s.serialize_str("auto"),
            ToolChoice::Required => s.serialize_str("required"),
            ToolChoice::Function(name) => {
                json!({"type": "function", "function": {"name": name}}).serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        ToolChoice::from_value(&v).map_err(serde::de::Error::custom)
    }
}

impl ToolChoice {
    /// Reads OpenAI's spelling: `"none"`, `"auto"`, `"required"` or
    /// `{"type": "function", "function": {"name": ...}}`.
    pub fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(s) => match s.as_str() {
                "none" => Ok(ToolChoice::None),
                "auto" => Ok(ToolChoice::Auto),
                "required" => Ok(ToolChoice::Required),
                other => Err(format!(
                    "unknown tool_choice `{other}`; expected none, auto, required or a function"
                )),
            },
            Value::Object(o) => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str);
                match (o.get("type").and_then(Value::as_str), name) {
                    (Some("function"), Some(name)) => Ok(ToolChoice::Function(name.to_string())),
                    _ => Err("a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}".into()),
                }
            }
            _ => Err("tool_choice must be a string or an object".into()),
        }
    }
}

/// One call an answer makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which the tool's answer (`role: "tool"`) names.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

/// A function call: the name and the arguments as JSON text (as OpenAI
/// sends them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// Its arguments: a JSON object, as text.
    #[serde(default)]
    pub arguments: String,
}

impl ToolCall {
    /// A call with the given id, function and arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: &Value) -> Self {
        Self {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.to_string(),
            },
        }
    }
}

/// A request's tools that cannot be used as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ToolError {
    /// The offending field, as OpenAI names it (`tools[1].function.name`).
    pub param: String,
    /// What is wrong.
    pub message: String,
    /// A schema keyword outside the supported subset, when that is what
    /// is wrong.
    pub schema: Option<SchemaError>,
}

impl ToolError {
    fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: param.into(),
            message: message.into(),
            schema: None,
        }
    }
}

/// Checks a request's tools and tool choice: names valid and distinct,
/// parameters an object schema inside the supported subset, a named
/// choice declared, `required` or a named choice only with tools.
pub fn check_tools(tools: &[Tool], choice: Option<&ToolChoice>) -> Result<(), ToolError> {
    for (i, t) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        if t.kind != "function" {
            return Err(ToolError::new(
                format!("{at}.type"),
                format!("`{at}.type` must be \"function\""),
            ));
        }
        let name = &t.function.name;
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(ToolError::new(
                format!("{at}.function.name"),
                format!("`{at}.function.name` must be 1-64 letters, digits, `_` or `-`"),
            ));
        }
        if tools[..i].iter().any(|o| &o.function.name == name) {
            return Err(ToolError::new(
                format!("{at}.function.name"),
                format!("`{at}.function.name`: `{name}` is declared twice"),
            ));
        }
        if let Some(p) = &t.function.parameters {
            let param = format!("{at}.function.parameters");
            if !p.is_object() || p.get("type").is_some_and(|ty| ty != "object") {
                return Err(ToolError::new(
                    &param,
                    format!("`{param}` must be a JSON schema of type object"),
                ));
            }
            if let Err(e) = check_schema(p) {
                return Err(ToolError {
                    message: format!("`{param}`: {e}"),
                    param,
                    schema: Some(e),
                });
            }
        }
    }
    match choice {
        Some(ToolChoice::Required) if tools.is_empty() => Err(ToolError::new(
            "tool_choice",
            "`tool_choice` \"required\" needs `tools`",
        )),
        Some(ToolChoice::Function(name)) if !tools.iter().any(|t| &t.function.name == name) => {
            Err(ToolError::new(
                "tool_choice",
                format!("`tool_choice` names `{name}`, which is not in `tools`"),
            ))
        }
        _ => Ok(()),
    }
}

/// Whether `call` is one `tools` allows under `choice`: a declared (and,
/// for a named choice, the named) function whose arguments parse as a
/// JSON object that meets its parameters. Returns the arguments.
pub fn validate_call(
    tools: &[Tool],
    choice: &ToolChoice,
    call: &ToolCall,
) -> Result<Map<String, Value>, InvalidAnswer> {
    let name = &call.function.name;
    let invalid = |reason: String| InvalidAnswer {
        at: String::new(),
        reason,
    };
    if *choice == ToolChoice::None {
        return Err(invalid(format!(
            "a call of `{name}` where tool_choice is none"
        )));
    }
    let Some(tool) = tools.iter().find(|t| &t.function.name == name) else {
        return Err(invalid(format!(
            "a call of `{name}`, which is not a declared tool"
        )));
    };
    if let ToolChoice::Function(wanted) = choice {
        if wanted != name {
            return Err(invalid(format!(
                "a call of `{name}` where `{wanted}` was required"
            )));
        }
    }
    let args = if call.function.arguments.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(&call.function.arguments)
            .map_err(|e| invalid(format!("the arguments of `{name}` are not JSON: {e}")))?
    };
    let Value::Object(fields) = args else {
        return Err(invalid(format!(
            "the arguments of `{name}` are not a JSON object"
        )));
    };
    let value = Value::Object(fields);
    validate(&tool.parameters(), &value).map_err(|e| InvalidAnswer {
        at: e.at,
        reason: format!("the arguments of `{name}`: {}", e.reason),
    })?;
    let Value::Object(fields) = value else {
        unreachable!("checked to be an object above")
    };
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Tool {
        Tool::function(
            "get_weather",
            "The weather in a city",
            json!({"type": "object", "properties": {"city": {"type": "string"},
                "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": false}),
        )
    }

    #[test]
    fn tool_choice_reads_and_writes_openai_s_spelling() {
        for (v, c) in [
            (json!("none"), ToolChoice::None),
            (json!("auto"), ToolChoice::Auto),
            (json!("required"), ToolChoice::Required),
            (
                json!({"type": "function", "function": {"name": "f"}}),
                ToolChoice::Function("f".into()),
            ),
        ] {
            assert_eq!(serde_json::from_value::<ToolChoice>(v.clone()).unwrap(), c);
            assert_eq!(serde_json::to_value(&c).unwrap(), v);
        }
        assert!(ToolChoice::from_value(&json!("sometimes")).is_err());
        assert!(ToolChoice::from_value(&json!({"type": "function"})).is_err());
    }

    #[test]
    fn declarations_are_checked_naming_the_field() {
        assert_eq!(
            check_tools(&[weather()], Some(&ToolChoice::Required)),
            Ok(())
        );
        let mut bad = weather();
        bad.function.name = "get weather".into();
        assert_eq!(
            check_tools(&[bad], None).unwrap_err().param,
            "tools[0].function.name"
        );
        assert_eq!(
            check_tools(&[weather(), weather()], None)
                .unwrap_err()
                .param,
            "tools[1].function.name"
        );
        let mut pattern = weather();
        pattern.function.parameters = Some(
            json!({"type": "object", "properties": {"city": {"type": "string", "pattern": "x"}}}),
        );
        let e = check_tools(&[pattern], None).unwrap_err();
        assert_eq!(e.param, "tools[0].function.parameters");
        assert_eq!(e.schema.unwrap().keyword, "pattern");
        assert_eq!(
            check_tools(&[weather()], Some(&ToolChoice::Function("x".into())))
                .unwrap_err()
                .param,
            "tool_choice"
        );
        assert!(check_tools(&[], Some(&ToolChoice::Required)).is_err());
    }

    #[test]
    fn calls_are_validated_against_the_declared_parameters() {
        let tools = [weather()];
        let call = |name: &str, args: &str| ToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: name.into(),
                arguments: args.into(),
            },
        };
        let ok = validate_call(
            &tools,
            &ToolChoice::Auto,
            &call("get_weather", r#"{"city": "Oslo"}"#),
        )
        .unwrap();
        assert_eq!(ok["city"], "Oslo");
        for (c, why) in [
            (call("get_time", "{}"), "not a declared tool"),
            (call("get_weather", "{}"), "required property `city`"),
            (call("get_weather", r#"{"city": 3}"#), "expected string"),
            (
                call("get_weather", r#"{"city": "a", "x": 1}"#),
                "not allowed",
            ),
            (call("get_weather", "[1]"), "not a JSON object"),
            (call("get_weather", "{"), "not JSON"),
        ] {
            let e = validate_call(&tools, &ToolChoice::Auto, &c).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
        }
        assert!(validate_call(
            &tools,
            &ToolChoice::None,
            &call("get_weather", r#"{"city": "Oslo"}"#)
        )
        .is_err());
    }
}
