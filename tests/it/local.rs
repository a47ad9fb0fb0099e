//! Integration tests: the local lane on real llama.cpp with generated models.

use crate::support::models::tiny_model;
use edgecloud::local::{LocalConfig, LocalError, LocalLane};
use edgecloud::{CancellationToken, ChatMessage, FinishReason, LaneJob, Sampling};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

fn config() -> LocalConfig {
    LocalConfig {
        threads: Some(2),
        ..LocalConfig::new(tiny_model())
    }
}

/// One lane shared by the tests that don't care about cache state.
fn shared_lane() -> &'static LocalLane {
    static LANE: OnceLock<LocalLane> = OnceLock::new();
    LANE.get_or_init(|| LocalLane::start(config()).expect("tiny model loads"))
}

fn seeded(max_tokens: u32, seed: u64) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.9,
        top_p: 0.95,
        top_k: 40,
        seed: Some(seed),
        stop: Vec::new(),
        ..Sampling::default()
    }
}

fn chat(user: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are a terse assistant on an edge device."),
        ChatMessage::user(user),
    ]
}

/// A prompt long enough to span several prompt batches.
fn long_user_text(words: usize) -> String {
    (0..words)
        .map(|i| format!("word{} ", i % 97))
        .collect::<String>()
}

#[test]
fn generates_up_to_max_tokens_with_logprobs_and_timings() {
    let lane = shared_lane();
    let done = lane
        .generate(LaneJob::new(chat("Hello there"), seeded(12, 1), far()))
        .unwrap();
    assert!(done.completion_tokens >= 1 && done.completion_tokens <= 12);
    if done.finish_reason == FinishReason::Length {
        assert_eq!(done.completion_tokens, 12);
    } else {
        assert_eq!(done.finish_reason, FinishReason::Stop);
    }
    assert_eq!(done.token_logprobs.len(), done.completion_tokens as usize);
    assert!(done
        .token_logprobs
        .iter()
        .all(|l| l.is_finite() && *l <= 0.0));
    let mean = done.mean_logprob.unwrap();
    let min = done.min_logprob.unwrap();
    assert!(min <= mean && mean <= 0.0);
    assert!(done.prompt_tokens > 10);
    let t = &done.timings;
    assert!(t.ttft.unwrap() <= t.total);
    assert!(t.prompt_tokens_per_s.unwrap() > 0.0);
    assert!(!done.aborted_in_decode);
    assert!(lane.info().load_time > Duration::ZERO);
    assert_eq!(lane.info().threads, 2);
}

#[test]
fn streamed_pieces_concatenate_to_the_text() {
    let lane = shared_lane();
    let streamed = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&streamed);
    let done = lane
        .generate(
            LaneJob::new(
                chat("Write something long: héllo 世界 🎉"),
                seeded(64, 3),
                far(),
            )
            .with_sink(move |piece| sink.lock().unwrap().push(piece.to_owned())),
        )
        .unwrap();
    let pieces = streamed.lock().unwrap();
    assert!(!pieces.is_empty());
    assert!(pieces.iter().all(|p| !p.is_empty()));
    assert_eq!(pieces.concat(), done.text);
}

#[test]
fn same_seed_same_text_and_different_seed_differs() {
    let lane = shared_lane();
    let run = |seed| {
        lane.generate(LaneJob::new(
            chat("Tell me a story"),
            seeded(24, seed),
            far(),
        ))
        .unwrap()
        .text
    };
    let a = run(11);
    assert_eq!(a, run(11));
    let others: Vec<String> = (12..16).map(run).collect();
    assert!(
        others.iter().any(|o| *o != a),
        "seeds 12-15 all gave seed 11's text"
    );
}

#[test]
fn stop_string_cuts_the_text_and_is_never_streamed() {
    let lane = shared_lane();
    let job = || LaneJob::new(chat("Count for me"), seeded(40, 5), far());
    let full = lane.generate(job()).unwrap().text;
    // Pick a stop string from the middle of the known output.
    let chars: Vec<char> = full.chars().collect();
    assert!(
        chars.len() >= 8,
        "need some output to pick a stop string from: {full:?}"
    );
    let stop: String = chars[4..7].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];
    let streamed = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&streamed);
    let mut sampling = seeded(40, 5);
    sampling.stop = vec![stop.clone()];
    let done = lane
        .generate(
            LaneJob::new(chat("Count for me"), sampling, far())
                .with_sink(move |p| sink.lock().unwrap().push_str(p)),
        )
        .unwrap();
    assert_eq!(done.finish_reason, FinishReason::Stop);
    assert_eq!(done.text, expected);
    assert_eq!(*streamed.lock().unwrap(), expected);
}

/// The same thread count in every step of both lanes: from 512 cache
/// cells llama.cpp's attention result depends in its last bits on the
/// thread count, and this test compares two runs bit for bit.
fn fixed_threads() -> LocalConfig {
    LocalConfig {
        thread_policy: edgecloud::local::ThreadPolicy::Fixed,
        ..config()
    }
}

#[test]
fn prefix_reuse_gives_the_same_output_as_a_cold_context() {
    let warm = LocalLane::start(fixed_threads()).unwrap();
    let cold = LocalLane::start(fixed_threads()).unwrap();
    let system = ChatMessage::system(long_user_text(150));
    let first = vec![system.clone(), ChatMessage::user("First question?")];
    let second = vec![system, ChatMessage::user("Second question?")];
    warm.generate(LaneJob::new(first, seeded(8, 9), far()))
        .unwrap();
    let warm_second = warm
        .generate(LaneJob::new(second.clone(), seeded(16, 9), far()))
        .unwrap();
    let cold_second = cold
        .generate(LaneJob::new(second, seeded(16, 9), far()))
        .unwrap();
    assert!(
        warm_second.reused_prompt_tokens > 100,
        "shared system prompt should be reused, got {}",
        warm_second.reused_prompt_tokens
    );
    assert_eq!(cold_second.reused_prompt_tokens, 0);
    assert_eq!(warm_second.text, cold_second.text);
    assert_eq!(
        warm_second.token_logprobs.len(),
        cold_second.token_logprobs.len()
    );
}

#[test]
fn cancel_inside_prompt_decode_aborts_llama_decode_and_the_lane_recovers() {
    // One batch holds the whole prompt, so only llama.cpp's abort callback
    // can stop it: the progress hook cancels right before that decode call,
    // after the lane's own between-batch check has passed.
    let lane = LocalLane::start(LocalConfig {
        batch_size: 2048,
        ..fixed_threads()
    })
    .unwrap();
    let messages = chat(&long_user_text(400));
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let done = lane
        .submit_with_progress(
            LaneJob::new(messages.clone(), seeded(8, 2), far()).with_cancel(cancel),
            move |p| {
                if p.done == 0 {
                    trigger.cancel();
                }
            },
        )
        .wait()
        .unwrap();
    assert_eq!(done.finish_reason, FinishReason::Cancelled);
    assert!(
        done.aborted_in_decode,
        "llama_decode ran to the end: the abort callback did not fire"
    );
    assert_eq!(done.completion_tokens, 0);
    assert_eq!(done.text, "");

    // The context is consistent afterwards: same answer as a fresh lane.
    let after = lane
        .generate(LaneJob::new(messages.clone(), seeded(12, 4), far()))
        .unwrap();
    let fresh = LocalLane::start(fixed_threads())
        .unwrap()
        .generate(LaneJob::new(messages, seeded(12, 4), far()))
        .unwrap();
    assert_eq!(
        after.reused_prompt_tokens, 0,
        "nothing of the aborted prompt may stay cached"
    );
    assert_eq!(after.text, fresh.text);
}

#[test]
fn cancel_mid_generation_returns_partial_text() {
    let lane = shared_lane();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let pieces = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&pieces);
    let done = lane
        .generate(
            LaneJob::new(chat("Go on and on"), seeded(200, 8), far())
                .with_cancel(cancel)
                .with_sink(move |_| {
                    if seen.fetch_add(1, Ordering::SeqCst) + 1 == 3 {
                        trigger.cancel();
                    }
                }),
        )
        .unwrap();
    assert_eq!(done.finish_reason, FinishReason::Cancelled);
    assert!(done.completion_tokens >= 3 && done.completion_tokens < 200);
    // The lane keeps working.
    let next = lane
        .generate(LaneJob::new(chat("Again"), seeded(4, 8), far()))
        .unwrap();
    assert!(next.finish_reason.is_complete());
}

#[test]
fn a_passed_deadline_stops_the_job_before_it_decodes() {
    let lane = shared_lane();
    let done = lane
        .generate(LaneJob::new(chat("Too late"), seeded(8, 1), Instant::now()))
        .unwrap();
    assert_eq!(done.finish_reason, FinishReason::Deadline);
    assert_eq!(done.completion_tokens, 0);
}

#[test]
fn a_panicking_sink_is_an_error_and_the_lane_keeps_working() {
    let lane = shared_lane();
    let err = lane
        .generate(
            LaneJob::new(chat("Boom"), seeded(8, 1), far()).with_sink(|_| panic!("sink exploded")),
        )
        .unwrap_err();
    assert!(matches!(err, LocalError::Panicked { ref detail } if detail.contains("sink exploded")));
    let next = lane
        .generate(LaneJob::new(chat("Still there?"), seeded(4, 1), far()))
        .unwrap();
    assert!(next.finish_reason.is_complete());
}

#[test]
fn the_permit_is_released_before_the_result_is_seen() {
    struct Permit(Arc<AtomicUsize>);
    impl Drop for Permit {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let lane = shared_lane();
    let released = Arc::new(AtomicUsize::new(0));
    lane.generate(
        LaneJob::new(chat("Hi"), seeded(4, 1), far()).with_permit(Permit(Arc::clone(&released))),
    )
    .unwrap();
    assert_eq!(released.load(Ordering::SeqCst), 1);
    // Also on the error path.
    let err = lane.generate(
        LaneJob::new(
            chat("Hi"),
            Sampling {
                max_tokens: 0,
                ..seeded(4, 1)
            },
            far(),
        )
        .with_permit(Permit(Arc::clone(&released))),
    );
    assert!(matches!(err, Err(LocalError::InvalidRequest(_))));
    assert_eq!(released.load(Ordering::SeqCst), 2);
}

#[test]
fn an_oversized_prompt_is_a_clear_error() {
    let lane = LocalLane::start(LocalConfig {
        context_size: Some(64),
        ..config()
    })
    .unwrap();
    let err = lane
        .generate(LaneJob::new(
            chat(&long_user_text(200)),
            seeded(4, 1),
            far(),
        ))
        .unwrap_err();
    // llama.cpp rounds tiny contexts up (to 256 tokens here).
    assert!(
        matches!(err, LocalError::PromptTooLong { prompt_tokens, context_size } if prompt_tokens > context_size),
        "{err}"
    );
}

#[test]
fn a_missing_model_is_an_error_from_start() {
    let err = LocalLane::start(LocalConfig::new("/nonexistent/model.gguf")).unwrap_err();
    assert!(matches!(err, LocalError::InvalidModel(_)), "{err}");
    // The message is in the lane's words; the cause is the source, once.
    assert_eq!(err.to_string(), "invalid model file");
    assert_eq!(
        edgecloud::error_chain(&err),
        "invalid model file: /nonexistent/model.gguf: no such file"
    );
}

#[test]
fn shutdown_stops_the_worker_and_later_jobs_fail_cleanly() {
    let lane = LocalLane::start(config()).unwrap();
    let clone = lane.clone();
    assert!(lane.shutdown(Duration::from_secs(30)));
    let err = clone
        .generate(LaneJob::new(chat("Anyone?"), seeded(4, 1), far()))
        .unwrap_err();
    assert!(matches!(err, LocalError::WorkerGone));
}

#[test]
fn tokenizer_counts_match_the_prompt() {
    let lane = shared_lane();
    assert!(lane.count_tokens("hello world") >= 2);
    assert_eq!(lane.count_tokens(""), 0);
}

#[test]
fn a_file_llama_cpp_refuses_after_validation_gets_llama_cpps_reason() {
    // A valid GGUF whose pre-tokenizer llama.cpp does not know: our
    // validator accepts it, llama.cpp's loader refuses it with an opaque null.
    let mut bytes = std::fs::read(tiny_model()).unwrap();
    let key = b"tokenizer.ggml.pre";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // value type (u32 = 8, string), length (u64 = 7), then "default"
    let value = at + 4 + 8;
    assert_eq!(&bytes[value..value + 7], b"default");
    bytes[value..value + 7].copy_from_slice(b"zzzzzzz");
    let path = crate::support::models::write_temp("unknown-pre-tokenizer.gguf", &bytes);
    edgecloud::gguf::validate(&path).expect("structurally valid");
    let err = LocalLane::start(LocalConfig::new(&path)).unwrap_err();
    assert!(matches!(err, LocalError::ModelLoad { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("zzzzz"),
        "llama.cpp's reason should be in: {message}"
    );
}

#[test]
fn malformed_files_are_refused_before_llama_cpp_and_the_process_survives() {
    let good = std::fs::read(tiny_model()).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        (
            "bad-magic",
            b"GGUX".iter().chain(&good[4..]).copied().collect(),
        ),
        ("truncated", good[..good.len() / 3].to_vec()),
        ("header-only", good[..64].to_vec()),
    ];
    for (name, bytes) in cases {
        let path = crate::support::models::write_temp(name, &bytes);
        let err = LocalLane::start(LocalConfig::new(&path)).unwrap_err();
        assert!(matches!(err, LocalError::InvalidModel(_)), "{name}: {err}");
    }
    // And the lane machinery still works.
    assert!(shared_lane()
        .generate(LaneJob::new(chat("ok?"), seeded(2, 1), far()))
        .is_ok());
}

/// Contract point 14's lever: the thread governor may change how many
/// threads a step uses at any step. Under 512 cache cells llama.cpp's CPU
/// kernels give the same numbers whatever the thread count (from 512 on,
/// a single-token step splits attention across the threads, which moves
/// the last bits: docs/busy-device.md), so there the same greedy request
/// with one thread, two, and the adaptive policy gives the same tokens and
/// log-probabilities. The adaptive lane says it governs (it could not if
/// the context's thread count were out of reach), and every step of a job
/// is counted under the thread count it used.
#[test]
fn answers_do_not_depend_on_the_thread_count_and_each_step_is_counted() {
    use edgecloud::local::ThreadPolicy;
    let greedy = Sampling {
        temperature: 0.0,
        ..seeded(40, 1)
    };
    let run = |threads: usize, thread_policy: ThreadPolicy| {
        let lane = LocalLane::start(LocalConfig {
            threads: Some(threads),
            thread_policy,
            ..config()
        })
        .unwrap();
        let info = lane.info().clone();
        let done = lane
            .generate(LaneJob::new(
                chat(&long_user_text(25)),
                greedy.clone(),
                far(),
            ))
            .unwrap();
        assert!(done.prompt_tokens + done.completion_tokens < 256);
        (info, done)
    };
    let (one_info, one) = run(1, ThreadPolicy::Fixed);
    let (_, two) = run(2, ThreadPolicy::Fixed);
    let (info, adaptive) = run(2, ThreadPolicy::Adaptive);
    assert_eq!(one.text, two.text);
    assert_eq!(one.token_logprobs, two.token_logprobs);
    assert_eq!(adaptive.text, two.text);
    assert_eq!(adaptive.token_logprobs, two.token_logprobs);

    assert_eq!(one_info.thread_policy, ThreadPolicy::Fixed);
    assert_eq!(info.thread_policy, ThreadPolicy::Adaptive);
    let used = |c: &edgecloud::local::LocalCompletion| {
        c.timings
            .decode_threads
            .iter()
            .map(|s| (s.threads, s.steps))
            .collect::<Vec<_>>()
    };
    // Every step: the prompt's (one per batch of up to 128 tokens) and
    // one per generated token but the last (sampled, never decoded).
    let steps = |c: &edgecloud::local::LocalCompletion| {
        c.prompt_tokens.div_ceil(128) + c.completion_tokens - 1
    };
    assert_eq!(used(&one), [(1, steps(&one))]);
    assert_eq!(used(&two), [(2, steps(&two))]);
    let counted: u32 = adaptive
        .timings
        .decode_threads
        .iter()
        .map(|s| s.steps)
        .sum();
    assert_eq!(counted, steps(&adaptive));
    assert!(adaptive
        .timings
        .decode_threads
        .iter()
        .all(|s| s.threads == 1 || s.threads == 2));
}

/// Three jobs on `lane`: `first`, an unrelated one, `first` again; the
/// first and the last answers.
fn come_back(
    lane: &LocalLane,
    first: &[ChatMessage],
) -> (
    edgecloud::local::LocalCompletion,
    edgecloud::local::LocalCompletion,
) {
    let a = lane
        .generate(LaneJob::new(first.to_vec(), seeded(12, 5), far()))
        .unwrap();
    lane.generate(LaneJob::new(
        chat(&long_user_text(120)),
        seeded(4, 6),
        far(),
    ))
    .unwrap();
    let again = lane
        .generate(LaneJob::new(first.to_vec(), seeded(12, 5), far()))
        .unwrap();
    (a, again)
}

fn coming_back_to() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(format!("Remember this: {}", long_user_text(150))),
        ChatMessage::user("What did I ask you to remember?"),
    ]
}

#[test]
fn a_conversation_the_lane_moved_on_from_comes_back_from_the_prompt_cache() {
    let (first, again) = come_back(
        &LocalLane::start(fixed_threads()).unwrap(),
        &coming_back_to(),
    );
    // All of the prompt but its last token (decoded for fresh logits).
    assert_eq!(again.reused_prompt_tokens, first.prompt_tokens - 1);
    assert_eq!(again.text, first.text);
    assert_eq!(again.token_logprobs.len(), first.token_logprobs.len());

    // Without the cache the unrelated job took its cells.
    let (_, uncached) = come_back(
        &LocalLane::start(LocalConfig {
            cache_ram: 0,
            ..fixed_threads()
        })
        .unwrap(),
        &coming_back_to(),
    );
    assert!(
        uncached.reused_prompt_tokens < 10,
        "reused {} without a prompt cache",
        uncached.reused_prompt_tokens
    );
}

#[test]
fn a_saved_conversation_is_restored_into_another_sequence_of_a_pool() {
    let lanes = LocalLane::start_shared(fixed_threads(), 2).unwrap();
    let messages = coming_back_to();
    let first = lanes[0]
        .generate(LaneJob::new(messages.clone(), seeded(12, 5), far()))
        .unwrap();
    // Lane 0 moves on (its cells are saved), lane 1 asks what lane 0 had.
    lanes[0]
        .generate(LaneJob::new(
            chat(&long_user_text(120)),
            seeded(4, 6),
            far(),
        ))
        .unwrap();
    let elsewhere = lanes[1]
        .generate(LaneJob::new(messages, seeded(12, 5), far()))
        .unwrap();
    assert_eq!(elsewhere.reused_prompt_tokens, first.prompt_tokens - 1);
    assert_eq!(elsewhere.text, first.text);
}
