//! A request from the JSON body `POST /v1/chat/completions` takes (serve's
//! wire format), for bindings that hand requests over as JSON. It goes
//! through the one validator of that body (`edgecloud_wire::openai`) and serve's
//! reader of the `edgecloud` extension object, so every field is checked
//! once, by the same rules, and an error names the field. This module
//! only translates; it must not start runs.

use super::error::Error;
use crate::harness::{Policy, RunOptions};
use crate::request::{Request, Sampling};
use crate::serve::wire;
use edgecloud_wire::openai::{self, ParseOptions};
use serde_json::Value;
use std::time::Duration;

/// The longest per-request deadline (`edgecloud.deadline_ms`) accepted:
/// a day. A server caps it lower (`ServeConfig::max_deadline`); an
/// embedding application owns its process and may wait as long as it
/// likes.
pub const MAX_DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// The model name that means "this harness's default route", as serve
/// spells it.
pub const DEFAULT_MODEL: &str = "edgecloud";

/// A request read from JSON, and the run options it asks for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Prepared {
    /// The request.
    pub request: Request,
    /// Its route (from `model`, when it names one) and policy (from
    /// `edgecloud.policy`). Not streaming; the caller says.
    pub options: RunOptions,
}

/// Reads a request body. `model` is optional (a harness has one set of
/// lanes): a model naming one of `routes` selects that route, any other
/// name (or none) the default route. `edgecloud.policy` picks the policy
/// for this run, with the parameters of the same kind in `presets` (the
/// configuration's), else its defaults; `edgecloud.deadline_ms` the
/// deadline. Fields the validator does not read are ignored, as a server
/// ignores them; the ones no lane can honour are refused by name.
pub fn request_from_json(
    json: &str,
    routes: &[String],
    presets: &[Policy],
) -> Result<Prepared, Error> {
    let value: Value = serde_json::from_str(json)
        .map_err(|e| Error::invalid_request(None, format!("the request is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(Error::invalid_request(
            None,
            "the request must be a JSON object",
        ));
    };
    let parsed = openai::parse_request(
        &obj,
        ParseOptions {
            at: "",
            require_model: false,
            max_messages: None,
            strict: false,
        },
    )
    .map_err(|e| Error::invalid_request(Some(e.param), e.message))?;
    let (policy, deadline) = wire::extension(
        parsed.extra.get("edgecloud").filter(|v| !v.is_null()),
        MAX_DEADLINE,
    )
    .map_err(|e| {
        let (param, message) = e.into_param_and_message();
        Error::invalid_request(param, message)
    })?;
    let mut body = parsed.request;
    let request = Request {
        id: None,
        messages: std::mem::take(&mut body.messages).into_owned(),
        sampling: body.sampling(Sampling::default()),
        deadline,
    };
    request
        .validate()
        .map_err(|e| Error::invalid_request(wire::param_as_sent(e.field, &body), e.reason))?;
    let mut options = RunOptions::new();
    let model = body.model.as_ref();
    if model != DEFAULT_MODEL && routes.iter().any(|r| r == model) {
        options = options.route(model);
    }
    if let Some(name) = policy {
        options = options.policy(policy_named(&name, presets)?);
    }
    Ok(Prepared { request, options })
}

/// The policy a request names: the configured one of that kind (its
/// thresholds and shares), else the kind's defaults.
fn policy_named(name: &str, presets: &[Policy]) -> Result<Policy, Error> {
    Policy::named(name, presets)
        .map_err(|e| Error::invalid_request(Some("edgecloud.policy".into()), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::ErrorKind;

    fn parse(json: &str) -> Result<Prepared, Error> {
        request_from_json(
            json,
            &["default".into(), "fast".into()],
            &[Policy::cascade(0.9)],
        )
    }

    #[test]
    fn a_wire_body_becomes_a_request_and_options() {
        let p = parse(
            r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"seed":7,
                "model":"fast","edgecloud":{"policy":"cascade","deadline_ms":1500},"user":"u1"}"#,
        )
        .expect("valid");
        assert_eq!(p.request.messages.len(), 1);
        assert_eq!(p.request.sampling.max_tokens, 8);
        assert_eq!(p.request.sampling.seed, Some(7));
        assert_eq!(p.request.deadline, Some(Duration::from_millis(1500)));
        assert_eq!(p.options.route.as_deref(), Some("fast"));
        assert_eq!(p.options.policy, Some(Policy::cascade(0.9)));
        assert!(!p.options.stream);
        // No model, or one that names no route: the default route.
        let p = parse(r#"{"messages":[{"role":"user","content":"hi"}],"model":"gpt-4o"}"#)
            .expect("valid");
        assert_eq!(p.options.route, None);
    }

    #[test]
    fn errors_name_the_field() {
        let field = |json: &str| {
            let e = parse(json).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidRequest, "{e}");
            e.field
        };
        assert_eq!(
            field(r#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#)
                .as_deref(),
            Some("temperature")
        );
        assert_eq!(
            field(r#"{"messages":[{"role":"wizard","content":"hi"}]}"#).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            field(
                r#"{"messages":[{"role":"user","content":"hi"}],"edgecloud":{"policy":"fastest"}}"#
            )
            .as_deref(),
            Some("edgecloud.policy")
        );
        assert_eq!(
            field(r#"{"messages":[{"role":"user","content":"hi"}],"edgecloud":{"deadline_ms":0}}"#)
                .as_deref(),
            Some("edgecloud.deadline_ms")
        );
        assert_eq!(field("{not json"), None);
        assert_eq!(field("[1]"), None);
    }
}
