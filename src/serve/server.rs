//! The listener and the connections: accepts TCP connections (up to a cap;
//! beyond it, new ones wait in the kernel's backlog), serves HTTP/1.1 on
//! each, and shuts down in order: stop accepting, let in-flight requests
//! (and so their runs) finish, then wait for late workers, all within one
//! grace period. It must not look inside requests (`http` does).

use super::app::App;
use super::http::handle;
use super::ServeReport;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Decrements the open-connection count when the connection task ends.
struct Open(Arc<App>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    max_connections: usize,
    grace: Duration,
    shutdown: impl Future<Output = ()>,
) -> ServeReport {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            s = slots.clone().acquire_owned() => s.expect("the connection semaphore is never closed"),
        };
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
        let _ = stream.set_nodelay(true);
        let service_app = app.clone();
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .serve_connection(
                TokioIo::new(stream),
                service_fn(move |req| handle(service_app.clone(), req)),
            );
        let conn = graceful.watch(conn);
        app.connections.fetch_add(1, Ordering::Relaxed);
        let open = Open(app.clone());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
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
    let http_drained =
        tokio::time::timeout_at(tokio::time::Instant::from_std(until), graceful.shutdown())
            .await
            .is_ok();
    let drained = app
        .engine
        .shutdown(until.saturating_duration_since(Instant::now()))
        .await;
    let report = ServeReport {
        waited_ms: crate::millis::to_ms(started.elapsed()),
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
