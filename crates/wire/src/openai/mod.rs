//! The OpenAI chat-completions wire format, in one place: the typed
//! request ([`ChatRequest`]) and the one reader that parses it from JSON
//! naming the offending field ([`parse_request`]), the single list of
//! fields no lane can honour (`refused`), and the typed whole response,
//! stream chunk, usage, error and model-list shapes (`response`, `error`);
//! the legacy text completion, its reader and shapes (`completions`);
//! the Responses API, its mapping onto a chat request and its objects and
//! events (`responses`).
//!
//! Who uses it: the cloud lane writes requests and reads responses, chunks
//! and errors; `serve` reads requests and writes responses, chunks and
//! errors; bench workloads read request bodies. It needs only serde, so it
//! compiles with any of those features. It must not do I/O, know HTTP
//! statuses (serve maps a [`FieldError`] to its 400) or know edgecloud's
//! own extension fields (the `edgecloud` object stays with serve, a
//! workload's `id`/`tag`/`expected` with bench).
//!
//! Types serialize their fields in alphabetical order, which is how the
//! `serde_json::json!` objects they replaced came out: the bytes on the
//! wire did not change.

mod completions;
mod error;
mod refused;
mod request;
mod response;
mod responses;

pub use completions::{parse_completion, LegacyLogprobs, TextCompletion};
pub use error::{
    error_message, provider_error, ErrorBody, ErrorObject, FieldError, FieldErrorKind,
};
pub use refused::REFUSED;
pub use request::{parse_request, string, unsigned, ChatRequest, ParseOptions, Parsed};
// The field readers the other wire formats share (one home of each
// field's type check).
pub(crate) use request::{boolean, float, number, present, seed, stop, tools, type_error};
pub use response::{
    to_json, ChatChunk, ChatCompletion, Delta, Ids, Model, ModelList, ToolCallDelta, Usage,
};
pub use responses::{fields, parse_responses, Echo, Ending, Meta};
