//! `edgecloud cloud`: the cloud lane's synchronous diagnostic.

use std::process::ExitCode;

/// Arguments of `edgecloud cloud`.
#[derive(Debug, clap::Args)]
pub(crate) struct CloudArgs {}

pub(crate) fn run(_args: CloudArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
