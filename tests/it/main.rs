//! edgecloud's integration tests: one binary, one shared `support` module.

mod bench;
mod cli;
mod cloud;
mod cloud_down;
mod gguf;
mod harness;
mod local;
mod serve;
mod support;
