//! The harness's error types. A run that starts always ends in an
//! [`Outcome`](super::Outcome) (even a failed one); these errors are for what
//! prevents a run from starting, for configuration, and for the diagnostics
//! that return one lane's result directly.

use super::backend::BackendError;
use crate::lane::Lane;
use crate::request::InvalidRequest;
use std::path::PathBuf;

/// Why the harness could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The request is malformed.
    #[error(transparent)]
    InvalidRequest(#[from] InvalidRequest),
    /// The request named a route the harness does not have.
    #[error("unknown route `{name}`; known routes: {}", known.join(", "))]
    UnknownRoute {
        /// The name asked for.
        name: String,
        /// The routes there are.
        known: Vec<String>,
    },
    /// [`shutdown`](super::Harness::shutdown) was called; no new runs.
    #[error("the harness is shutting down")]
    ShuttingDown,
    /// A blocking call was made from inside an async runtime, where it
    /// could stall the runtime's threads. Use the async API there.
    #[error("a blocking harness call was made from inside an async runtime; use the async API")]
    BlockingInAsync,
    /// The runtime the harness runs on shut down before the run settled.
    #[error("the harness's runtime shut down before the run settled")]
    RuntimeGone,
    /// The harness could not start its own runtime or observer thread.
    #[error("could not start the harness")]
    Start(#[source] std::io::Error),
    /// A lane described by the configuration could not be started (model
    /// load, cloud settings).
    #[error("could not start the {lane} lane")]
    LaneStart {
        /// The lane.
        lane: Lane,
        /// The lane's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A diagnostic's lane is not configured.
    #[error("the {lane} lane is not configured")]
    LaneNotConfigured {
        /// The lane.
        lane: Lane,
    },
    /// Every instance of the [`Harness`](super::Harness) was busy (or,
    /// for a bounded wait, stayed busy until the wait ran out). A harness
    /// of one instance never says this: its busy lanes are reported in the
    /// run's outcome instead.
    #[error("all {instances} instances are busy")]
    PoolBusy {
        /// Instances in the pool.
        instances: usize,
    },
    /// A diagnostic's lane was busy (another worker holds its slot).
    #[error("the {lane} lane is busy")]
    LaneBusy {
        /// The lane.
        lane: Lane,
    },
    /// A diagnostic's lane failed.
    #[error("the {lane} lane failed")]
    Lane {
        /// The lane.
        lane: Lane,
        /// What it said.
        #[source]
        error: BackendError,
    },
    /// A diagnostic's deadline passed before its lane finished.
    #[error("the {lane} lane did not finish within {deadline_ms:.0} ms")]
    DeadlineExceeded {
        /// The lane.
        lane: Lane,
        /// The deadline.
        deadline_ms: f64,
    },
    /// A diagnostic was aborted.
    #[error("aborted")]
    Aborted,
    /// The idempotency key was first used with another request (another
    /// body, route or policy); nothing ran.
    #[error("the idempotency key `{key}` was already used with a different request")]
    IdempotencyConflict {
        /// The key.
        key: String,
    },
    /// The idempotency key's first run is still in flight (and the wait
    /// for it, if any, ended first); nothing ran.
    #[error("the idempotency key `{key}` is in use by a request still in flight")]
    IdempotencyInFlight {
        /// The key.
        key: String,
    },
    /// The ledger's store could not be read.
    #[error(transparent)]
    Ledger(#[from] super::ledger::StoreError),
}

/// What is wrong with a configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("invalid config{}: {detail}", path.as_ref().map(|p| format!(" file {}", p.display())).unwrap_or_default())]
    Parse {
        /// The file, when read from one.
        path: Option<PathBuf>,
        /// What the parser said (with line and column).
        detail: String,
    },
    /// A value is out of range or inconsistent.
    #[error("invalid setting `{key}`: {detail}")]
    Invalid {
        /// Where (e.g. `routes.vehicle_control.policy`), for people.
        key: String,
        /// Which setting it is, for code that acts on it (serve's 400
        /// naming the request field, a binding's exception).
        setting: Setting,
        /// What is wrong.
        detail: String,
    },
    /// A callback named in the file was never registered with the builder.
    #[error(
        "`{key}` names {kind} `{name}`, which is neither built in nor registered with the builder"
    )]
    UnknownCallback {
        /// Where.
        key: String,
        /// Which kind of callback.
        kind: &'static str,
        /// The name.
        name: String,
    },
}

/// Which setting a [`ConfigError`] is about: the typed parameter a caller
/// acts on, so no layer has to match the text of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    /// The policy or one of its parameters (a run's policy override
    /// included).
    Policy,
    /// A deadline or another duration.
    Timing,
    /// A scorer, arbiter, compressor or pre-score callback, or their
    /// parameters.
    Scoring,
    /// A route, or a reference to one (`default_route`).
    Route,
    /// A lane's section.
    Lane,
    /// The number of instances.
    Instances,
    /// The ledger: prices, cloud budgets, the store.
    Ledger,
}

impl ConfigError {
    /// `field` of table `table` is invalid (its key `table.field`), for
    /// `setting`, because of `detail`.
    pub fn invalid_field(
        table: &str,
        setting: Setting,
        field: &str,
        detail: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid {
            key: format!("{table}.{field}"),
            setting,
            detail: detail.into(),
        }
    }

    /// The setting this error is about; `None` when the file could not be
    /// read or parsed at all.
    pub fn setting(&self) -> Option<Setting> {
        match self {
            ConfigError::Invalid { setting, .. } => Some(*setting),
            ConfigError::UnknownCallback { .. } => Some(Setting::Scoring),
            ConfigError::Read { .. } | ConfigError::Parse { .. } => None,
        }
    }
}
