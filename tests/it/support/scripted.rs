//! Scripted backends for harness tests: each task a harness starts is handed
//! to the test as a [`Task`], which the test releases (complete, fail,
//! panic, stream tokens) when it chooses, so tests never sleep to
//! synchronise. Counters inside the backend check the lane contract from
//! the backend's side: tasks outstanding at once, tasks admitted while a
//! cancelled (late) one was still running, results after cancellation.
//!
//! An "auto" mode answers by itself after a scripted delay (simulated work,
//! for stress tests).
//!
//! Also here: [`Recorder`], an observer that keeps every event and lets a
//! test wait for one.

use edgecloud::harness::{
    Backend, BackendError, BackendFuture, BackendInfo, Candidate, Event, LaneErrorKind, Observer,
};
use edgecloud::{CancellationToken, ChatMessage, FinishReason, LaneJob, Sampling};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Safety net for waits in tests: a test that would otherwise hang fails
/// after this long. Never used to synchronise.
pub const HANG: Duration = Duration::from_secs(30);

enum Cmd {
    Token(String),
    Complete(Box<Candidate>),
    Fail(BackendError),
    Panic(String),
}

/// One task the harness gave the backend, as the test sees it.
pub struct Task {
    /// 0-based, per backend.
    pub index: u64,
    /// What the harness sent.
    pub messages: Vec<ChatMessage>,
    /// How the job asked to sample.
    pub sampling: Sampling,
    /// The job's deadline.
    pub deadline: Instant,
    /// The job's cancellation token.
    pub cancel: CancellationToken,
    ctl: mpsc::UnboundedSender<Cmd>,
}

impl Task {
    /// Streams a piece of text through the job's sink.
    pub fn token(&self, piece: &str) {
        let _ = self.ctl.send(Cmd::Token(piece.to_string()));
    }

    /// Completes with `text` (finish reason `stop`).
    pub fn complete(&self, text: &str) {
        self.complete_with(Candidate::new(text, FinishReason::Stop));
    }

    /// Completes with a candidate.
    pub fn complete_with(&self, c: Candidate) {
        let _ = self.ctl.send(Cmd::Complete(Box::new(c)));
    }

    /// Fails with an error.
    pub fn fail(&self, kind: LaneErrorKind, message: &str) {
        let _ = self.ctl.send(Cmd::Fail(BackendError::new(kind, message)));
    }

    /// Makes the backend's future panic.
    pub fn panic(&self, message: &str) {
        let _ = self.ctl.send(Cmd::Panic(message.to_string()));
    }

    /// Whether the harness cancelled the job.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Blocks until the harness cancels the job; panics after [`HANG`].
    pub fn wait_cancelled(&self) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a small runtime for waiting");
        let cancel = self.cancel.clone();
        rt.block_on(async move { tokio::time::timeout(HANG, cancel.cancelled()).await })
            .expect("the job was never cancelled");
    }

    /// The last message's text.
    pub fn prompt(&self) -> &str {
        self.messages
            .last()
            .map(|m| m.content.as_str())
            .unwrap_or("")
    }
}

/// What an auto task does.
#[derive(Debug, Clone)]
pub struct Auto {
    /// Simulated work before the outcome.
    pub delay: Duration,
    /// Tokens streamed during the delay (evenly spaced).
    pub tokens: u32,
    /// How the task ends.
    pub end: AutoEnd,
    /// Whether it stops when cancelled.
    pub honour_cancel: bool,
}

/// How an auto task ends.
#[derive(Debug, Clone)]
pub enum AutoEnd {
    /// With this text.
    Complete(String),
    /// With an error.
    Fail,
    /// By panicking.
    Panic,
}

type AutoFn = Arc<dyn Fn(u64) -> Auto + Send + Sync>;

#[derive(Default)]
struct Outstanding {
    tasks: Vec<(u64, CancellationToken)>,
}

struct Inner {
    name: String,
    declares_cancel: bool,
    honours_cancel: bool,
    auto: Option<AutoFn>,
    tasks_tx: Mutex<std_mpsc::Sender<Task>>,
    tasks_rx: Mutex<std_mpsc::Receiver<Task>>,
    outstanding: Mutex<Outstanding>,
    changed: Condvar,
    started: AtomicU64,
    finished: AtomicU64,
    max_outstanding: AtomicU64,
    overlaps: AtomicU64,
    admitted_while_late: AtomicU64,
    completed_after_cancel: AtomicU64,
}

/// A scripted backend. Clone it to keep a handle after giving it to a
/// harness.
#[derive(Clone)]
pub struct Scripted {
    inner: Arc<Inner>,
}

/// Counters seen from inside a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Tasks started.
    pub started: u64,
    /// Tasks that returned (or panicked).
    pub finished: u64,
    /// Most tasks outstanding at once (the contract says 1).
    pub max_outstanding: u64,
    /// Tasks started while another was outstanding.
    pub overlaps: u64,
    /// Tasks started while a cancelled (late) task was outstanding.
    pub admitted_while_late: u64,
    /// Tasks that completed after their token fired (ignored it).
    pub completed_after_cancel: u64,
}

impl Scripted {
    /// A backend whose tasks wait for the test; it honours cancellation.
    pub fn new(name: &str) -> Self {
        Self::build(name, true, true, None)
    }

    /// A backend that ignores the token and says so
    /// (`observes_cancellation() == false`).
    pub fn ignoring_cancel(name: &str) -> Self {
        Self::build(name, false, false, None)
    }

    /// A backend that claims to observe cancellation but is slow to: it
    /// only returns when the test releases it.
    pub fn slow_to_cancel(name: &str) -> Self {
        Self::build(name, true, false, None)
    }

    /// A backend whose tasks answer by themselves as `script` says.
    pub fn auto(name: &str, script: impl Fn(u64) -> Auto + Send + Sync + 'static) -> Self {
        Self::build(name, true, true, Some(Arc::new(script)))
    }

    fn build(name: &str, declares: bool, honours: bool, auto: Option<AutoFn>) -> Self {
        let (tx, rx) = std_mpsc::channel();
        Self {
            inner: Arc::new(Inner {
                name: name.to_string(),
                declares_cancel: declares,
                honours_cancel: honours,
                auto,
                tasks_tx: Mutex::new(tx),
                tasks_rx: Mutex::new(rx),
                outstanding: Mutex::new(Outstanding::default()),
                changed: Condvar::new(),
                started: AtomicU64::new(0),
                finished: AtomicU64::new(0),
                max_outstanding: AtomicU64::new(0),
                overlaps: AtomicU64::new(0),
                admitted_while_late: AtomicU64::new(0),
                completed_after_cancel: AtomicU64::new(0),
            }),
        }
    }

    /// The next task the harness started; panics after [`HANG`].
    pub fn next_task(&self) -> Task {
        self.inner
            .tasks_rx
            .lock()
            .unwrap()
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{}: no task arrived", self.inner.name))
    }

    /// A task if one already arrived.
    pub fn try_task(&self) -> Option<Task> {
        self.inner.tasks_rx.lock().unwrap().try_recv().ok()
    }

    /// The counters now.
    pub fn counters(&self) -> Counters {
        let i = &self.inner;
        Counters {
            started: i.started.load(Ordering::SeqCst),
            finished: i.finished.load(Ordering::SeqCst),
            max_outstanding: i.max_outstanding.load(Ordering::SeqCst),
            overlaps: i.overlaps.load(Ordering::SeqCst),
            admitted_while_late: i.admitted_while_late.load(Ordering::SeqCst),
            completed_after_cancel: i.completed_after_cancel.load(Ordering::SeqCst),
        }
    }

    /// Waits until no task is outstanding; panics after [`HANG`].
    pub fn wait_idle(&self) {
        let g = self.inner.outstanding.lock().unwrap();
        let (g, t) = self
            .inner
            .changed
            .wait_timeout_while(g, HANG, |o| !o.tasks.is_empty())
            .unwrap();
        assert!(
            !t.timed_out(),
            "{}: tasks still outstanding",
            self.inner.name
        );
        drop(g);
    }
}

/// Counts a task in and out. Dropped on every path (return or panic):
/// first it leaves the outstanding list, then the permit it holds goes, so
/// the harness can never admit a task this backend still counts.
struct Entered {
    inner: Arc<Inner>,
    index: u64,
    permit: Option<edgecloud::lane::LanePermit>,
}

impl Entered {
    fn new(
        inner: &Arc<Inner>,
        index: u64,
        cancel: CancellationToken,
        permit: Option<edgecloud::lane::LanePermit>,
    ) -> Self {
        let mut o = inner.outstanding.lock().unwrap();
        if !o.tasks.is_empty() {
            inner.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if o.tasks.iter().any(|(_, c)| c.is_cancelled()) {
            inner.admitted_while_late.fetch_add(1, Ordering::SeqCst);
        }
        o.tasks.push((index, cancel));
        inner
            .max_outstanding
            .fetch_max(o.tasks.len() as u64, Ordering::SeqCst);
        Self {
            inner: inner.clone(),
            index,
            permit,
        }
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        {
            let mut o = self
                .inner
                .outstanding
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            o.tasks.retain(|(i, _)| *i != self.index);
            self.inner.finished.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.changed.notify_all();
        drop(self.permit.take());
    }
}

impl Backend for Scripted {
    fn info(&self) -> BackendInfo {
        BackendInfo::named(self.inner.name.clone())
    }

    fn observes_cancellation(&self) -> bool {
        self.inner.declares_cancel
    }

    fn run(&self, mut job: LaneJob) -> BackendFuture {
        let inner = self.inner.clone();
        Box::pin(async move {
            let index = inner.started.fetch_add(1, Ordering::SeqCst);
            let entered = Entered::new(&inner, index, job.cancel.clone(), job.permit.take());
            let result = match inner.auto.clone() {
                Some(script) => run_auto(script(index), &mut job).await,
                None => run_scripted(&inner, index, &mut job).await,
            };
            if job.cancel.is_cancelled()
                && matches!(&result, Ok(c) if c.finish_reason.is_complete())
            {
                inner.completed_after_cancel.fetch_add(1, Ordering::SeqCst);
            }
            drop(job);
            drop(entered);
            result
        })
    }
}

async fn run_scripted(
    inner: &Arc<Inner>,
    index: u64,
    job: &mut LaneJob,
) -> Result<Candidate, BackendError> {
    let (ctl, mut rx) = mpsc::unbounded_channel();
    let task = Task {
        index,
        messages: job.messages.clone(),
        sampling: job.sampling.clone(),
        deadline: job.deadline,
        cancel: job.cancel.clone(),
        ctl,
    };
    let _ = inner.tasks_tx.lock().unwrap().send(task);
    let mut text = String::new();
    let cancel = job.cancel.clone();
    loop {
        tokio::select! {
            biased;
            cmd = rx.recv() => match cmd {
                Some(Cmd::Token(p)) => {
                    text.push_str(&p);
                    if let Some(sink) = job.on_token.as_mut() {
                        sink(&p);
                    }
                }
                Some(Cmd::Complete(c)) => return Ok(*c),
                Some(Cmd::Fail(e)) => return Err(e),
                Some(Cmd::Panic(m)) => panic!("{m}"),
                None => {
                    // The test dropped the task without an answer.
                    if inner.honours_cancel {
                        cancel.cancelled().await;
                        return Ok(Candidate::new(text, FinishReason::Cancelled));
                    }
                    return Err(BackendError::new(LaneErrorKind::Other, "task dropped by the test"));
                }
            },
            () = cancel.cancelled(), if inner.honours_cancel => {
                return Ok(Candidate::new(text, FinishReason::Cancelled));
            }
        }
    }
}

async fn run_auto(a: Auto, job: &mut LaneJob) -> Result<Candidate, BackendError> {
    let steps = a.tokens + 1;
    let step = a.delay / steps;
    let mut text = String::new();
    let cancel = job.cancel.clone();
    for i in 0..steps {
        if a.honour_cancel {
            tokio::select! {
                () = tokio::time::sleep(step) => {}
                () = cancel.cancelled() => return Ok(Candidate::new(text, FinishReason::Cancelled)),
            }
        } else {
            tokio::time::sleep(step).await;
        }
        if i + 1 < steps {
            let piece = format!("t{i} ");
            text.push_str(&piece);
            if let Some(sink) = job.on_token.as_mut() {
                sink(&piece);
            }
        }
    }
    match a.end {
        AutoEnd::Complete(t) => Ok(Candidate::new(format!("{text}{t}"), FinishReason::Stop)),
        AutoEnd::Fail => Err(BackendError::new(LaneErrorKind::Other, "auto failure")),
        AutoEnd::Panic => panic!("scripted auto panic"),
    }
}

/// An observer that records every event.
#[derive(Clone, Default)]
pub struct Recorder {
    events: Arc<(Mutex<Vec<Event>>, Condvar)>,
}

impl Recorder {
    /// A new, empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.0.lock().unwrap().clone()
    }

    /// Events of one run, by name.
    pub fn names(&self, run_id: u64) -> Vec<&'static str> {
        self.events()
            .iter()
            .filter(|e| e.run_id() == run_id)
            .map(|e| e.name())
            .collect()
    }

    /// Waits until an event matches; panics after [`HANG`].
    pub fn wait_for(&self, what: impl Fn(&Event) -> bool) -> Event {
        let (m, cv) = &*self.events;
        let g = m.lock().unwrap();
        let (g, t) = cv
            .wait_timeout_while(g, HANG, |v| !v.iter().any(&what))
            .unwrap();
        assert!(!t.timed_out(), "event never came; got {:?}", *g);
        g.iter().find(|e| what(e)).cloned().expect("just matched")
    }
}

impl Recorder {
    /// Waits until the events so far satisfy `done`; panics after [`HANG`].
    pub fn wait_all(&self, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        let (m, cv) = &*self.events;
        let g = m.lock().unwrap();
        let (g, t) = cv.wait_timeout_while(g, HANG, |v| !done(v)).unwrap();
        assert!(!t.timed_out(), "events never matched; got {}", g.len());
        g.clone()
    }
}

impl Observer for Recorder {
    fn on_event(&self, event: &Event) {
        let (m, cv) = &*self.events;
        m.lock().unwrap().push(event.clone());
        cv.notify_all();
    }
}
