//! `edgecloud model`: inspect, validate and generate GGUF files.

use std::process::ExitCode;

/// Subcommands of `edgecloud model`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ModelCommand {}

pub(crate) fn run(cmd: ModelCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
