//! Ctrl-C for the one-shot commands: the first SIGINT runs the command's
//! own stop (cancel a request, abort a run, stop a bench after the run in
//! flight), so it can report what happened and exit 130; a second one ends
//! the process at once with 130. Servers handle their signals themselves
//! ([`shutdown_signal`]).

use crate::exit;

/// Runs `stop` on the first Ctrl-C, on a thread of its own (so a command
/// blocked on a lane still hears it). Returns once the handler is in
/// place: a Ctrl-C from then on never kills the process before `stop`.
pub(crate) fn on_ctrl_c(stop: impl FnOnce() + Send + 'static) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("edgecloud-ctrl-c".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let mut interrupts = match Interrupts::register() {
                    Ok(i) => i,
                    Err(e) => {
                        tracing::warn!(error = %e, "no Ctrl-C handler; Ctrl-C will end the command abruptly");
                        return;
                    }
                };
                let _ = ready_tx.send(());
                interrupts.next().await;
                stop();
                interrupts.next().await;
                std::process::exit(exit::INTERRUPTED.into());
            });
        });
    match spawned {
        // Dropped unsent when registration failed: go on without.
        Ok(_) => {
            let _ = ready_rx.recv();
        }
        Err(e) => {
            tracing::warn!(error = %e, "no Ctrl-C handler; Ctrl-C will end the command abruptly")
        }
    }
}

/// SIGINT, registered when created (tokio's `ctrl_c()` registers only when
/// first polled, too late to promise anything).
struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn register() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                signal: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        {
            self.signal.recv().await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    if !crate::quiet() {
        eprintln!("edgecloud serve: shutting down (finishing requests in flight)");
    }
}
