//! The bench module's one error type. Each variant names what a caller (or
//! the person at the terminal) can fix: the workload line, the file, the
//! report directory.

use std::path::PathBuf;

/// Why a benchmark could not load its workload, write or read a report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// One line of a workload file is not a valid request. `line` counts
    /// from 1, as editors do.
    #[error("workload {source_name}, line {line}: {reason}")]
    WorkloadLine {
        /// The file (or built-in) the line came from.
        source_name: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The workload has no request at all.
    #[error("workload {source_name} has no requests")]
    EmptyWorkload {
        /// The file (or built-in) that was empty.
        source_name: String,
    },
    /// `builtin:NAME` named no built-in workload, or a bad count.
    #[error("unknown built-in workload `{name}` (known: builtin:short, builtin:long, builtin:chat, each with an optional :COUNT)")]
    UnknownBuiltin {
        /// What was asked for.
        name: String,
    },
    /// A bench setting is out of range (no policy, no deadline, zero runs).
    #[error("invalid bench settings: {reason}")]
    InvalidSettings {
        /// What is wrong.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done ("reading", "writing", "creating").
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// Two inputs of one calibration do not belong together (another
    /// model, another workload, embeddings of another width, items
    /// missing): what would give a silently wrong threshold.
    #[error("the calibration's inputs do not match: {what}")]
    Mismatch {
        /// What does not match, with both sides named.
        what: String,
    },
    /// A report file exists but is not what `edgecloud bench` writes.
    #[error("{}: not a bench report file: {reason}", path.display())]
    BadReport {
        /// The file.
        path: PathBuf,
        /// What did not parse.
        reason: String,
    },
}

impl BenchError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        BenchError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
