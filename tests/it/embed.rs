//! The layer every binding shares (`edgecloud::bindings`), through the public
//! API on the real tiny model: a JSON request gives the outcome JSON that
//! `edgecloud run --json` prints, overrides win over the configuration as
//! the CLI's flags do, and each mistake comes back in its kind, naming
//! what is wrong. (The C ABI over it is tested by the C programs of
//! tests/c/.)

use crate::support::cli::{bin, json_of};
use crate::support::models::tiny_model;
use edgecloud::bindings::{self, Callbacks, Embedded, ErrorKind, Overrides};
use serde_json::Value;
use std::process::Command;

fn model() -> &'static str {
    tiny_model().to_str().expect("temp paths are UTF-8 here")
}

fn local_only() -> Embedded {
    let mut cfg =
        bindings::config_from_toml("[harness]\npolicy = \"cascade\"\ndeadline_ms = 60000\n")
            .expect("valid");
    let mut o = Overrides::default();
    o.model = Some(model().into());
    o.threads = Some(2);
    o.policy = Some("local-only".parse().expect("a policy"));
    o.apply(&mut cfg).expect("valid");
    Embedded::start(&cfg, Callbacks::default()).expect("the tiny model loads")
}

#[test]
fn a_json_request_gives_the_outcome_json_of_run_json() {
    let embedded = local_only();
    let outcome = embedded
        .run(r#"{"messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"seed":3}"#)
        .expect("the run starts");
    let ours: Value = serde_json::from_str(&bindings::outcome_json(&outcome)).expect("JSON");
    assert_eq!(ours["status"], "ok", "{ours}");
    assert_eq!(ours["winner"], "local");

    let out = Command::new(bin())
        .args([
            "run",
            "--model",
            model(),
            "--policy",
            "local-only",
            "--prompt",
            "Hello",
            "--max-tokens",
            "8",
            "--seed",
            "3",
            "--threads",
            "2",
            "--json",
        ])
        .output()
        .expect("the binary runs");
    let cli = json_of(&out);
    let keys =
        |v: &Value| -> Vec<String> { v.as_object().expect("an object").keys().cloned().collect() };
    assert_eq!(keys(&ours), keys(&cli), "the same fields as `run --json`");
    assert_eq!(keys(&ours["lanes"][0]), keys(&cli["lanes"][0]));
    assert_eq!(
        ours["text"], cli["text"],
        "same model, prompt and seed: same answer"
    );
    assert_eq!(ours["policy"], cli["policy"]);
}

#[test]
fn mistakes_come_back_in_their_kind() {
    let embedded = local_only();
    let e = embedded
        .run(r#"{"messages":[{"role":"user","content":"hi"}],"top_p":7}"#)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidRequest);
    assert_eq!(e.field.as_deref(), Some("top_p"), "{e}");
    // The harness is still usable.
    let o = embedded
        .run(r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"seed":3}"#)
        .expect("runs");
    assert!(o.is_ok(), "{:?}", o.error);

    let start = |toml: &str| {
        let cfg = bindings::config_from_toml(toml).map_err(bindings::Error::from)?;
        Embedded::start(&cfg, Callbacks::default())
    };
    let e = start("[harness]\npolicy = \"racer\"\n").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("racer"), "{e}");
    let e = start("").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    let e = start("[local]\nmodel = \"/nonexistent/m.gguf\"\n").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Model);
    assert!(e.message.contains("/nonexistent/m.gguf"), "{e}");
    let e = start("[local]\nmodel = \"hf:not a repo\"\n").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "a malformed reference: {e}");
}

/// A streamed run read as a binding reads it ([`bindings::DeltaStream`], what
/// C's `on_delta` and Python's `stream()` get): the committed text as
/// content deltas, then the winner's tool call as OpenAI streams it (a
/// delta with its id, type and name, then one with its arguments), then
/// the end; the outcome after. The real SmolLM2 with a tool it must call.
#[test]
fn a_stream_gives_the_text_then_the_winners_tool_calls_as_serve_streams_them() {
    let mut cfg = bindings::config_from_toml("[harness]\ndeadline_ms = 120000\n").expect("valid");
    let mut o = Overrides::default();
    o.model = Some(crate::support::real_model::smollm2().into());
    o.threads = Some(2);
    o.policy = Some("local-only".parse().expect("a policy"));
    o.apply(&mut cfg).expect("valid");
    let embedded = Embedded::start(&cfg, Callbacks::default()).expect("SmolLM2 loads");
    let request = serde_json::json!({
        "messages": [{"role": "user", "content": "What's the weather like in Paris?"}],
        "max_tokens": 64,
        "temperature": 0,
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Current weather in a city.",
            "parameters": {"type": "object", "additionalProperties": false,
                "required": ["city"], "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": "required",
    })
    .to_string();
    let mut deltas =
        bindings::DeltaStream::new(embedded.start_run(&request, true).expect("starts"));
    let mut seen: Vec<Value> = Vec::new();
    while let Some(d) = deltas.next_blocking().expect("streams") {
        seen.push(serde_json::from_str(&d).expect("each delta is JSON"));
    }
    assert_eq!(
        deltas.next_blocking().expect("ended"),
        None,
        "the end stays"
    );
    let outcome = deltas.wait().expect("the outcome after the deltas");
    assert!(deltas.abort_handle().is_settled());
    assert!(outcome.is_ok(), "{:?}", outcome.error);
    let call = &outcome.completion.as_ref().expect("a winner").tool_calls[0];

    let (text, calls): (Vec<&Value>, Vec<&Value>) =
        seen.iter().partition(|d| d.get("content").is_some());
    let streamed: String = text
        .iter()
        .map(|d| d["content"].as_str().unwrap())
        .collect();
    assert_eq!(Some(streamed.as_str()), outcome.text.as_deref());
    assert_eq!(calls.len(), 2, "one call, two deltas: {seen:?}");
    assert!(
        seen[seen.len() - 2..]
            .iter()
            .all(|d| d.get("tool_calls").is_some()),
        "the calls come after the text: {seen:?}"
    );
    assert_eq!(
        *calls[0],
        serde_json::json!({"tool_calls": [{"index": 0, "id": call.id, "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}]})
    );
    assert_eq!(
        *calls[1],
        serde_json::json!({"tool_calls": [{"index": 0,
            "function": {"arguments": call.function.arguments}}]})
    );
    assert!(deltas.wait().is_err(), "the outcome is handed out once");
}
