//! `edgecloud local`: the local lane's synchronous diagnostic.

use std::process::ExitCode;

/// Arguments of `edgecloud local`.
#[derive(Debug, clap::Args)]
pub(crate) struct LocalArgs {}

pub(crate) fn run(_args: LocalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
