//! edgecloud's integration tests: one binary, one shared `support` module.

mod bench;
mod cli;
mod cloud;
mod gguf;
mod gguf_catalogue;
mod harness;
mod local;
mod serve;
mod support;
