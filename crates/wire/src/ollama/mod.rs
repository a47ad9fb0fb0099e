//! Ollama's native API wire format (`/api/*`), in one place: the readers
//! of its request bodies into the chat vocabulary (`request`: chat,
//! generate, embed, and the `model` of the other calls) and the shapes of
//! its answers (`response`: the chat and generate objects, one per
//! NDJSON line while streaming; the model listings; embeddings; the
//! error body).
//!
//! Who uses it: `serve` reads requests and writes answers with it (the
//! harness never learns a request came in this way). It must not do I/O,
//! know HTTP statuses (serve chooses them) or know edgecloud's own
//! extension fields.

mod request;
mod response;

pub use request::{
    model_name, parse_chat, parse_embed, parse_generate, EmbedRequest, OllamaRequest, Options,
};
pub use response::{
    add_thinking, chat, embed, embedding, error_body, generate, line, nanos, parameter_size,
    rfc3339, tool_calls, Done, ModelListing, Timings, NEVER_EXPIRES,
};
