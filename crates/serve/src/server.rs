//! The listener and the connections: accepts TCP connections (up to a cap),
//! serves HTTP/1.1 on each, and shuts down in order: stop accepting, let
//! in-flight requests (and so their runs) finish, then wait for late
//! workers, all within one grace period. It must not look inside requests
//! (`http` does).
//!
//! At the cap a new client is not left waiting on idle keep-alive
//! connections: when one arrives and no slot is free, the connection that
//! has waited longest between requests (it answered at least one and has
//! none in flight) is closed, as HTTP/1.1 lets a server do and as nginx
//! does when it runs out of connections; its client reconnects. Without
//! this, idle keep-alive connections could hold every slot until the
//! header-read timeout (30 s) closed them. A connection that has not yet
//! sent its first request is never closed this way, and when every
//! connection is busy the new one waits for a slot.

use super::app::App;
use super::http::handle;
use super::ServeReport;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};

/// How long a client may take to send a request's headers (an idle
/// keep-alive connection's wait for its next request included).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// One open connection, as the accept loop sees it.
#[derive(Default)]
struct ConnState {
    /// Requests whose handler has not returned.
    in_flight: AtomicUsize,
    /// Requests begun, in all.
    served: AtomicU64,
    /// When its last request's handler returned, in microseconds since
    /// the registry's start.
    idle_since_us: AtomicU64,
    /// Asks the connection to close once its in-flight work is done.
    close: Notify,
}

/// Marks a request in flight on its connection until dropped.
struct InFlight {
    conn: Arc<ConnState>,
    epoch: Instant,
}

impl InFlight {
    fn begin(conn: &Arc<ConnState>, epoch: Instant) -> Self {
        conn.served.fetch_add(1, Ordering::Relaxed);
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        Self {
            conn: conn.clone(),
            epoch,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.conn.idle_since_us.store(now, Ordering::Relaxed);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections, to close an idle one at the cap and all of them
/// at shutdown.
struct Registry {
    epoch: Instant,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Registry {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
        }
    }

    fn add(&self) -> (u64, Arc<ConnState>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::default());
        self.lock().insert(id, state.clone());
        (id, state)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the connection idle the longest between requests to close;
    /// false when none is idle.
    fn close_longest_idle(&self) -> bool {
        let conns = self.lock();
        let idle = conns
            .values()
            .filter(|c| {
                c.served.load(Ordering::Relaxed) > 0 && c.in_flight.load(Ordering::Acquire) == 0
            })
            .min_by_key(|c| c.idle_since_us.load(Ordering::Relaxed));
        match idle {
            Some(c) => {
                c.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn close_all(&self) {
        for c in self.lock().values() {
            c.close.notify_one();
        }
    }
}

/// Decrements the open-connection count and leaves the registry when the
/// connection task ends.
struct Open {
    app: Arc<App>,
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.registry.remove(self.id);
        self.app.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    max_connections: usize,
    grace: Duration,
    shutdown: impl Future<Output = ()>,
) -> ServeReport {
    let max_connections = max_connections.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let slots = Arc::new(Semaphore::new(max_connections));
    let registry = Arc::new(Registry::new());
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: the error is
                    // per-connection; keep serving the others.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::task::yield_now().await;
                    continue;
                }
            },
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if registry.close_longest_idle() {
                    tracing::debug!("at the connection cap: closing the longest idle connection");
                }
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    s = slots.clone().acquire_owned() => s.expect("the connection semaphore is never closed"),
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, state) = registry.add();
        let service_app = app.clone();
        let service_state = state.clone();
        let epoch = registry.epoch;
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .serve_connection(
                TokioIo::new(stream),
                service_fn(move |req| {
                    let in_flight = InFlight::begin(&service_state, epoch);
                    let app = service_app.clone();
                    async move {
                        let response = handle(app, req).await;
                        drop(in_flight);
                        response
                    }
                }),
            );
        app.connections.fetch_add(1, Ordering::Relaxed);
        let open = Open {
            app: app.clone(),
            registry: registry.clone(),
            id,
        };
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => r,
                _ = state.close.notified() => {
                    // Finish what is in flight (a streamed answer too),
                    // then close.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(open);
            drop(slot);
        });
    }
    drop(listener);
    app.shutting_down.store(true, Ordering::Release);
    let started = Instant::now();
    let until = started + grace;
    registry.close_all();
    let all_slots = u32::try_from(max_connections).expect("clamped to u32 above");
    let http_drained = tokio::time::timeout_at(
        tokio::time::Instant::from_std(until),
        slots.acquire_many(all_slots),
    )
    .await
    .is_ok();
    let drained = app
        .engine
        .shutdown(until.saturating_duration_since(Instant::now()))
        .await;
    let report = ServeReport {
        waited_ms: edgecloud_core::millis::to_ms(started.elapsed()),
        connections_left: if http_drained {
            0
        } else {
            app.connections.load(Ordering::Relaxed)
        },
        runs_in_flight: drained.runs_in_flight,
        workers_still_running: drained.workers_still_running,
    };
    if report.is_clean() {
        tracing::info!(waited_ms = report.waited_ms, "server stopped cleanly");
    } else {
        tracing::warn!(?report, "grace period over with work still running");
    }
    report
}
