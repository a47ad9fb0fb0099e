//! The errors a binding reports: one small [`ErrorKind`] that C statuses
//! and Python exception classes both map from, and [`Error`] (the kind, the
//! whole message chain, and the request field when one is at fault). This
//! module maps the library's errors and outcomes onto it; it must not
//! decide anything about a run.

use super::settings::SettingsError;
use crate::harness::{HarnessError, LaneStatus, Outcome, RunStatus};
use crate::lane::Lane;
use crate::modelref::ModelRefError;

/// What went wrong, in the few classes a caller acts on differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration or a setting is invalid (fix it; retrying will
    /// not help).
    Config,
    /// The local model could not be found, fetched, validated or loaded.
    Model,
    /// Every instance (every lane the run needed) was busy: retry later.
    Busy,
    /// The request is invalid; [`Error::field`] names the field when one
    /// is at fault.
    InvalidRequest,
    /// The deadline came before a usable answer.
    Deadline,
    /// The run was aborted.
    Aborted,
    /// Every lane that could run failed (the outcome says why, per lane).
    Lane,
    /// Anything else: the harness is shutting down, its runtime is gone,
    /// a thread could not start.
    Internal,
}

impl ErrorKind {
    /// Snake-case name, as bindings spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Model => "model",
            ErrorKind::Busy => "busy",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Deadline => "deadline",
            ErrorKind::Aborted => "aborted",
            ErrorKind::Lane => "lane",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind of a settled run that did not succeed; `None` for a run
    /// with a winner.
    pub fn of_outcome(outcome: &Outcome) -> Option<ErrorKind> {
        match outcome.status {
            RunStatus::Ok => None,
            RunStatus::DeadlineExceeded => Some(ErrorKind::Deadline),
            RunStatus::Aborted => Some(ErrorKind::Aborted),
            RunStatus::Failed if LaneStatus::all_busy(outcome.lanes.iter().map(|l| l.status)) => {
                Some(ErrorKind::Busy)
            }
            RunStatus::Failed => Some(ErrorKind::Lane),
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as a binding hands it over: its kind, the whole message chain,
/// and the request field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The class of the error.
    pub kind: ErrorKind,
    /// What is wrong, in words: every cause in the chain, once.
    pub message: String,
    /// For [`ErrorKind::InvalidRequest`]: the offending field's path
    /// (`messages[0].content`, `edgecloud.deadline_ms`), when one is.
    pub field: Option<String>,
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            field: None,
        }
    }

    /// An invalid request naming `field`.
    pub fn invalid_request(field: Option<String>, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::InvalidRequest,
            message: message.into(),
            field,
        }
    }

    /// The error of a settled run that did not succeed (`None` for a run
    /// with a winner), with the outcome's own words.
    pub fn of_outcome(outcome: &Outcome) -> Option<Self> {
        let kind = ErrorKind::of_outcome(outcome)?;
        let message = outcome
            .error
            .clone()
            .unwrap_or_else(|| format!("the run ended {}", outcome.status.as_str()));
        Some(Self::new(kind, message))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<HarnessError> for Error {
    fn from(e: HarnessError) -> Self {
        let kind = match &e {
            HarnessError::InvalidRequest(_) | HarnessError::UnknownRoute { .. } => {
                ErrorKind::InvalidRequest
            }
            HarnessError::Config(_) => ErrorKind::Config,
            HarnessError::LaneStart {
                lane: Lane::Local, ..
            } => ErrorKind::Model,
            HarnessError::LaneStart {
                lane: Lane::Cloud, ..
            } => ErrorKind::Config,
            HarnessError::PoolBusy { .. } | HarnessError::LaneBusy { .. } => ErrorKind::Busy,
            HarnessError::DeadlineExceeded { .. } => ErrorKind::Deadline,
            HarnessError::Aborted => ErrorKind::Aborted,
            HarnessError::Lane { .. } => ErrorKind::Lane,
            _ => ErrorKind::Internal,
        };
        let field = match &e {
            HarnessError::UnknownRoute { .. } => Some("model".to_string()),
            _ => None,
        };
        Self {
            kind,
            message: crate::error_chain(&e),
            field,
        }
    }
}

impl From<SettingsError> for Error {
    fn from(e: SettingsError) -> Self {
        Self::new(ErrorKind::Config, crate::error_chain(&e))
    }
}

impl From<ModelRefError> for Error {
    fn from(e: ModelRefError) -> Self {
        let kind = if e.is_usage() {
            ErrorKind::Config
        } else {
            ErrorKind::Model
        };
        Self::new(kind, crate::error_chain(&e))
    }
}

impl From<crate::harness::ConfigError> for Error {
    fn from(e: crate::harness::ConfigError) -> Self {
        Self::new(ErrorKind::Config, crate::error_chain(&e))
    }
}
