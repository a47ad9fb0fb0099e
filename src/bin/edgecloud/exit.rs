//! The exit statuses every subcommand shares, and the usage error that
//! maps to status 2. `main` turns a subcommand's result into a status
//! here; subcommands end with these statuses only (`ExitCode::SUCCESS` and
//! `ExitCode::FAILURE` are [`OK`] and [`FAILURE`]), so the table in `--help`
//! and in docs/cli.md is the whole truth.

use std::fmt;
use std::process::ExitCode;

/// Completed: the command did what it was asked.
pub(crate) const OK: u8 = 0;
/// Failed while doing the work (a lane failed, a model did not load, a
/// file could not be read, no answer).
pub(crate) const FAILURE: u8 = 1;
/// The invocation is wrong: an unknown or conflicting flag, a bad value
/// (from a flag or an `EDGECLOUD_*` variable), an invalid config file (one
/// that cannot be read at all is a [`FAILURE`], like a model file).
/// clap exits with 2 for its own parse errors; [`Usage`] does for ours.
pub(crate) const USAGE: u8 = 2;
/// The deadline passed before a usable answer (as `timeout(1)` reports).
pub(crate) const DEADLINE: u8 = 124;
/// Interrupted by Ctrl-C (SIGINT), after stopping cleanly (128 + 2, what
/// a shell reports for a process the signal ended).
pub(crate) const INTERRUPTED: u8 = 130;

pub(crate) fn code(status: u8) -> ExitCode {
    ExitCode::from(status)
}

/// The table `--help` shows after each command's options.
pub(crate) const EXIT_HELP: &str = "\
Exit status (every subcommand): 0 success; 1 failure (a lane failed, no \
answer, a file could not be read); 2 usage (bad flag, value, environment \
variable or config file); 124 deadline exceeded; 130 interrupted (Ctrl-C). \
`serve` exits 0 when SIGINT/SIGTERM stops it: that is how a server ends.";

/// A mistake in how the command was invoked: exits with [`USAGE`].
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A usage error with this message.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

/// A usage error from another error (its whole chain in the message), e.g.
/// a config file that does not parse.
pub(crate) fn usage_from(err: &(dyn std::error::Error + 'static)) -> anyhow::Error {
    usage(edgecloud::error_chain(err))
}

/// Work stopped by Ctrl-C before the command could report anything else
/// (a model download): exits with [`INTERRUPTED`].
#[derive(Debug)]
pub(crate) struct Interrupted(pub(crate) String);

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// An interruption with this message.
pub(crate) fn interrupted(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Interrupted(message.into()))
}

/// The status an error ends the process with.
pub(crate) fn status_of(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.is::<Usage>()) {
        USAGE
    } else if err.chain().any(|e| e.is::<Interrupted>()) {
        INTERRUPTED
    } else {
        FAILURE
    }
}
