//! edgecloud's integration tests: one binary, one shared `support` module.

mod bench;
mod cli;
mod cloud;
mod gguf;
mod harness;
mod local;
mod quality;
mod serve;
mod support;
