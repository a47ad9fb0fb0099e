//! Anthropic's Messages API wire format, in one place: the one reader of
//! a `POST /v1/messages` (or `count_tokens`) body into the chat
//! vocabulary (`request`: [`parse_messages`]) and the shapes of its
//! answers: the whole `message`, the stream's events, the error body and
//! the token count (`response`).
//!
//! Who uses it: `serve` reads requests and writes answers with it (the
//! harness never learns a request came in this way). It must not do I/O,
//! know HTTP statuses (serve chooses each error's status and `type`) or
//! know edgecloud's own extension fields (the `edgecloud` object stays
//! with serve).

mod request;
mod response;

pub use request::{parse_messages, Body, MessagesRequest};
pub use response::{content, error_body, event, message, tokens_count, Ending, Events, StopReason};
