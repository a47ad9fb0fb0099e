//! [`CloudLane::embed`]: one `POST {base_url}/embeddings` to the cloud
//! endpoint (the same client, key, TLS, timeouts and body cap as the
//! lane's chat requests), under one deadline, and its answer checked into
//! vectors: JSON of OpenAI's shape, one vector per input in input order,
//! every vector the same width (the asked `dimensions` when given), every
//! number finite, floats or base64 as asked. Anything else is a typed
//! [`CloudError`] naming what is wrong.
//!
//! It takes no lane slot (an embeddings request is not a run: nothing to
//! arbitrate, no late worker) and does not touch the lane's reachability
//! state; it must not decide where embeddings go (the server does).

use super::body::BodyReader;
use super::{CloudLane, Inner, MAX_DETAIL_CHARS};
use crate::error::CloudError;
use crate::net::{self, ConnectProbe};
use edgecloud_core::lane::CancellationToken;
use edgecloud_wire::openai;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::time::Instant as TokioInstant;

/// One input to embed, as a client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbeddingInput {
    /// A text.
    Text(String),
    /// Token ids of the provider's tokenizer.
    Tokens(Vec<u32>),
}

/// An embeddings request for the cloud endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingsRequest {
    /// The model to ask for (`None`: the lane's configured model).
    pub model: Option<String>,
    /// The inputs, in order (at least one).
    pub input: Vec<EmbeddingInput>,
    /// Ask for OpenAI's `base64` encoding (smaller bodies) instead of
    /// float arrays; the answer is decoded either way.
    pub base64: bool,
    /// The width to ask for (models that can shorten their vectors).
    pub dimensions: Option<u64>,
}

/// The checked answer: one vector per input, in input order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CloudEmbeddings {
    /// The vectors.
    pub vectors: Vec<Vec<f32>>,
    /// The provider's `usage.prompt_tokens`, when it sent one.
    pub prompt_tokens: Option<u64>,
    /// The model the provider says answered.
    pub model: Option<String>,
}

impl CloudLane {
    /// Sends `request` to the endpoint's `/embeddings` and checks the
    /// answer (see the module docs). Every wait is bounded by `deadline`:
    /// no headers by then is [`CloudError::DeadlineBeforeHeaders`], no
    /// whole body by then [`CloudError::DeadlineBeforeFirstToken`].
    /// Dropping the future drops the exchange.
    pub async fn embed(
        &self,
        request: &EmbeddingsRequest,
        deadline: Instant,
    ) -> Result<CloudEmbeddings, CloudError> {
        let inner = &*self.inner;
        let model = request.model.as_deref().unwrap_or(&inner.config.model);
        tracing::debug!(
            endpoint = %inner.endpoint.display,
            model,
            inputs = request.input.len(),
            "cloud embeddings request starts"
        );
        let result = inner.embed(model, request, deadline).await;
        if let Err(e) = &result {
            tracing::debug!(kind = e.kind().as_str(), error = %e, "cloud embeddings request failed");
        }
        result
    }
}

impl Inner {
    async fn embed(
        &self,
        model: &str,
        request: &EmbeddingsRequest,
        deadline: Instant,
    ) -> Result<CloudEmbeddings, CloudError> {
        if Instant::now() >= deadline {
            return Err(CloudError::DeadlineBeforeHeaders);
        }
        let deadline = TokioInstant::from_std(deadline);
        let body = serde_json::to_vec(&wire_request(model, request))
            .expect("the request body is plain data");
        let mut http = self
            .client
            .post(self.endpoint.embeddings.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(body);
        if let Some(auth) = &self.auth {
            http = http.header(AUTHORIZATION, auth.clone());
        }
        let send = net::with_connect_probe(Arc::new(ConnectProbe::default()), http.send());
        let response = tokio::select! {
            biased;
            _ = tokio::time::sleep_until(deadline) => return Err(CloudError::DeadlineBeforeHeaders),
            r = send => r.map_err(|e| net::classify_send_error(e, &self.endpoint, &self.config))?,
        };
        let status = response.status().as_u16();
        // Nothing cancels an embeddings request but its deadline (and
        // dropping it).
        let cancel = CancellationToken::new();
        if !response.status().is_success() {
            return Err(self.status_error(response, deadline, &cancel).await);
        }
        let cap = self.config.limits.max_body_bytes;
        if response
            .content_length()
            .is_some_and(|len| len > cap as u64)
        {
            return Err(CloudError::BodyTooLarge { limit: cap });
        }
        let mut reader = BodyReader {
            response,
            deadline,
            cancel: &cancel,
            stall: self.config.stall_timeout,
            read: 0,
            cap,
        };
        let body = self.read_to_end(&mut reader, status).await?;
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| self.malformed_embeddings(&format!("the body is not JSON ({e})")))?;
        if let Some((message, code)) = openai::provider_error(&value) {
            return Err(self.provider_error(message, code));
        }
        read_answer(&value, request.input.len(), request.dimensions)
            .map_err(|detail| self.malformed_embeddings(&detail))
    }

    fn malformed_embeddings(&self, detail: &str) -> CloudError {
        CloudError::MalformedEmbeddings {
            detail: self.scrubber.scrub(detail, MAX_DETAIL_CHARS),
        }
    }
}

/// The body OpenAI's `/v1/embeddings` takes.
fn wire_request(model: &str, request: &EmbeddingsRequest) -> Value {
    let input: Vec<Value> = request
        .input
        .iter()
        .map(|i| match i {
            EmbeddingInput::Text(t) => json!(t),
            EmbeddingInput::Tokens(ids) => json!(ids),
        })
        .collect();
    let mut body = json!({
        "model": model,
        "input": input,
        "encoding_format": if request.base64 { "base64" } else { "float" },
    });
    if let Some(d) = request.dimensions {
        body["dimensions"] = json!(d);
    }
    body
}

/// The vectors of an embeddings answer, checked; `Err`: what is wrong.
fn read_answer(
    value: &Value,
    inputs: usize,
    dimensions: Option<u64>,
) -> Result<CloudEmbeddings, String> {
    let data = value
        .get("data")
        .and_then(Value::as_array)
        .ok_or("it has no `data` array")?;
    if data.len() != inputs {
        return Err(format!(
            "{} vectors for {inputs} input{}",
            data.len(),
            if inputs == 1 { "" } else { "s" }
        ));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (at, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            None | Some(Value::Null) => at,
            Some(v) => v
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < inputs)
                .ok_or_else(|| format!("`data[{at}].index` is {v}, not an input's index"))?,
        };
        let vector = match item.get("embedding") {
            Some(Value::Array(xs)) => xs
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| format!("`data[{at}].embedding` holds something not a number"))?,
            Some(Value::String(b64)) => unbase64_f32(b64)
                .ok_or_else(|| format!("`data[{at}].embedding` is not base64 of f32 values"))?,
            _ => return Err(format!("`data[{at}]` has no `embedding` array")),
        };
        if vector.is_empty() {
            return Err(format!("`data[{at}].embedding` is empty"));
        }
        if let Some(bad) = vector.iter().position(|x| !x.is_finite()) {
            return Err(format!(
                "`data[{at}].embedding[{bad}]` is not a finite number"
            ));
        }
        if slots[index].replace(vector).is_some() {
            return Err(format!("two vectors for input {index}"));
        }
    }
    let vectors: Vec<Vec<f32>> = slots
        .into_iter()
        .map(|v| v.expect("`inputs` distinct indexes below `inputs` fill every slot"))
        .collect();
    let width = vectors[0].len();
    if let Some(i) = vectors.iter().position(|v| v.len() != width) {
        return Err(format!(
            "vectors of different widths ({width} for input 0, {} for input {i})",
            vectors[i].len()
        ));
    }
    if let Some(d) = dimensions.filter(|&d| d != width as u64) {
        return Err(format!(
            "vectors of {width} dimensions where {d} were asked for"
        ));
    }
    Ok(CloudEmbeddings {
        prompt_tokens: value
            .get("usage")
            .and_then(|u| u.get("prompt_tokens"))
            .and_then(Value::as_u64),
        model: value
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        vectors,
    })
}

/// Standard base64 (padding optional) of little-endian f32 values, as
/// OpenAI's `base64` encoding sends them; `None` when it is not.
fn unbase64_f32(text: &str) -> Option<Vec<f32>> {
    let sextet = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let text = text.trim_end_matches('=').as_bytes();
    if text.len() % 4 == 1 {
        return None;
    }
    let mut bytes = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= sextet(c)? << (18 - 6 * i);
        }
        let whole = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        bytes.extend_from_slice(&whole[..chunk.len() - 1]);
    }
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(v: Value, inputs: usize, dims: Option<u64>) -> String {
        read_answer(&v, inputs, dims).unwrap_err()
    }

    #[test]
    fn answers_are_read_in_input_order_floats_or_base64() {
        let v = json!({"data": [
            {"index": 1, "embedding": [3.0, 4.0]},
            {"index": 0, "embedding": "AACAPwAAAEA="},
        ], "usage": {"prompt_tokens": 5}, "model": "m"});
        let out = read_answer(&v, 2, Some(2)).unwrap();
        assert_eq!(out.vectors, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
        assert_eq!(out.prompt_tokens, Some(5));
        assert_eq!(out.model.as_deref(), Some("m"));
        // No index: the array's order.
        let v = json!({"data": [{"embedding": [1.0]}, {"embedding": [2.0]}]});
        assert_eq!(read_answer(&v, 2, None).unwrap().vectors[1], vec![2.0]);
    }

    #[test]
    fn every_wrong_answer_says_what_is_wrong() {
        assert!(err(json!({"object": "list"}), 1, None).contains("no `data`"));
        assert!(err(json!({"data": []}), 2, None).contains("0 vectors for 2 inputs"));
        assert!(err(json!({"data": [{"embedding": [1.0]}]}), 2, None).contains("1 vectors"));
        assert!(err(json!({"data": [{"embedding": "!!"}]}), 1, None).contains("base64"));
        assert!(err(json!({"data": [{"embedding": ["x"]}]}), 1, None).contains("not a number"));
        assert!(err(json!({"data": [{"embedding": []}]}), 1, None).contains("empty"));
        assert!(err(json!({"data": [{"foo": 1}]}), 1, None).contains("no `embedding`"));
        // 1e39 is beyond f32: infinite once read.
        assert!(err(json!({"data": [{"embedding": [0.5, 1e39]}]}), 1, None)
            .contains("`data[0].embedding[1]` is not a finite number"));
        // NaN's bits in base64.
        let nan = "AADAfw==";
        assert!(err(json!({"data": [{"embedding": nan}]}), 1, None).contains("finite"));
        let two = json!({"data": [{"embedding": [1.0]}, {"embedding": [1.0, 2.0]}]});
        assert!(err(two, 2, None).contains("different widths"));
        let dup =
            json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]});
        assert!(err(dup, 2, None).contains("two vectors for input 0"));
        let out_of = json!({"data": [{"index": 7, "embedding": [1.0]}]});
        assert!(err(out_of, 1, None).contains("index"));
        assert!(
            err(json!({"data": [{"embedding": [1.0, 2.0]}]}), 1, Some(3))
                .contains("2 dimensions where 3")
        );
    }

    #[test]
    fn the_wire_request_passes_the_fields_through() {
        let r = EmbeddingsRequest {
            model: None,
            input: vec![
                EmbeddingInput::Text("a".into()),
                EmbeddingInput::Tokens(vec![1, 2]),
            ],
            base64: true,
            dimensions: Some(8),
        };
        let body = wire_request("m", &r);
        assert_eq!(
            body,
            json!({"model": "m", "input": ["a", [1, 2]], "encoding_format": "base64", "dimensions": 8})
        );
        let plain = wire_request(
            "m",
            &EmbeddingsRequest {
                dimensions: None,
                base64: false,
                ..r
            },
        );
        assert_eq!(plain["encoding_format"], "float");
        assert!(plain.get("dimensions").is_none());
    }
}
