//! Validity as acceptance (issue 24): an answer that must be JSON, meet a
//! schema or call a declared tool is acceptable only when it does; the
//! lane report says why it was rejected.

use super::*;
use crate::structured::ResponseFormat;
use crate::tools::{Tool, ToolCall, ToolChoice};
use serde_json::json;

fn schema_rules() -> Sampling {
    Sampling {
        response_format: Some(ResponseFormat::json_schema(
            "city",
            json!({"type": "object", "required": ["city"],
                "properties": {"city": {"type": "string"}}}),
        )),
        ..Sampling::default()
    }
}

fn tool_rules(choice: ToolChoice) -> Sampling {
    Sampling {
        tools: vec![Tool::function(
            "get_weather",
            "Weather in a city",
            json!({"type": "object", "required": ["city"],
                "properties": {"city": {"type": "string"}}}),
        )],
        tool_choice: Some(choice),
        ..Sampling::default()
    }
}

fn with_rules(policy: Policy, rules: Sampling) -> CoreSetup {
    let mut s = setup(policy);
    s.answer_rules = Some(rules);
    s
}

fn call(name: &str, args: serde_json::Value) -> Candidate {
    Candidate::new("", FinishReason::Stop).with_tool_calls(vec![ToolCall::new("c1", name, &args)])
}

#[test]
fn race_does_not_let_an_invalid_answer_win() {
    let mut sim = Sim::begin(with_rules(Policy::Race, schema_rules()));
    // The cloud is first, but its answer is not the JSON asked for.
    sim.answer(Lane::Cloud, "Sure! The city is Oslo.", 50);
    assert!(
        sim.cancelled.is_empty(),
        "an invalid answer decides nothing"
    );
    assert!(!sim.settle_now);
    sim.answer(Lane::Local, r#"{"city": "Oslo"}"#, 120);
    let out = sim.settle(120);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        Reason::FirstAcceptable(Lane::Local),
        DecidedBy::Policy,
    );
    let cloud = out.lane(Lane::Cloud);
    assert!(
        cloud
            .rejected
            .as_deref()
            .is_some_and(|r| r.starts_with("invalid answer: ") && r.contains("not JSON")),
        "{cloud:?}"
    );
    assert_eq!(out.lane(Lane::Local).rejected, None);
}

#[test]
fn cascade_escalates_an_invalid_local_answer_and_says_why() {
    let mut s = with_rules(Policy::cascade(0.5), schema_rules());
    s.callbacks.scorer = true;
    let mut sim = Sim::begin(s);
    sim.answer(Lane::Local, r#"{"town": "Oslo"}"#, 100);
    assert!(
        !sim.pending(CallbackKind::Score),
        "an invalid answer is not scored"
    );
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(
        sim.note(Lane::Cloud),
        Some(
            "started because local gave an invalid answer (the answer is not valid: \
             required property `city` is missing)"
        )
    );
    sim.answer(Lane::Cloud, r#"{"city": "Oslo"}"#, 300);
    sim.score(Lane::Cloud, 0.9, 301);
    let out = sim.settle(301);
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(out.lane(Lane::Local).rejected.is_some());
}

#[test]
fn with_no_valid_answer_the_run_fails_rather_than_return_an_invalid_one() {
    let mut sim = Sim::begin(with_rules(Policy::BestOf, schema_rules()));
    sim.answer(Lane::Local, "no", 100);
    sim.answer(Lane::Cloud, "[1, 2]", 120);
    let out = sim.settle(120);
    assert_decision(
        &out,
        RunStatus::Failed,
        None,
        Reason::NoUsableAnswer,
        DecidedBy::Nobody,
    );
}

#[test]
fn a_tool_call_must_name_a_declared_function_with_valid_arguments() {
    let mut sim = Sim::begin(with_rules(Policy::Race, tool_rules(ToolChoice::Required)));
    // Text where a call was required, then a call of an unknown function.
    sim.answer(Lane::Local, "It is sunny.", 40);
    sim.returned(
        Lane::Cloud,
        Ok(call("get_time", json!({"city": "Oslo"}))),
        60,
    );
    let out = sim.settle(60);
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out
        .lane(Lane::Local)
        .rejected
        .as_deref()
        .is_some_and(|r| r.contains("no tool call where one was required")));
    assert!(out
        .lane(Lane::Cloud)
        .rejected
        .as_deref()
        .is_some_and(|r| r.contains("`get_time`, which is not a declared tool")));

    let mut sim = Sim::begin(with_rules(Policy::Race, tool_rules(ToolChoice::Auto)));
    sim.returned(Lane::Cloud, Ok(call("get_weather", json!({"town": 1}))), 30);
    sim.returned(
        Lane::Local,
        Ok(call("get_weather", json!({"city": "Oslo"}))),
        70,
    );
    let out = sim.settle(70);
    assert_eq!(out.winner, Some(Lane::Local));
    let c = out.completion.expect("the winner's completion");
    assert_eq!(c.tool_calls[0].function.name, "get_weather");
    // A call-only answer is usable: it has no text.
    assert!(c.text.is_empty());
}

#[test]
fn a_streaming_run_committed_to_an_invalid_answer_fails() {
    let mut s = with_rules(Policy::LocalOnly, schema_rules());
    s.streaming = true;
    let mut sim = Sim::begin(s);
    sim.token(Lane::Local, "hello", 10);
    sim.answer(Lane::Local, "hello", 20);
    let out = sim.settle(20);
    assert_decision(
        &out,
        RunStatus::Failed,
        None,
        Reason::CommittedInvalid(Lane::Local),
        DecidedBy::Nobody,
    );
    assert!(out.error.is_some_and(|e| e.contains("invalid answer")));
}

#[test]
fn a_diagnostic_reports_any_answer_as_it_is() {
    let mut s = with_rules(Policy::LocalOnly, schema_rules());
    s.diagnostic = true;
    let mut sim = Sim::begin(s);
    sim.answer(Lane::Local, "not json", 10);
    let out = sim.settle(10);
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.lane(Lane::Local).rejected, None);
}

#[test]
fn a_prompt_over_the_local_context_escalates_to_the_cloud_and_says_so() {
    let mut s = setup(Policy::cascade(0.5));
    s.callbacks.scorer = true;
    let mut sim = Sim::begin(s);
    let e = BackendError::new(
        LaneErrorKind::ContextLengthExceeded,
        "prompt of 5000 tokens does not fit a context of 4096 tokens",
    );
    sim.returned(Lane::Local, Err(e), 2);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(
        sim.note(Lane::Cloud),
        Some(
            "started because local could not take the prompt (prompt of 5000 tokens does \
             not fit a context of 4096 tokens)"
        )
    );
}

/// An answer cut by its length is the model's answer as far as it went
/// (OpenAI returns a tool call or schema answer cut so, 200 with
/// `finish_reason: "length"`): when no lane has a whole one, a lone
/// lane's cut call is the run's answer rather than a failure; another
/// lane's whole valid answer still wins over it.
#[test]
fn an_answer_cut_by_its_length_is_the_answer_when_no_lane_has_a_whole_one() {
    let mut sim = Sim::begin(with_rules(
        Policy::LocalOnly,
        tool_rules(ToolChoice::Required),
    ));
    let cut = Candidate::new("", FinishReason::Length).with_tool_calls(vec![ToolCall {
        function: crate::tools::FunctionCall {
            name: "get_weather".into(),
            arguments: "{\"city\": \"Os".into(),
        },
        ..ToolCall::new("c1", "get_weather", &json!({}))
    }]);
    sim.returned(Lane::Local, Ok(cut), 40);
    let out = sim.settle(40);
    assert_eq!(out.status, RunStatus::Ok, "{:?}", out.error);
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.lane(Lane::Local).rejected, None);
    assert!(
        out.lane(Lane::Local)
            .note
            .as_deref()
            .is_some_and(|n| n.contains("cut by its length")),
        "{out:#?}"
    );
    let c = out.completion.expect("the cut answer");
    assert_eq!(c.finish_reason, FinishReason::Length);

    // A race: the cut call first, then a whole valid one, which wins.
    let mut sim = Sim::begin(with_rules(Policy::Race, tool_rules(ToolChoice::Required)));
    let cut = Candidate::new("", FinishReason::Length).with_tool_calls(vec![ToolCall {
        function: crate::tools::FunctionCall {
            name: "get_weather".into(),
            arguments: "{\"city\"".into(),
        },
        ..ToolCall::new("c2", "get_weather", &json!({}))
    }]);
    sim.returned(Lane::Local, Ok(cut), 30);
    assert!(
        !sim.settle_now,
        "a cut answer decides nothing while a lane runs"
    );
    sim.returned(
        Lane::Cloud,
        Ok(call("get_weather", json!({"city": "Oslo"}))),
        80,
    );
    let out = sim.settle(80);
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(out
        .lane(Lane::Local)
        .rejected
        .as_deref()
        .is_some_and(|r| r.contains("cut by its length")));

    let mut sim = Sim::begin(with_rules(Policy::LocalOnly, schema_rules()));
    sim.returned(
        Lane::Local,
        Ok(Candidate::new("{\"ci", FinishReason::Length)),
        40,
    );
    assert_eq!(sim.settle(40).status, RunStatus::Ok);
}
