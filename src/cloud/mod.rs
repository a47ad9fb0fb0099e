//! The cloud lane: an OpenAI-compatible chat-completions client.
