//! Handing a runtime the harness made to a thread that shuts it down once
//! no run or late worker is left: how dropping a harness never blocks and
//! never frees what a late worker still uses (contract point 4). It knows
//! registries and runtimes only, nothing of instances or runs.

use super::registry::Registry;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// Shuts `rt` down once no run or worker of these registries is left,
/// without blocking the caller: at once when all are idle, else from a
/// detached thread that waits for them.
pub(crate) fn reap_when_idle(rt: Runtime, registries: Vec<Arc<Registry>>) {
    let busy = |rs: &[Arc<Registry>]| rs.iter().any(|r| r.busy());
    if !busy(&registries) {
        rt.shutdown_background();
        return;
    }
    let holder = Arc::new(Mutex::new(Some(rt)));
    let in_thread = holder.clone();
    let spawned = std::thread::Builder::new()
        .name("edgecloud-reaper".into())
        .spawn(move || {
            let rt = in_thread.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(rt) = rt {
                rt.block_on(async {
                    for registry in &registries {
                        while registry.busy() {
                            registry
                                .wait_idle(Instant::now() + Duration::from_secs(3600))
                                .await;
                        }
                    }
                });
                rt.shutdown_background();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the reaper thread; late workers are dropped");
        if let Some(rt) = holder.lock().unwrap_or_else(|p| p.into_inner()).take() {
            rt.shutdown_background();
        }
    }
}
