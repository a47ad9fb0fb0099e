//! edgecloud's integration tests: one binary, one shared `support` module.

mod bench;
mod capi_header;
mod cli;
mod cli_conventions;
mod cloud;
mod cloud_down;
mod cloud_tls;
mod consensus;
mod devices;
mod ensure_deps;
mod error_chain;
mod fetch;
mod gguf;
mod gguf_catalogue;
mod harness;
mod local;
mod modelref;
mod pool;
mod probe;
mod quality;
mod real_model;
mod serve;
mod serve_fuzz;
mod source_rules;
mod structured;
mod support;
