//! The ledger's durable store ([`LedgerStore`]): a directory holding the
//! cloud spending per route and period (`ledger.json`) and one file per
//! recorded idempotent answer (`idempotency/`). Every file is replaced
//! atomically (written beside, flushed, renamed, the directory flushed),
//! so a crash or SIGKILL mid-write leaves the old file or the new one,
//! never a torn one; every write happens under an exclusive lock on
//! `ledger.lock` (the operating system's advisory file lock, released
//! when the process dies), and merges what is on disk with this process's
//! spending, so several processes sharing the directory add up and never
//! lose each other's spending (docs/cost.md says why a file and not
//! SQLite). Writes run on one named thread (`edgecloud-ledger`), off the
//! runs' path; what is not yet on disk still counts in every check. It
//! must not decide anything about a run.
//!
//! A store it cannot read (unreadable, not ours, torn by hand, from a
//! newer version) is an error naming the file, never reset to zero.

use super::calendar;
use crate::harness::outcome::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The store format this build writes and reads.
pub const STORE_VERSION: u32 = 1;
const SPEND_FORMAT: &str = "edgecloud-ledger";
const RECORD_FORMAT: &str = "edgecloud-idempotency";
const SPEND_FILE: &str = "ledger.json";
const LOCK_FILE: &str = "ledger.lock";
const RECORDS_DIR: &str = "idempotency";
/// How long opening waits for another process's lock before it says the
/// store is locked (writers hold it for one file write).
const OPEN_LOCK_WAIT: Duration = Duration::from_secs(2);
/// How stale the spending read from disk may be before a check reads it
/// again (other processes' spending shows within this).
const REFRESH: Duration = Duration::from_secs(1);
/// Days and months of spending kept in the file.
const KEEP_DAYS: i64 = 40;
const KEEP_MONTHS_DAYS: i64 = 400;
/// How often the writer looks for idempotency records past their window.
const EVICT_EVERY: Duration = Duration::from_secs(60);

/// Why the store cannot be used; each names its file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file or the directory could not be read or written.
    #[error("ledger store {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file is not a store file this build can read (damaged, or not
    /// ours). It is left as it is: spending is never silently reset.
    #[error("ledger store {path} is corrupt ({detail}); it was left untouched: move it away to start from zero spent")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A file was written by a newer edgecloud.
    #[error("ledger store {path} has version {version}, newer than this build's {STORE_VERSION}; use a newer edgecloud or another store")]
    NewerVersion {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u32,
    },
    /// Another process held the store's lock for longer than opening waits.
    #[error("ledger store {path} is locked by another process (held over {} s)", OPEN_LOCK_WAIT.as_secs())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Cloud spending in one period of one route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    /// Dollars (runs on a priced model).
    pub usd: f64,
    /// Provider-reported cloud tokens, prompt and completion.
    pub tokens: u64,
    /// Runs whose cloud lane ran.
    pub runs: u64,
}

impl Spent {
    fn add(&mut self, o: &Spent) {
        self.usd += o.usd;
        self.tokens += o.tokens;
        self.runs += o.runs;
    }
}

/// route -> period key (`2026-12-06`, `2026-12`) -> spending.
type Totals = BTreeMap<String, BTreeMap<String, Spent>>;

fn merge(into: &mut Totals, from: &Totals) {
    for (route, periods) in from {
        let r = into.entry(route.clone()).or_default();
        for (k, s) in periods {
            r.entry(k.clone()).or_default().add(s);
        }
    }
}

#[derive(Serialize, Deserialize)]
struct SpendFile {
    format: String,
    version: u32,
    #[serde(default)]
    routes: Totals,
}

/// One recorded answer of an idempotency key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) key: String,
    /// The request's fingerprint: the same key with another request is a
    /// conflict.
    pub(crate) fingerprint: String,
    pub(crate) recorded_unix_ms: i64,
    pub(crate) outcome: Outcome,
}

#[derive(Serialize, Deserialize)]
struct RecordFile {
    format: String,
    version: u32,
    #[serde(flatten)]
    record: Record,
}

struct SpendState {
    /// As last read from or written to disk.
    disk: Totals,
    read_at: Instant,
    /// Taken by the writer, not yet on disk.
    inflight: Totals,
    /// Not yet taken by the writer.
    pending: Totals,
    /// Records not yet on disk, by key.
    records: HashMap<String, Arc<Record>>,
    /// The last write's failure, if the last write failed.
    failed: Option<String>,
}

enum Job {
    Spend,
    Record(Arc<Record>),
    Flush(mpsc::Sender<Result<(), String>>),
}

struct Inner {
    dir: PathBuf,
    window: Duration,
    state: Mutex<SpendState>,
    tx: Mutex<mpsc::Sender<Job>>,
}

/// The ledger's durable store (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct LedgerStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LedgerStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerStore")
            .field("dir", &self.inner.dir)
            .field("idempotency_window", &self.inner.window)
            .finish()
    }
}

/// The lock on `ledger.lock`, released on drop.
struct Locked(File);

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

fn lock_file(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(LOCK_FILE);
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))
}

fn lock_blocking(dir: &Path) -> Result<Locked, StoreError> {
    let f = lock_file(dir)?;
    f.lock().map_err(io_err(&dir.join(LOCK_FILE)))?;
    Ok(Locked(f))
}

fn lock_within(dir: &Path, wait: Duration) -> Result<Locked, StoreError> {
    let path = dir.join(LOCK_FILE);
    let f = lock_file(dir)?;
    let until = Instant::now() + wait;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(Locked(f)),
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(TryLockError::WouldBlock) => return Err(StoreError::Locked { path }),
            Err(TryLockError::Error(e)) => return Err(io_err(&path)(e)),
        }
    }
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes` atomically: a crash leaves the old file
/// or the new one.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path
        .parent()
        .expect("store files live in the store's directory");
    let name = path
        .file_name()
        .expect("store files have names")
        .to_string_lossy();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        // The rename itself is durable once the directory is.
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err(path)(e)
    })
}

fn read_spend(path: &Path) -> Result<Totals, StoreError> {
    Ok(read_file::<SpendFile>(path, SPEND_FORMAT)?.map_or_else(Totals::new, |f| f.routes))
}

/// A store file of `format`, read and checked (`None` when there is none).
fn read_file<T: serde::de::DeserializeOwned>(
    path: &Path,
    format: &str,
) -> Result<Option<T>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let corrupt = |detail: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    check_header(path, &v, format)?;
    serde_json::from_value(v)
        .map(Some)
        .map_err(|e| corrupt(e.to_string()))
}

/// The `format` and `version` every store file starts with.
fn check_header(path: &Path, v: &serde_json::Value, format: &str) -> Result<(), StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    if v.get("format").and_then(|f| f.as_str()) != Some(format) {
        return Err(corrupt(format!("its `format` is not `{format}`")));
    }
    let version = v
        .get("version")
        .and_then(|x| x.as_u64())
        .ok_or_else(|| corrupt("it has no `version`".into()))?;
    if version > u64::from(STORE_VERSION) {
        return Err(StoreError::NewerVersion {
            path: path.to_path_buf(),
            version: version.min(u64::from(u32::MAX)) as u32,
        });
    }
    Ok(())
}

fn read_record(path: &Path) -> Result<Option<Record>, StoreError> {
    Ok(read_file::<RecordFile>(path, RECORD_FORMAT)?.map(|f| f.record))
}

/// A file name for a key: FNV-1a, 128 bits, in hex (keys are arbitrary
/// text; the file holds the key itself, compared on reading).
pub(crate) fn fnv128(bytes: &[u8]) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for &b in bytes {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    format!("{h:032x}")
}

impl LedgerStore {
    /// Opens (creating it if needed) the store in directory `dir`, whose
    /// idempotency records are kept for `idempotency_window` after they
    /// were recorded (never evicted within it). Reads and checks every
    /// file: an unreadable, corrupt, newer-version or locked store is an
    /// error naming its file. Leftovers of writes a crash interrupted are
    /// removed (the files they were replacing are intact).
    pub fn open(dir: impl Into<PathBuf>, idempotency_window: Duration) -> Result<Self, StoreError> {
        let dir: PathBuf = dir.into();
        fs::create_dir_all(dir.join(RECORDS_DIR)).map_err(io_err(&dir))?;
        let disk = {
            let _lock = lock_within(&dir, OPEN_LOCK_WAIT)?;
            remove_leftovers(&dir)?;
            remove_leftovers(&dir.join(RECORDS_DIR))?;
            let disk = read_spend(&dir.join(SPEND_FILE))?;
            evict(&dir.join(RECORDS_DIR), idempotency_window, true)?;
            disk
        };
        let (tx, rx) = mpsc::channel();
        let inner = Arc::new(Inner {
            dir,
            window: idempotency_window,
            state: Mutex::new(SpendState {
                disk,
                read_at: Instant::now(),
                inflight: Totals::new(),
                pending: Totals::new(),
                records: HashMap::new(),
                failed: None,
            }),
            tx: Mutex::new(tx),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("edgecloud-ledger".into())
            .spawn(move || writer(weak, rx))
            .map_err(io_err(&inner.dir))?;
        Ok(Self { inner })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// How long idempotency records are kept.
    pub fn idempotency_window(&self) -> Duration {
        self.inner.window
    }

    fn state(&self) -> MutexGuard<'_, SpendState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, job: Job) {
        let tx = self.inner.tx.lock().unwrap_or_else(|p| p.into_inner());
        // The writer lives as long as the store.
        let _ = tx.send(job);
    }

    /// Adds one run's cloud spending to `route`'s day and month at
    /// `unix_s`. Counted in every check at once; on disk shortly after
    /// (see [`flush`](Self::flush)).
    pub fn record_spend(&self, route: &str, unix_s: i64, spent: Spent) {
        {
            let mut st = self.state();
            let r = st.pending.entry(route.to_string()).or_default();
            for key in [calendar::day_key(unix_s), calendar::month_key(unix_s)] {
                r.entry(key).or_default().add(&spent);
            }
        }
        self.send(Job::Spend);
    }

    /// What `route` spent in the period `key` (`2026-12-06`, `2026-12`):
    /// on disk (re-read when older than a second, so other processes'
    /// spending shows) plus what this process has not written yet.
    pub fn spent(&self, route: &str, key: &str) -> Spent {
        let stale = self.state().read_at.elapsed() >= REFRESH;
        if stale {
            // A file that turned unreadable keeps the last figures (the
            // writer reports the failure); never zero.
            match read_spend(&self.inner.dir.join(SPEND_FILE)) {
                Ok(disk) => {
                    let mut st = self.state();
                    st.disk = disk;
                    st.read_at = Instant::now();
                }
                Err(e) => {
                    tracing::error!(error = %e, "ledger store: could not re-read the spending");
                    self.state().read_at = Instant::now();
                }
            }
        }
        let st = self.state();
        let mut total = Spent::default();
        for t in [&st.disk, &st.inflight, &st.pending] {
            if let Some(s) = t.get(route).and_then(|p| p.get(key)) {
                total.add(s);
            }
        }
        total
    }

    /// What `route` spent today and this month (UTC), as
    /// [`spent`](Self::spent) counts it.
    pub fn spent_now(&self, route: &str) -> (Spent, Spent) {
        let now = calendar::now_unix_ms().div_euclid(1000);
        (
            self.spent(route, &calendar::day_key(now)),
            self.spent(route, &calendar::month_key(now)),
        )
    }

    /// Records the answer of idempotency key `record.key` (replaces an
    /// older one). Visible to [`record`](Self::record) at once.
    pub(crate) fn put_record(&self, record: Record) {
        let record = Arc::new(record);
        self.state()
            .records
            .insert(record.key.clone(), record.clone());
        self.send(Job::Record(record));
    }

    /// The recorded answer of `key`, when there is one within the window.
    pub(crate) fn record(&self, key: &str) -> Result<Option<Arc<Record>>, StoreError> {
        if let Some(r) = self.state().records.get(key) {
            return Ok(Some(r.clone()));
        }
        let path = record_path(&self.inner.dir, key);
        let Some(r) = read_record(&path)? else {
            return Ok(None);
        };
        let age = calendar::now_unix_ms() - r.recorded_unix_ms;
        if r.key != key || age > self.inner.window.as_millis() as i64 {
            return Ok(None);
        }
        Ok(Some(Arc::new(r)))
    }

    /// Waits until everything recorded so far is on disk; the last
    /// write's failure, if any.
    pub fn flush(&self) -> Result<(), String> {
        let (tx, rx) = mpsc::channel();
        self.send(Job::Flush(tx));
        rx.recv()
            .unwrap_or_else(|_| Err("the ledger's writer thread is gone".into()))
    }
}

fn record_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(RECORDS_DIR)
        .join(format!("{}.json", fnv128(key.as_bytes())))
}

/// Removes the temporary files of writes a crash interrupted (called
/// under the lock, so no writer is mid-write).
fn remove_leftovers(dir: &Path) -> Result<(), StoreError> {
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp-") {
            fs::remove_file(entry.path()).map_err(io_err(&entry.path()))?;
        }
    }
    Ok(())
}

/// Deletes idempotency records past their window; `check`: read every
/// record and refuse a corrupt one (at open).
fn evict(dir: &Path, window: Duration, check: bool) -> Result<(), StoreError> {
    let now = calendar::now_unix_ms();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let path = entry.map_err(io_err(dir))?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let r = match read_record(&path) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) if check => return Err(e),
            Err(_) => continue,
        };
        if now - r.recorded_unix_ms > window.as_millis() as i64 {
            fs::remove_file(&path).map_err(io_err(&path))?;
        }
    }
    Ok(())
}

/// The writer thread: coalesces what is queued, then writes it under the
/// lock. Ends when the store is dropped.
fn writer(store: std::sync::Weak<Inner>, rx: mpsc::Receiver<Job>) {
    let mut last_evict = Instant::now();
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        let Some(inner) = store.upgrade() else {
            return;
        };
        let result = write_jobs(&inner, &jobs, &mut last_evict);
        if let Err(e) = &result {
            tracing::error!(error = %e, "ledger store: write failed; will retry with the next");
        }
        let failed = result.as_ref().err().map(ToString::to_string);
        inner.state.lock().unwrap_or_else(|p| p.into_inner()).failed = failed.clone();
        for job in jobs {
            if let Job::Flush(done) = job {
                let _ = done.send(failed.clone().map_or(Ok(()), Err));
            }
        }
    }
}

fn write_jobs(inner: &Inner, jobs: &[Job], last_evict: &mut Instant) -> Result<(), StoreError> {
    let state = || inner.state.lock().unwrap_or_else(|p| p.into_inner());
    let _lock = lock_blocking(&inner.dir)?;
    // Spending: what is pending, merged with what is on disk now (other
    // processes' included).
    {
        let mut st = state();
        let pending = std::mem::take(&mut st.pending);
        merge(&mut st.inflight, &pending);
    }
    let inflight = state().inflight.clone();
    if !inflight.is_empty() {
        let path = inner.dir.join(SPEND_FILE);
        let written = read_spend(&path).and_then(|mut disk| {
            merge(&mut disk, &inflight);
            prune(&mut disk);
            let file = SpendFile {
                format: SPEND_FORMAT.into(),
                version: STORE_VERSION,
                routes: disk,
            };
            let bytes = serde_json::to_vec_pretty(&file).expect("spending serializes");
            write_atomic(&path, &bytes)?;
            Ok(file.routes)
        });
        let mut st = state();
        match written {
            Ok(disk) => {
                st.disk = disk;
                st.read_at = Instant::now();
                st.inflight.clear();
            }
            // Kept in flight: still counted, written with the next.
            Err(e) => return Err(e),
        }
    }
    for job in jobs {
        if let Job::Record(r) = job {
            let file = RecordFile {
                format: RECORD_FORMAT.into(),
                version: STORE_VERSION,
                record: (**r).clone(),
            };
            let bytes = serde_json::to_vec(&file).expect("an outcome serializes");
            write_atomic(&record_path(&inner.dir, &r.key), &bytes)?;
            let mut st = state();
            if st.records.get(&r.key).is_some_and(|x| Arc::ptr_eq(x, r)) {
                st.records.remove(&r.key);
            }
        }
    }
    if last_evict.elapsed() >= EVICT_EVERY {
        *last_evict = Instant::now();
        evict(&inner.dir.join(RECORDS_DIR), inner.window, false)?;
    }
    Ok(())
}

/// Drops periods older than the budgets can ask about.
fn prune(t: &mut Totals) {
    let now = calendar::now_unix_ms() / 1000;
    let oldest_day = calendar::day_key(now - KEEP_DAYS * 86_400);
    let oldest_month = calendar::month_key(now - KEEP_MONTHS_DAYS * 86_400);
    for periods in t.values_mut() {
        periods.retain(|k, _| match k.len() {
            10 => *k >= oldest_day,
            _ => *k >= oldest_month,
        });
    }
}

#[cfg(test)]
mod tests;
