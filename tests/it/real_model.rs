//! On a real model: SmolLM2-135M-Instruct (Q4_1, llama architecture,
//! ChatML), fetched once through `edgecloud model fetch` and cached under
//! `target/models/` (see `support::real_model`).

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use edgecloud::local::{LocalCompletion, LocalConfig, LocalLane};
use edgecloud::{CancellationToken, ChatMessage, FinishReason, LaneJob, Sampling};

use crate::support::cli::{bin, json_of};
use crate::support::models::RawGguf;
use crate::support::real_model::{asked, cache_dir, smollm2};

#[test]
fn the_fetched_model_is_cached_and_a_second_fetch_does_nothing() {
    let path = smollm2();
    assert!(path.starts_with(cache_dir()), "{}", path.display());
    let out = Command::new(bin())
        .args(["model", "fetch", "smollm2-135m-instruct", "--dir"])
        .arg(cache_dir())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        path.to_str().unwrap()
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already there and verified"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_validator_accepts_it_and_inspect_reports_what_it_is() {
    let path = smollm2();
    edgecloud::gguf::validate(path).expect("the real model validates");
    let out = Command::new(bin())
        .args(["model", "inspect", "--json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let info = json_of(&out);
    assert_eq!(info["valid"], true);
    assert_eq!(info["architecture"], "llama");
    assert_eq!(info["quantization"], "Q4_1");
    assert_eq!(info["chat_template_family"], "chatml");
    let text = Command::new(bin())
        .args(["model", "inspect"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("parameters:     134.5M"), "{text}");
    assert!(text.contains("architecture:   llama"), "{text}");
    assert!(text.contains("Q4_1"), "{text}");
    assert!(text.contains("chat template:  yes (chatml)"), "{text}");
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

fn real_config() -> LocalConfig {
    LocalConfig {
        threads: Some(2),
        // Room for every prompt here; a smaller KV cache than the 4096
        // default keeps parallel tests light.
        context_size: Some(1024),
        ..LocalConfig::new(smollm2())
    }
}

/// One real-model lane for the tests that only ask questions.
fn shared_lane() -> &'static LocalLane {
    static LANE: OnceLock<LocalLane> = OnceLock::new();
    LANE.get_or_init(|| LocalLane::start(real_config()).expect("the real model loads"))
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.0,
        ..Sampling::default()
    }
}

fn ask(lane: &LocalLane, question: &str, max_tokens: u32) -> LocalCompletion {
    lane.generate(LaneJob::new(asked(question), greedy(max_tokens), far()))
        .unwrap_or_else(|e| panic!("{question}: {}", edgecloud::error_chain(&e)))
}

#[test]
fn greedy_answers_to_factual_questions_are_right() {
    let lane = shared_lane();
    for (question, expected) in [
        ("What is the capital of France?", "Paris"),
        ("What is the capital of Japan?", "Tokyo"),
        ("What is the capital of Italy?", "Rome"),
        ("What is the capital of Germany?", "Berlin"),
    ] {
        let done = ask(lane, question, 24);
        assert!(
            done.text.contains(expected),
            "{question} -> {:?} (expected {expected})",
            done.text
        );
        // It ends on its own end-of-turn token, which never shows as text.
        assert_eq!(done.finish_reason, FinishReason::Stop, "{question}");
        assert!(!done.text.contains("im_end"), "{:?}", done.text);
    }
}

#[test]
fn the_chat_template_is_applied_with_control_tokens() {
    let lane = shared_lane();
    assert_eq!(lane.info().chat_template, "model");
    let question = "What is the capital of France?";
    let done = ask(lane, question, 4);
    // `<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}
    // <|im_end|>\n<|im_start|>assistant\n`: the five markers are one control
    // token each (written out as text they take several tokens each), plus
    // `system`, `user`, `assistant`, five newlines and at most a BOS token
    // the vocabulary may add.
    let as_text = lane.count_tokens("<|im_start|>") as u32;
    assert!(as_text >= 3, "the marker as plain text is several tokens");
    let system = &asked(question)[0].content;
    let text_tokens = (lane.count_tokens(question) + lane.count_tokens(system)) as u32;
    let overhead = done.prompt_tokens - text_tokens;
    assert!(
        (13..=14).contains(&overhead),
        "the prompt should be ChatML with control tokens: {overhead} tokens around the texts \
         (with the markers as text it would be over {})",
        5 * as_text + 8
    );
    // Without a system message, the template's own default one is written
    // (the model's Jinja renders the conversation, as Hugging Face and
    // llama-server do): the prompt is the one with that message given.
    let bare = lane
        .generate(LaneJob::new(
            vec![ChatMessage::user(question)],
            greedy(1),
            far(),
        ))
        .unwrap();
    let with_default = lane
        .generate(LaneJob::new(
            vec![
                ChatMessage::system(
                    "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
                ),
                ChatMessage::user(question),
            ],
            greedy(1),
            far(),
        ))
        .unwrap();
    assert_eq!(bare.prompt_tokens, with_default.prompt_tokens);
    assert!(bare.prompt_tokens > done.prompt_tokens, "{bare:?}");

    // From the command line the choice is reported.
    let out = Command::new(bin())
        .args([
            "local",
            "--json",
            "--max-tokens",
            "1",
            "--prompt",
            "Hi",
            "--model",
        ])
        .arg(smollm2())
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["chat_template"], "model");
}

#[test]
fn a_model_without_a_template_falls_back_to_chatml_and_says_so() {
    let mut raw = RawGguf::tiny();
    raw.remove("tokenizer.chat_template");
    let path = raw.write("no-template.gguf");
    let lane = LocalLane::start(LocalConfig::new(&path)).unwrap();
    // The tiny model is `llama` without llama3 or mistral control tokens.
    assert_eq!(lane.info().chat_template, "chatml (fallback)");
    let out = Command::new(bin())
        .args([
            "local",
            "--json",
            "--max-tokens",
            "1",
            "--prompt",
            "Hi",
            "--model",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["chat_template"], "chatml (fallback)");
}

#[test]
fn right_answers_carry_higher_confidence_than_wrong_ones() {
    // Questions it answers right and questions it gets wrong (arithmetic,
    // trick questions); the signal must separate the two groups.
    let lane = shared_lane();
    let mut right = Vec::new();
    let mut wrong = Vec::new();
    for (question, expected) in [
        ("What is the capital of France?", "Paris"),
        ("What is the capital of Japan?", "Tokyo"),
        ("What is the capital of Italy?", "Rome"),
        ("What is the largest planet in the solar system?", "Jupiter"),
        ("What is the square root of 7396?", "86"),
        ("Who was the first person to walk on Mars?", "nobody"),
    ] {
        let done = ask(lane, question, 24);
        let mean = done
            .mean_logprob
            .expect("a greedy answer has log-probabilities");
        if done.text.contains(expected) {
            right.push((mean, done.text));
        } else {
            wrong.push((mean, done.text));
        }
    }
    assert!(
        right.len() >= 2 && !wrong.is_empty(),
        "right {right:?}\nwrong {wrong:?}"
    );
    let least_sure_right = right.iter().map(|r| r.0).fold(f32::INFINITY, f32::min);
    let most_sure_wrong = wrong.iter().map(|w| w.0).fold(f32::NEG_INFINITY, f32::max);
    assert!(
        least_sure_right > most_sure_wrong,
        "mean log-probability should rank right answers above wrong ones:\nright {right:?}\nwrong {wrong:?}"
    );
}

#[test]
fn prefix_reuse_gives_the_same_text_as_a_cold_context() {
    let warm = LocalLane::start(real_config()).unwrap();
    let cold = LocalLane::start(real_config()).unwrap();
    let system = ChatMessage::system(
        "You are a helpful assistant on a small device. Answer in one short sentence. \
         Be accurate; if you do not know, say so. Never use lists or markdown.",
    );
    let first = vec![
        system.clone(),
        ChatMessage::user("What is the capital of Japan?"),
    ];
    let second = vec![system, ChatMessage::user("What is the capital of France?")];
    warm.generate(LaneJob::new(first, greedy(16), far()))
        .unwrap();
    let warm_second = warm
        .generate(LaneJob::new(second.clone(), greedy(24), far()))
        .unwrap();
    let cold_second = cold
        .generate(LaneJob::new(second, greedy(24), far()))
        .unwrap();
    assert!(
        warm_second.reused_prompt_tokens > 20,
        "the system prompt should be reused, got {}",
        warm_second.reused_prompt_tokens
    );
    assert_eq!(cold_second.reused_prompt_tokens, 0);
    assert_eq!(warm_second.text, cold_second.text);
    assert!(warm_second.text.contains("Paris"), "{:?}", warm_second.text);
}

#[test]
fn cancelling_mid_prompt_stops_inside_decode_and_the_lane_still_answers() {
    // One batch holds the whole prompt, so only llama.cpp's abort callback
    // can stop it: the progress hook cancels right before that decode.
    let lane = LocalLane::start(LocalConfig {
        batch_size: 1024,
        ..real_config()
    })
    .unwrap();
    let long: String = (0..300).map(|i| format!("item{} ", i % 50)).collect();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let done = lane
        .submit_with_progress(
            LaneJob::new(vec![ChatMessage::user(long)], greedy(8), far()).with_cancel(cancel),
            move |p| {
                if p.done == 0 {
                    trigger.cancel();
                }
            },
        )
        .wait()
        .unwrap();
    assert_eq!(done.finish_reason, FinishReason::Cancelled);
    assert!(done.aborted_in_decode, "the abort callback did not fire");
    assert_eq!(done.completion_tokens, 0);
    let after = ask(&lane, "What is the capital of France?", 24);
    assert_eq!(
        after.reused_prompt_tokens, 0,
        "nothing aborted may stay cached"
    );
    assert!(after.text.contains("Paris"), "{:?}", after.text);
}

/// `response_format` on the library's local lane (issue 24): the grammar
/// makes every answer schema-valid JSON, greedy and sampled alike; an
/// answer cut short by `max_tokens` is the answer as far as it went,
/// with finish reason `length` (as OpenAI returns it), never whole.
#[test]
fn response_format_makes_every_answer_schema_valid_json() {
    use edgecloud::ResponseFormat;
    let lane = shared_lane();
    let format = ResponseFormat::json_schema(
        "answer",
        serde_json::json!({"type": "object", "additionalProperties": false,
            "required": ["answer", "confidence"],
            "properties": {"answer": {"type": "string", "maxLength": 60},
                "confidence": {"enum": ["low", "medium", "high"]}}}),
    );
    let prompts = [
        "What is the capital of Italy?",
        "How many legs does a spider have?",
        "Write a poem about the sea.",
        "Is the sun a star?",
        "Say hello.",
    ];
    for (i, prompt) in prompts.into_iter().enumerate() {
        let sampling = Sampling {
            max_tokens: 64,
            // Greedy and sampled: both go through the grammar.
            temperature: if i % 2 == 0 { 0.0 } else { 0.8 },
            seed: Some(i as u64),
            response_format: Some(format.clone()),
            ..Sampling::default()
        };
        let done = lane
            .generate(LaneJob::new(
                vec![ChatMessage::user(prompt)],
                sampling,
                far(),
            ))
            .unwrap_or_else(|e| panic!("{prompt}: {e}"));
        assert_eq!(
            format.accepts(&done.text),
            Ok(()),
            "{prompt}: {}",
            done.text
        );
    }
    // json_object: any object.
    let done = lane
        .generate(LaneJob::new(
            vec![ChatMessage::user("Describe a cat.")],
            Sampling {
                response_format: Some(ResponseFormat::JsonObject),
                ..greedy(48)
            },
            far(),
        ))
        .unwrap();
    assert!(
        serde_json::from_str::<serde_json::Value>(&done.text).is_ok_and(|v| v.is_object()),
        "{}",
        done.text
    );
    // Two tokens cannot close the object: the answer as far as it went,
    // cut by its length.
    let cut = lane
        .generate(LaneJob::new(
            vec![ChatMessage::user("Say hello.")],
            Sampling {
                response_format: Some(format.clone()),
                ..greedy(2)
            },
            far(),
        ))
        .unwrap();
    assert_eq!(cut.finish_reason, FinishReason::Length);
    assert!(format.accepts(&cut.text).is_err(), "{}", cut.text);
}
