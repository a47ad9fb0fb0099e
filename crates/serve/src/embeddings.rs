//! `POST /v1/embeddings`: OpenAI's embeddings request read into inputs
//! (`input` a string, an array of strings, a token array or an array of
//! token arrays; `encoding_format` `float` or `base64`; `dimensions` only
//! as the model's own width; `user` ignored), the vectors written back in
//! OpenAI's shape, and the [`Embedder`] seam the handler calls: the local
//! lane's embeddings (`LocalLane::submit_embed`, feature `local`), which
//! run on the lane's worker between its generation steps, take no lane
//! slot and so never answer 503 `lanes_busy`.
//!
//! The route the request's `model` selects decides who embeds: the
//! server's local model, or, on a route with `embeddings = "cloud"`, the
//! cloud endpoint's `/v1/embeddings` (see `cloud_embeddings`). A server
//! without a local lane answers 400 `model_cannot_embed` on the other
//! routes.
//!
//! This module must not run generation or touch the harness.

use super::embedder::{BoxFuture, Embedder, Input, Params, Vectors, MAX_INPUTS};
use super::wire::{self, ApiError, INVALID_REQUEST};
use edgecloud_core::lane::Lane;
use edgecloud_core::request::{ChatMessage, Sampling};
use serde_json::{json, Map, Value};

/// An embedder whose requests are counted by its lane (what
/// `App::embedder_for` hands out).
#[derive(Debug)]
pub(crate) struct Counted {
    pub(crate) inner: std::sync::Arc<dyn Embedder>,
    pub(crate) metrics: std::sync::Arc<super::metrics::Metrics>,
}

impl Embedder for Counted {
    fn lane(&self) -> Lane {
        self.inner.lane()
    }

    fn embed(&self, params: &Params) -> BoxFuture<'static, Result<Vectors, ApiError>> {
        let (lane, metrics) = (self.inner.lane(), self.metrics.clone());
        let work = self.inner.embed(params);
        Box::pin(async move {
            let out = work.await;
            metrics.embeddings(lane, out.is_err());
            out
        })
    }

    fn count_prompt(
        &self,
        messages: &[ChatMessage],
        sampling: &Sampling,
    ) -> Option<Result<u64, ApiError>> {
        self.inner.count_prompt(messages, sampling)
    }
}

/// Reads an embeddings body; every mistake is a 400 naming the field.
pub(crate) fn parse(body: &[u8]) -> Result<Params, ApiError> {
    let obj = wire::json_object(body)?;
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(ApiError::invalid("model", "`model` is required").code("missing_model"))
        }
        Some(_) => {
            return Err(ApiError::invalid("model", "`model` must be a string").code("invalid_type"))
        }
    };
    let inputs = inputs(&obj)?;
    let base64 = match obj.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("`encoding_format` must be \"float\" or \"base64\", not {other}"),
            )
            .code("invalid_value"))
        }
    };
    let dimensions = match obj.get("dimensions") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().filter(|&d| d > 0).ok_or_else(|| {
            ApiError::invalid(
                "dimensions",
                format!("`dimensions` must be a positive integer, not {v}"),
            )
            .code("invalid_type")
        })?),
    };
    Ok(Params {
        model,
        inputs,
        base64,
        dimensions,
    })
}

/// `input`: a string, an array of strings, one token array, or an array
/// of token arrays; none of them empty.
fn inputs(obj: &Map<String, Value>) -> Result<Vec<Input>, ApiError> {
    let bad = |message: String| ApiError::invalid("input", message).code("invalid_value");
    let items = match obj.get("input") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("input", "`input` is required").code("missing_input"))
        }
        Some(Value::String(s)) => return text(s, None).map(|t| vec![t]).map_err(bad),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(bad(format!(
                "`input` must be a string, an array of strings or an array of token arrays, not {other}"
            )))
        }
    };
    if items.is_empty() {
        return Err(bad("`input` is an empty array".into()));
    }
    if items.len() > MAX_INPUTS {
        return Err(bad(format!(
            "`input` has {} items; at most {MAX_INPUTS} are accepted",
            items.len()
        )));
    }
    // One token array: integers all the way.
    if items.iter().all(Value::is_number) {
        return tokens(items, None).map(|t| vec![t]).map_err(bad);
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => text(s, Some(i)),
            Value::Array(ids) => tokens(ids, Some(i)),
            other => Err(format!(
                "`input[{i}]` must be a string or a token array, not {other}"
            )),
        })
        .collect::<Result<_, _>>()
        .map_err(bad)
}

fn at(index: Option<usize>) -> String {
    index.map_or_else(|| "`input`".to_string(), |i| format!("`input[{i}]`"))
}

fn text(s: &str, index: Option<usize>) -> Result<Input, String> {
    if s.is_empty() {
        return Err(format!("{} is an empty string", at(index)));
    }
    Ok(Input::Text(s.to_string()))
}

fn tokens(ids: &[Value], index: Option<usize>) -> Result<Input, String> {
    if ids.is_empty() {
        return Err(format!("{} is an empty token array", at(index)));
    }
    ids.iter()
        .map(|v| {
            v.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    format!(
                        "{} holds {v}, not a token id (a whole number from 0)",
                        at(index)
                    )
                })
        })
        .collect::<Result<_, _>>()
        .map(Input::Tokens)
}

/// The response body, as OpenAI shapes it.
pub(crate) fn body(model: &str, out: Vectors, base64: bool) -> Value {
    let data: Vec<Value> = out
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                Value::String(base64_f32(&v))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens},
    })
}

/// A vector as OpenAI's `base64` encoding sends it: the little-endian
/// bytes of each f32, in standard base64 with padding.
fn base64_f32(v: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The answer when the server has nothing to embed with.
pub(crate) fn no_embedder(model: &str) -> ApiError {
    ApiError::new(
        400,
        INVALID_REQUEST,
        format!(
            "the model `{model}` cannot give embeddings on this server: it has no local model \
             (a route with `embeddings = \"cloud\"` passes them through to the cloud lane)"
        ),
    )
    .param("model")
    .code("model_cannot_embed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedder::check_dimensions;

    fn err(body: &str) -> ApiError {
        parse(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn every_input_shape_reads_and_bad_ones_name_the_field() {
        let p = parse(br#"{"model":"m","input":"hi"}"#).unwrap();
        assert_eq!(p.inputs, vec![Input::Text("hi".into())]);
        assert!(!p.base64);
        let p = parse(br#"{"model":"m","input":["a","b"],"encoding_format":"base64","user":"u"}"#)
            .unwrap();
        assert_eq!(p.inputs.len(), 2);
        assert!(p.base64);
        let p = parse(br#"{"model":"m","input":[1,2,3]}"#).unwrap();
        assert_eq!(p.inputs, vec![Input::Tokens(vec![1, 2, 3])]);
        let p = parse(br#"{"model":"m","input":[[1],[2,3]],"dimensions":576}"#).unwrap();
        assert_eq!(
            p.inputs,
            vec![Input::Tokens(vec![1]), Input::Tokens(vec![2, 3])]
        );
        assert_eq!(p.dimensions, Some(576));

        for (body, param, said) in [
            (r#"{"input":"x"}"#, "model", "required"),
            (r#"{"model":"m"}"#, "input", "required"),
            (r#"{"model":"m","input":""}"#, "input", "empty string"),
            (r#"{"model":"m","input":[]}"#, "input", "empty array"),
            (r#"{"model":"m","input":["a",""]}"#, "input", "`input[1]`"),
            (
                r#"{"model":"m","input":[[1],[]]}"#,
                "input",
                "empty token array",
            ),
            (r#"{"model":"m","input":[1,-2]}"#, "input", "-2"),
            (
                r#"{"model":"m","input":["a",{"x":1}]}"#,
                "input",
                "input[1]",
            ),
            (r#"{"model":"m","input":7}"#, "input", "must be"),
            (
                r#"{"model":"m","input":"a","encoding_format":"int8"}"#,
                "encoding_format",
                "int8",
            ),
            (
                r#"{"model":"m","input":"a","dimensions":0}"#,
                "dimensions",
                "positive",
            ),
        ] {
            let e = err(body);
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}");
            assert!(e.message.contains(said), "{body}: {}", e.message);
        }
    }

    #[test]
    fn dimensions_other_than_the_width_are_refused_by_name() {
        assert!(check_dimensions(None, 576).is_ok());
        assert!(check_dimensions(Some(576), 576).is_ok());
        let e = check_dimensions(Some(256), 576).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("dimensions"));
        assert!(e.message.contains("256") && e.message.contains("576"));
    }

    #[test]
    fn base64_is_the_little_endian_f32_bytes() {
        // 1.0f32 = 00 00 80 3f; 2.0 = 00 00 00 40.
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(base64_f32(&[]), "");
        let b = body(
            "m",
            Vectors {
                vectors: vec![vec![1.0], vec![2.0]],
                prompt_tokens: 3,
            },
            false,
        );
        assert_eq!(b["object"], "list");
        assert_eq!(b["data"][1]["index"], 1);
        assert_eq!(b["data"][1]["embedding"][0], 2.0);
        assert_eq!(b["usage"]["total_tokens"], 3);
    }
}
