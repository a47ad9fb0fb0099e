//! The local lane's embeddings (`LocalLane::embed`) on the real
//! SmolLM2-135M-Instruct: a chat model whose GGUF names no pooling, so
//! the lane pools by `mean` (see `edgecloud::local::EmbeddingInfo`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use edgecloud::local::{EmbedInput, LocalConfig, LocalError, LocalLane, Pooling};
use edgecloud::{ChatMessage, LaneJob, Sampling};

use edgecloud::gguf::{write_model, Preset};

use crate::support::models::fresh_path;
use crate::support::real_model::{asked, smollm2};

fn config() -> LocalConfig {
    LocalConfig {
        threads: Some(2),
        context_size: Some(512),
        ..LocalConfig::new(smollm2())
    }
}

fn shared_lane() -> &'static LocalLane {
    static LANE: OnceLock<LocalLane> = OnceLock::new();
    LANE.get_or_init(|| LocalLane::start(config()).expect("the real model loads"))
}

fn texts(items: &[&str]) -> Vec<EmbedInput> {
    items.iter().map(|t| EmbedInput::from(*t)).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    // Unit vectors: the dot product is the cosine.
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
}

#[test]
fn the_same_text_gives_the_same_unit_vector_of_the_models_width() {
    let lane = shared_lane();
    let info = lane.embedding_info();
    assert_eq!(info.pooling, Pooling::Mean);
    assert_eq!(info.pooling_source, "default (the model names none)");
    assert_eq!(info.dimensions, 576, "SmolLM2-135M's n_embd");
    assert_eq!(info.max_input_tokens, 512);

    let text = "The lighthouse keeper climbed the stairs at dusk.";
    let first = lane.embed(texts(&[text])).unwrap();
    let again = lane.embed(texts(&[text])).unwrap();
    assert_eq!(first.vectors.len(), 1);
    assert_eq!(first.vectors[0].len(), 576);
    // The same input gives the same vector. Not bit for bit: the shared
    // lane may decode it beside another test's inputs, which changes the
    // order of llama.cpp's sums (the last float digit).
    let diff = first.vectors[0]
        .iter()
        .zip(&again.vectors[0])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "largest difference {diff}");
    assert!((norm(&first.vectors[0]) - 1.0).abs() < 1e-5);
    assert_eq!(first.pooling, Pooling::Mean);
    let tokens = lane.embedding_tokens(text).len() as u32;
    assert_eq!(first.input_tokens, vec![tokens]);
    assert_eq!(first.prompt_tokens, tokens);

    // The same text among others in one decode (other sequences beside
    // it) gives the same vector up to float rounding, each in its place.
    let batch = lane
        .embed(texts(&[
            "Something else entirely.",
            text,
            "And a third one.",
        ]))
        .unwrap();
    assert_eq!(batch.vectors.len(), 3);
    assert!(batch.vectors.iter().all(|v| (norm(v) - 1.0).abs() < 1e-5));
    assert!(cosine(&batch.vectors[1], &first.vectors[0]) > 0.9999);
    assert!(cosine(&batch.vectors[0], &first.vectors[0]) < 0.9999);
    assert_eq!(
        batch.prompt_tokens,
        batch.input_tokens.iter().sum::<u32>(),
        "the total is the sum of the inputs"
    );
}

#[test]
fn similar_texts_are_closer_than_unrelated_ones() {
    let lane = shared_lane();
    let out = lane
        .embed(texts(&[
            "The cat sat on the mat.",
            "A cat was sitting on the mat.",
            "Quarterly revenue grew by eight percent in Europe.",
        ]))
        .unwrap();
    let close = cosine(&out.vectors[0], &out.vectors[1]);
    let far = cosine(&out.vectors[0], &out.vectors[2]);
    assert!(close > far, "similar {close} vs unrelated {far}");
}

#[test]
fn token_ids_embed_as_the_text_they_came_from() {
    let lane = shared_lane();
    let text = "Edge devices answer quickly.";
    let ids = lane.embedding_tokens(text);
    assert!(!ids.is_empty());
    let out = lane
        .embed(vec![
            EmbedInput::Tokens(ids.clone()),
            EmbedInput::from(text),
        ])
        .unwrap();
    assert_eq!(out.input_tokens, vec![ids.len() as u32; 2]);
    // Same tokens, same positions, one decode: the same vector.
    assert!(cosine(&out.vectors[0], &out.vectors[1]) > 0.99999);
}

#[test]
fn bad_inputs_are_typed_errors_naming_the_input() {
    let lane = shared_lane();
    let n_vocab = 49_152;
    let err = lane
        .embed(vec![
            EmbedInput::from("fine"),
            EmbedInput::Tokens(vec![1, n_vocab]),
        ])
        .unwrap_err();
    assert!(
        matches!(err, LocalError::EmbeddingInput { index: 1, ref detail } if detail.contains("49152")),
        "{err}"
    );
    assert_eq!(err.kind(), "invalid_input");
    let err = lane
        .embed(vec![EmbedInput::Tokens(Vec::new())])
        .unwrap_err();
    assert!(
        matches!(err, LocalError::EmbeddingInput { index: 0, .. }),
        "{err}"
    );
    // No inputs, no vectors.
    assert!(lane.embed(Vec::new()).unwrap().vectors.is_empty());
}

#[test]
fn an_input_over_the_embedding_context_is_refused_and_the_lane_goes_on() {
    let lane = LocalLane::start(config()).unwrap();
    let long: String = (0..400).map(|i| format!("word{} ", i % 37)).collect();
    let err = lane
        .embed(texts(&["short", &long]))
        .expect_err("over 512 tokens");
    match &err {
        LocalError::EmbeddingTooLong {
            index,
            tokens,
            limit,
        } => {
            assert_eq!(*index, 1);
            assert!(*tokens > 512, "{tokens}");
            assert_eq!(*limit, 512);
        }
        other => panic!("expected EmbeddingTooLong, got {other}"),
    }
    assert_eq!(err.kind(), "context_length_exceeded");
    // The lane still generates and embeds.
    let done = lane
        .generate(LaneJob::new(
            asked("What is the capital of France?"),
            Sampling {
                max_tokens: 12,
                temperature: 0.0,
                ..Sampling::default()
            },
            Instant::now() + Duration::from_secs(600),
        ))
        .unwrap();
    assert!(done.text.contains("Paris"), "{}", done.text);
    assert_eq!(lane.embed(texts(&["short"])).unwrap().vectors.len(), 1);
}

#[test]
fn embeddings_taken_between_generation_steps_do_not_change_a_greedy_answer() {
    // Two lanes over one worker (a pool of two): one generates while the
    // worker takes embeddings turns for the other.
    let lanes = LocalLane::start_shared(config(), 2).unwrap();
    let job = || {
        LaneJob::new(
            vec![ChatMessage::user(
                "Write three sentences about the sea and the wind.",
            )],
            Sampling {
                max_tokens: 48,
                temperature: 0.0,
                ..Sampling::default()
            },
            Instant::now() + Duration::from_secs(600),
        )
    };
    let alone = lanes[0].generate(job()).unwrap();
    let reference = lanes[1].embed(texts(&["one", "two", "three"])).unwrap();
    let generating = lanes[0].submit(job());
    let embedded: Vec<_> = (0..4)
        .map(|_| lanes[1].submit_embed(texts(&["one", "two", "three"])))
        .collect();
    let beside = generating.wait().unwrap();
    assert_eq!(beside.text, alone.text);
    for ticket in embedded {
        let out = ticket.wait().unwrap();
        for (a, b) in out.vectors.iter().zip(&reference.vectors) {
            assert!(cosine(a, b) > 0.9999);
        }
    }
}

#[test]
fn pooling_that_gives_no_vector_per_input_is_refused() {
    for (pooling, said) in [(Pooling::None, "none"), (Pooling::Rank, "rank")] {
        let lane = LocalLane::start(LocalConfig {
            pooling: Some(pooling),
            ..config()
        })
        .unwrap();
        assert_eq!(lane.embedding_info().pooling_source, "configured");
        let err = lane.embed(texts(&["hello"])).unwrap_err();
        assert!(
            matches!(err, LocalError::CannotEmbed { ref detail } if detail.contains(said)),
            "{err}"
        );
        assert_eq!(err.kind(), "cannot_embed");
    }
    // An explicit pooling llama.cpp can do is used.
    let lane = LocalLane::start(LocalConfig {
        pooling: Some(Pooling::Last),
        ..config()
    })
    .unwrap();
    let out = lane.embed(texts(&["hello there"])).unwrap();
    assert_eq!(out.pooling, Pooling::Last);
    assert!((norm(&out.vectors[0]) - 1.0).abs() < 1e-5);
}

#[test]
fn inputs_of_unequal_lengths_in_one_decode_each_give_their_vector_alone() {
    // Issue 31: llama-server's `-np N` without `--kv-unified` gives each
    // sequence a KV stream of its own, and llama.cpp then splits a batch
    // into micro-batches of equal length per sequence: an input longer
    // than the shortest one in the batch is spread over several
    // micro-batches, and its pooled vector comes from the last one alone
    // (cosine 0.6-0.8 to the same input embedded alone). The lane's
    // embedding context has one KV cache for all its sequences (one
    // stream: every input whole in one micro-batch); were that lost, this
    // fails. Lengths from 1 to about 60 tokens, shortest in the middle.
    let lane = shared_lane();
    let mut items: Vec<String> = (0..16)
        .map(|i| {
            let words = ["river", "stone", "lantern", "harbour", "meadow", "engine"];
            (0..(i * 4 + 1))
                .map(|j| words[(i + j) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    items.insert(8, "Hi".to_string());
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    let together = lane.embed(texts(&refs)).unwrap();
    let lengths = &together.input_tokens;
    assert!(
        lengths.iter().max() > lengths.iter().min(),
        "unequal lengths: {lengths:?}"
    );
    for (i, text) in refs.iter().enumerate() {
        let alone = lane.embed(texts(&[text])).unwrap();
        let c = cosine(&together.vectors[i], &alone.vectors[0]);
        // Float rounding of a different decode shape only (llama-server
        // with one KV cache agrees with the lane to 0.99996).
        assert!(
            c > 0.999,
            "input {i} ({} tokens): cosine {c} to itself alone",
            lengths[i]
        );
    }
}

#[test]
fn a_bert_model_loads_as_a_model_of_its_own_and_embeds() {
    // A generated random-weight GGUF of llama.cpp's `bert` architecture
    // (no model hub here): bidirectional attention, `cls` pooling named in
    // the file, no output head.
    an_embedding_model_loads_as_a_model_of_its_own(Preset::TinyBert, "bert", Pooling::Cls);
}

#[test]
fn a_nomic_bert_model_loads_as_a_model_of_its_own_and_embeds() {
    // `nomic-bert` (nomic-embed-text's architecture), generated: rotary
    // positions, fused Q/K/V, a SwiGLU feed-forward, `mean` pooling named
    // in the file.
    an_embedding_model_loads_as_a_model_of_its_own(
        Preset::TinyNomicBert,
        "nomic-bert",
        Pooling::Mean,
    );
}

fn an_embedding_model_loads_as_a_model_of_its_own(
    preset: Preset,
    architecture: &str,
    pooling: Pooling,
) {
    let path = fresh_path(&format!("{preset}.gguf"));
    write_model(&path, preset, 7).unwrap();
    let lane = LocalLane::start(LocalConfig {
        threads: Some(2),
        ..LocalConfig::new(&path)
    })
    .expect("an embedding model loads");
    let info = lane.embedding_info();
    assert_eq!(info.pooling, pooling);
    assert_eq!(info.pooling_source, "model");
    assert_eq!(info.dimensions, 64);
    let items = ["The harbour at dawn.", "Quarterly revenue grew."];
    let first = lane.embed(texts(&items)).unwrap();
    assert_eq!(first.vectors.len(), 2);
    for v in &first.vectors {
        assert_eq!(v.len(), 64);
        assert!((norm(v) - 1.0).abs() < 1e-5);
    }
    // Random weights: the pooled vector moves little with the text, but
    // it does move.
    assert_ne!(first.vectors[0], first.vectors[1]);
    let again = lane.embed(texts(&items)).unwrap();
    assert_eq!(again.vectors, first.vectors, "deterministic");
    // Not a generative model: a generation job is refused, naming why.
    assert!(!lane.can_generate());
    let err = lane
        .generate(LaneJob::new(
            vec![ChatMessage::user("Hello?")],
            Sampling {
                max_tokens: 4,
                temperature: 0.0,
                ..Sampling::default()
            },
            Instant::now() + Duration::from_secs(600),
        ))
        .unwrap_err();
    assert!(
        matches!(err, LocalError::NotGenerative { architecture: ref a } if a == architecture),
        "{err}"
    );
    assert_eq!(err.kind(), "cannot_generate");
    assert!(err.to_string().contains("embedding model"), "{err}");
    // A chat model generates.
    assert!(shared_lane().can_generate());
}
