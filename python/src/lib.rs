//! `edgecloud._edgecloud`: the native half of the Python package, a thin
//! skin over `edgecloud::bindings` (docs/DESIGN.md point 15). It holds an
//! `Arc` of the one embedded harness, releases the GIL around every wait
//! on the lanes (`allow_threads`), and takes the GIL only inside a Python
//! callback. JSON crosses the boundary (requests as serve's wire JSON, the
//! outcome as `edgecloud run --json`'s); the pure-Python package
//! (`edgecloud/__init__.py`) turns it into `Outcome` objects.
//!
//! What it must not do: decide anything about a run, or let a Rust panic
//! or a Python exception cross into the other side (a callback's exception
//! becomes a caught panic, which the harness turns into the callback's
//! documented default and reports on the outcome).

use edgecloud::bindings::{self, Callbacks, DeltaStream, Embedded, ErrorKind, Overrides};
use edgecloud::harness::{
    AbortHandle, Candidate, Compressed, Harness, InstantBackend, Outcome, Policy, PolicyKind,
    Score, ScoreContext, Scored,
};
use edgecloud::request::ChatMessage;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

mod exit;

create_exception!(_edgecloud, Error, PyException, "Every edgecloud error.");
create_exception!(
    _edgecloud,
    ConfigError,
    Error,
    "The configuration or a setting is invalid."
);
create_exception!(
    _edgecloud,
    ModelError,
    Error,
    "The local model could not be found, fetched, validated or loaded."
);
create_exception!(
    _edgecloud,
    BusyError,
    Error,
    "Every instance (every lane the run needed) was busy: retry later."
);
create_exception!(
    _edgecloud,
    RequestError,
    Error,
    "The request is invalid; `.field` names the field at fault."
);
create_exception!(
    _edgecloud,
    DeadlineError,
    Error,
    "The deadline came before a usable answer."
);
create_exception!(_edgecloud, AbortedError, Error, "The run was aborted.");
create_exception!(
    _edgecloud,
    LaneError,
    Error,
    "Every lane that could run failed."
);
create_exception!(
    _edgecloud,
    InternalError,
    Error,
    "The harness is shutting down or its runtime is gone."
);

fn to_py(e: bindings::Error) -> PyErr {
    let msg = e.message.clone();
    let err = match e.kind {
        ErrorKind::Config => ConfigError::new_err(msg),
        ErrorKind::Model => ModelError::new_err(msg),
        ErrorKind::Busy => BusyError::new_err(msg),
        ErrorKind::InvalidRequest => RequestError::new_err(msg),
        ErrorKind::Deadline => DeadlineError::new_err(msg),
        ErrorKind::Aborted => AbortedError::new_err(msg),
        ErrorKind::Lane => LaneError::new_err(msg),
        _ => InternalError::new_err(msg),
    };
    Python::with_gil(|py| {
        let v = err.value(py);
        // Attributes on a fresh exception instance: setting them cannot fail.
        let _ = v.setattr("kind", e.kind.as_str());
        let _ = v.setattr("field", e.field.clone());
    });
    err
}

fn config_err(msg: impl Into<String>) -> PyErr {
    to_py(bindings::Error::new(ErrorKind::Config, msg.into()))
}

/// Calls a Python adapter (built by `edgecloud/__init__.py`: JSON text in,
/// a plain value out) on an edgecloud thread, the GIL held only for the
/// call. An exception, or a finalising interpreter, unwinds without the
/// panic hook's noise; the harness catches it and applies the callback's
/// default.
fn call_py<T>(
    f: &Py<PyAny>,
    arg: String,
    read: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> T {
    if exit::finalizing() {
        std::panic::resume_unwind(Box::new(
            "the Python interpreter is shutting down".to_string(),
        ));
    }
    let r: Result<T, String> = Python::with_gil(|py| {
        f.bind(py)
            .call1((arg,))
            .and_then(|v| read(&v))
            .map_err(|e| format!("Python callback raised {e}"))
    });
    match r {
        Ok(v) => v,
        Err(msg) => std::panic::resume_unwind(Box::new(msg)),
    }
}

fn callbacks(
    scorer: Option<Py<PyAny>>,
    arbiter: Option<Py<PyAny>>,
    compressor: Option<Py<PyAny>>,
) -> Callbacks {
    let mut cb = Callbacks::default();
    if let Some(f) = scorer {
        let f = Arc::new(f);
        cb.scorer = Some(Arc::new(move |c: &Candidate, ctx: &ScoreContext| {
            let arg = serde_json::json!({"candidate": c, "lane": ctx.lane}).to_string();
            let v: f64 = call_py(&f, arg, |v| v.extract());
            Score::new(v)
        }));
    }
    if let Some(f) = arbiter {
        let f = Arc::new(f);
        cb.arbiter = Some(Arc::new(move |c: &[Scored]| {
            let arg = serde_json::to_string(c).expect("scored candidates serialize (plain data)");
            let pick: Option<usize> = call_py(&f, arg, |v| v.extract());
            pick
        }));
    }
    if let Some(f) = compressor {
        let f = Arc::new(f);
        cb.compressor = Some(Arc::new(move |m: &[ChatMessage]| {
            let arg = serde_json::to_string(m).expect("messages serialize (plain data)");
            let out: String = call_py(&f, arg, |v| v.extract());
            match serde_json::from_str::<Vec<ChatMessage>>(&out) {
                Ok(messages) => Compressed {
                    messages,
                    tokens_before: None,
                    tokens_after: None,
                },
                Err(e) => std::panic::resume_unwind(Box::new(format!(
                    "the compressor returned messages edgecloud cannot read: {e}"
                ))),
            }
        }));
    }
    cb
}

/// The outcome as the package reads it: its JSON (`run --json`'s, parsed
/// in Python only when more than these is read) with the fields nearly
/// every caller reads first: status, winner, text, error.
type OutcomeHead = (
    String,
    &'static str,
    Option<&'static str>,
    Option<String>,
    Option<String>,
);

fn outcome_head(o: Outcome) -> OutcomeHead {
    (
        bindings::outcome_json(&o),
        o.status.as_str(),
        o.winner.map(|l| l.as_str()),
        o.text,
        o.error,
    )
}

/// The embedded harness. Built by `edgecloud.Harness`; use that.
#[pyclass(module = "edgecloud._edgecloud", frozen)]
struct NativeHarness {
    inner: Mutex<Option<Arc<Embedded>>>,
}

impl NativeHarness {
    fn get(&self) -> PyResult<Arc<Embedded>> {
        self.inner
            .lock()
            .expect("no code panics holding this lock")
            .clone()
            .ok_or_else(|| {
                to_py(bindings::Error::new(
                    ErrorKind::Internal,
                    "the harness is closed",
                ))
            })
    }
}

#[pymethods]
impl NativeHarness {
    /// `config_toml` / `config_json`: the configuration (at most one);
    /// the rest win over it as the CLI's flags do.
    #[new]
    #[pyo3(signature = (config_toml=None, config_json=None, model=None, base_url=None,
        cloud_model=None, policy=None, deadline_ms=None, threads=None, parallel=None,
        api_key_env=None, scorer=None, arbiter=None, compressor=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config_toml: Option<String>,
        config_json: Option<String>,
        model: Option<String>,
        base_url: Option<String>,
        cloud_model: Option<String>,
        policy: Option<String>,
        deadline_ms: Option<u64>,
        threads: Option<usize>,
        parallel: Option<usize>,
        api_key_env: Option<String>,
        scorer: Option<Py<PyAny>>,
        arbiter: Option<Py<PyAny>>,
        compressor: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let mut cfg = match (config_toml, config_json) {
            (Some(t), _) => bindings::config_from_toml(&t).map_err(|e| to_py(e.into()))?,
            (None, Some(j)) => {
                let v: serde_json::Value =
                    serde_json::from_str(&j).map_err(|e| config_err(format!("config: {e}")))?;
                bindings::config_from_value(&v).map_err(|e| to_py(e.into()))?
            }
            (None, None) => bindings::config_from_toml("").map_err(|e| to_py(e.into()))?,
        };
        let mut o = Overrides::default();
        o.model = model.map(PathBuf::from);
        o.base_url = base_url;
        o.cloud_model = cloud_model;
        o.policy = match policy {
            Some(p) => Some(p.parse::<PolicyKind>().map_err(|_| {
                config_err(format!(
                    "unknown policy `{p}` (expected one of: {})",
                    PolicyKind::ALL.map(|k| k.as_str()).join(", ")
                ))
            })?),
            None => None,
        };
        o.deadline_ms = deadline_ms;
        o.threads = threads;
        o.parallel = parallel;
        o.api_key_env = api_key_env;
        o.apply(&mut cfg).map_err(|e| to_py(e.into()))?;
        let cb = callbacks(scorer, arbiter, compressor);
        // Loading a model blocks: other Python threads keep running.
        let embedded = Arc::new(
            py.allow_threads(|| Embedded::start(&cfg, cb))
                .map_err(to_py)?,
        );
        exit::track_harness(&embedded);
        Ok(Self {
            inner: Mutex::new(Some(embedded)),
        })
    }

    /// Runs a request (serve's wire JSON) and returns the outcome (its
    /// JSON and headline fields), the GIL released while the lanes work.
    fn run(&self, py: Python<'_>, request_json: String) -> PyResult<OutcomeHead> {
        let h = self.get()?;
        let outcome = py
            .allow_threads(move || {
                let run = h.start_run(&request_json, false)?;
                exit::track_run(run.abort_handle());
                run.wait().map_err(bindings::Error::from)
            })
            .map_err(to_py)?;
        Ok(outcome_head(outcome))
    }

    /// Starts a request and returns its handle at once.
    #[pyo3(signature = (request_json, stream=false))]
    fn start(&self, py: Python<'_>, request_json: String, stream: bool) -> PyResult<NativeRun> {
        let h = self.get()?;
        let handle = py
            .allow_threads(move || h.start_run(&request_json, stream))
            .map_err(to_py)?;
        exit::track_run(handle.abort_handle());
        let deltas = DeltaStream::new(handle);
        Ok(NativeRun {
            abort: deltas.abort_handle(),
            deltas: Mutex::new(deltas),
        })
    }

    /// For `scripts/embed-overhead` only: runs `request_json`'s request
    /// `runs` times straight through the Rust harness (prepared once, no
    /// JSON, no Python per run; the GIL released) and returns each run's
    /// microseconds, so the Python package's cost per run has a peer in
    /// the same process, under the same upstream and noise.
    fn _rust_run_us(
        &self,
        py: Python<'_>,
        request_json: String,
        runs: usize,
    ) -> PyResult<Vec<f64>> {
        let h = self.get()?;
        py.allow_threads(move || {
            let p = h.prepare(&request_json)?;
            (0..runs)
                .map(|_| {
                    let t = std::time::Instant::now();
                    h.harness()
                        .run_blocking_with(p.request.clone(), p.options.clone())
                        .map_err(bindings::Error::from)?;
                    Ok(t.elapsed().as_secs_f64() * 1e6)
                })
                .collect::<Result<Vec<f64>, bindings::Error>>()
        })
        .map_err(to_py)
    }

    /// For `scripts/embed-overhead` only: a harness whose two lanes are
    /// the stand-in `InstantBackend` (answers at once, reported as
    /// `instant`), local-only, so a run costs only the harness and what
    /// this package adds over it.
    #[staticmethod]
    fn _instant() -> PyResult<Self> {
        let harness = Harness::builder()
            .local(InstantBackend::default())
            .cloud(InstantBackend::default())
            .policy(Policy::LocalOnly)
            .build()
            .map_err(|e| to_py(e.into()))?;
        let embedded = Arc::new(Embedded::from_harness(harness));
        exit::track_harness(&embedded);
        Ok(Self {
            inner: Mutex::new(Some(embedded)),
        })
    }

    /// Drops this reference to the harness; runs in flight finish on their
    /// own (late workers keep their lanes). Never blocks.
    fn close(&self) {
        let h = self
            .inner
            .lock()
            .expect("no code panics holding this lock")
            .take();
        drop(h);
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .expect("no code panics holding this lock")
            .is_none()
    }
}

/// One started run. Built by `Harness.start`/`stream`; use those.
#[pyclass(module = "edgecloud._edgecloud", frozen)]
struct NativeRun {
    deltas: Mutex<DeltaStream>,
    abort: AbortHandle,
}

#[pymethods]
impl NativeRun {
    /// The next delta serve would stream (JSON: text pieces, then the
    /// winner's tool calls), or `None` at the end (the GIL released while
    /// waiting).
    fn next_delta(&self, py: Python<'_>) -> PyResult<Option<String>> {
        py.allow_threads(|| {
            self.deltas
                .lock()
                .expect("no code panics holding this lock")
                .next_blocking()
        })
        .map_err(to_py)
    }

    /// Waits for the outcome (its JSON and headline fields; the GIL
    /// released). Once per run.
    fn wait(&self, py: Python<'_>) -> PyResult<OutcomeHead> {
        let outcome = py
            .allow_threads(|| {
                self.deltas
                    .lock()
                    .expect("no code panics holding this lock")
                    .wait()
            })
            .map_err(to_py)?;
        Ok(outcome_head(outcome))
    }

    /// Aborts the run: it settles at once as aborted; its workers stop at
    /// their next step and keep their lanes until they return. Idempotent,
    /// from any thread.
    fn abort(&self) {
        let _ = self.abort.abort();
    }
}

/// Called by the package's `atexit` hook.
#[pyfunction]
fn _interpreter_exiting(py: Python<'_>) {
    exit::interpreter_exiting(py);
}

/// edgecloud's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _edgecloud(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<NativeHarness>()?;
    m.add_class::<NativeRun>()?;
    m.add_function(wrap_pyfunction!(_interpreter_exiting, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add("RequestError", py.get_type::<RequestError>())?;
    m.add("DeadlineError", py.get_type::<DeadlineError>())?;
    m.add("AbortedError", py.get_type::<AbortedError>())?;
    m.add("LaneError", py.get_type::<LaneError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}
