//! `--json` and `--pretty`, the same in every subcommand that prints a
//! JSON report: exactly one line of JSON on stdout (so `jq`, `python3 -c
//! 'json.loads(input())'` or a line-oriented log shipper can read it),
//! indented only with `--pretty`.

use anyhow::Context as _;
use serde::Serialize;
use std::io::Write as _;

/// The report format flags.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct JsonArgs {
    /// Print one line of JSON on stdout instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// With --json: indent the JSON (several lines).
    #[arg(long, requires = "json")]
    pub(crate) pretty: bool,
}

impl JsonArgs {
    /// Writes `value` to stdout: one line, or indented with `--pretty`.
    pub(crate) fn print<T: Serialize + ?Sized>(&self, value: &T) -> anyhow::Result<()> {
        let text = if self.pretty {
            serde_json::to_string_pretty(value)
        } else {
            serde_json::to_string(value)
        }
        .context("encoding the JSON report")?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}").context("writing JSON to stdout")?;
        out.flush().context("writing JSON to stdout")?;
        Ok(())
    }
}
