//! The wire formats edgecloud reads and writes, one module each, as serde
//! types and one reader per request body: [`openai`] (chat completions,
//! the legacy text completion, the Responses API), [`anthropic`] (the
//! Messages API) and [`ollama`] (Ollama's native `/api/*`).
//!
//! A wire format is a translation: it reads a body into the one
//! `Request` vocabulary of `edgecloud-core` and writes an outcome back in
//! its own shapes. It must not do I/O, know HTTP statuses (the front door,
//! `edgecloud-serve`, maps a [`openai::FieldError`] to its 400) or know
//! the harness: the cloud lane writes requests and reads answers with it,
//! `serve` reads requests and writes answers, bench workloads read
//! request bodies.

// The types mirror OpenAI's API reference field for field, under its names:
// that reference documents them (each type's own doc says which object it
// is).
#[allow(missing_docs)]
pub mod openai;

// As for `openai`: the types mirror Anthropic's API reference.
#[allow(missing_docs)]
pub mod anthropic;

// As for `openai`: the types mirror Ollama's API reference.
#[allow(missing_docs)]
pub mod ollama;
