//! Contract point 13 at the harness level: a pool of instances, each
//! keeping points 1-12 as if alone (scripted backends, one per instance so
//! each instance's counters are its own).

use super::*;

/// A pool of `n` local-only instances, each with its own scripted backend.
fn pool_of(n: usize, make: fn(&str) -> Scripted) -> (Harness, Vec<Scripted>) {
    let locals: Vec<Scripted> = (0..n).map(|i| make(&format!("local-{i}"))).collect();
    let pool = Harness::builder()
        .local_per_instance(
            locals
                .iter()
                .map(|s| Arc::new(s.clone()) as Arc<dyn Backend>)
                .collect(),
        )
        .instances(n)
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .build()
        .unwrap();
    (pool, locals)
}

#[test]
fn p13_each_request_takes_an_idle_instance_and_the_rest_are_refused_at_once() {
    let (pool, locals) = pool_of(3, Scripted::new);
    let runs: Vec<_> = (0..3)
        .map(|i| {
            pool.start(req(&format!("r{i}")), RunOptions::new())
                .unwrap()
        })
        .collect();
    let mut instances: Vec<usize> = runs.iter().map(|r| r.instance()).collect();
    instances.sort_unstable();
    assert_eq!(instances, [0, 1, 2], "three requests, three instances");
    let tasks: Vec<Task> = locals.iter().map(Scripted::next_task).collect();
    // A fourth finds every instance busy: refused, nothing queued.
    match pool.start(req("r3"), RunOptions::new()) {
        Err(HarnessError::PoolBusy { instances }) => assert_eq!(instances, 3),
        other => panic!("expected PoolBusy, got {other:?}"),
    }
    assert_eq!(pool.pool_stats().rejected, 1);
    for (i, t) in tasks.iter().enumerate() {
        t.complete(&format!("answer {i}"));
    }
    for r in runs {
        let instance = r.instance();
        let o = tokio_block(r.outcome()).unwrap();
        assert_eq!(
            o.text.as_deref(),
            Some(format!("answer {instance}").as_str())
        );
    }
    for l in &locals {
        let c = l.counters();
        assert_eq!((c.max_outstanding, c.overlaps), (1, 0), "{c:?}");
    }
    assert_eq!(pool.busy_instances(), 0);
}

#[test]
fn p13_a_late_worker_holds_its_own_instance_and_the_others_serve() {
    let (pool, locals) = pool_of(2, Scripted::slow_to_cancel);
    let first = pool
        .start(with_deadline("slow", SHORT), RunOptions::new())
        .unwrap();
    let late_instance = first.instance();
    let t_late = locals[late_instance].next_task();
    let o = tokio_block(first.outcome()).unwrap();
    assert_eq!(o.status, RunStatus::DeadlineExceeded);
    assert_eq!(o.lane(Lane::Local).status, LaneStatus::Late);
    // The late instance is skipped: every next request goes to the other,
    // which admits one at a time.
    let other = 1 - late_instance;
    for round in 0..3 {
        // Only the late worker's lane is held when the round starts.
        wait_lane_free(&pool, other);
        let run = pool.start(req("next"), RunOptions::new()).unwrap();
        assert_eq!(run.instance(), other, "round {round}");
        let again = pool.start(req("one more"), RunOptions::new());
        assert!(
            matches!(again, Err(HarnessError::PoolBusy { .. })),
            "round {round}: {again:?}"
        );
        locals[other].next_task().complete("ok");
        let o = tokio_block(run.outcome()).unwrap();
        assert_eq!(o.text.as_deref(), Some("ok"));
    }
    assert_eq!(
        pool.instances()[late_instance].stats().late_workers_running,
        1
    );
    t_late.complete("too late");
    wait_lane_free(&pool, 0);
    wait_lane_free(&pool, 1);
    // Its lane is free again: both instances serve.
    let a = pool.start(req("a"), RunOptions::new()).unwrap();
    let b = pool.start(req("b"), RunOptions::new()).unwrap();
    assert_ne!(a.instance(), b.instance());
    for l in &locals {
        l.next_task().complete("done");
    }
    tokio_block(a.outcome()).unwrap();
    tokio_block(b.outcome()).unwrap();
    for l in &locals {
        assert_eq!(l.counters().overlaps, 0);
    }
}

#[test]
fn p13_a_bounded_wait_gets_the_instance_that_frees_up_within_the_deadline() {
    let (pool, locals) = pool_of(2, Scripted::new);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let busy = pool.start(req("first"), RunOptions::new()).unwrap();
    let other = pool.start(req("other"), RunOptions::new()).unwrap();
    let t1 = locals[busy.instance()].next_task();
    let t_other = locals[other.instance()].next_task();
    let waiting = {
        let pool = pool.clone();
        rt.spawn(async move {
            pool.start_within(req("second"), RunOptions::new(), LONG)
                .await
        })
    };
    // The waiter is counted before it is let in.
    while pool.pool_stats().waiting == 0 {
        std::thread::yield_now();
    }
    let freed = busy.instance();
    t1.complete("one");
    tokio_block(busy.outcome()).unwrap();
    let second = rt.block_on(waiting).unwrap().unwrap();
    assert_eq!(
        second.instance(),
        freed,
        "the waiter got the instance that freed up"
    );
    locals[freed].next_task().complete("two");
    let o = tokio_block(second.outcome()).unwrap();
    assert_eq!(o.text.as_deref(), Some("two"));
    assert_eq!(pool.pool_stats().waited, 1);
    // Its worker has returned (the run settled on its answer): the lane is
    // free for the next request once its slot is dropped.
    wait_lane_free(&pool, freed);

    // A wait that runs out is refused like a full pool.
    let hold = pool.start(req("hold"), RunOptions::new()).unwrap();
    assert_eq!(hold.instance(), freed);
    let t = locals[freed].next_task();
    let refused =
        rt.block_on(pool.start_within(req("late"), RunOptions::new(), Duration::from_millis(20)));
    assert!(
        matches!(refused, Err(HarnessError::PoolBusy { .. })),
        "{refused:?}"
    );
    t.complete("held");
    t_other.complete("other");
    tokio_block(hold.outcome()).unwrap();
    tokio_block(other.outcome()).unwrap();
}

#[test]
fn p13_a_pool_of_one_is_a_lone_harness_its_busy_lane_reported_in_the_outcome() {
    let (pool, locals) = pool_of(1, Scripted::new);
    let first = pool.start(req("first"), RunOptions::new()).unwrap();
    let t = locals[0].next_task();
    let second = pool.start(req("second"), RunOptions::new()).unwrap();
    let o = tokio_block(second.outcome()).unwrap();
    assert_eq!(o.lane(Lane::Local).status, LaneStatus::Busy);
    t.complete("one");
    tokio_block(first.outcome()).unwrap();
    assert_eq!(pool.pool_stats().rejected, 0);
}

#[test]
fn p13_run_ids_are_unique_across_the_pool() {
    let (pool, locals) = pool_of(2, Scripted::new);
    let a = pool.start(req("a"), RunOptions::new()).unwrap();
    let b = pool.start(req("b"), RunOptions::new()).unwrap();
    assert_ne!(a.run_id(), b.run_id());
    for l in &locals {
        l.next_task().complete("x");
    }
    tokio_block(a.outcome()).unwrap();
    tokio_block(b.outcome()).unwrap();
    assert_eq!(pool.stats().runs_settled, 2);
}

/// Waits until the instance's local lane is free: a worker's slot is freed
/// when its job is dropped, a moment after its answer is handed over.
fn wait_lane_free(pool: &Harness, instance: usize) {
    let until = std::time::Instant::now() + HANG;
    while pool.instances()[instance].is_busy(Lane::Local) {
        assert!(
            std::time::Instant::now() < until,
            "instance {instance}: its lane stayed busy"
        );
        std::thread::yield_now();
    }
}

fn tokio_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A request goes back to the idle instance whose last conversation it
/// continues (its local sequence has that prompt cached), not merely to the
/// lowest-numbered idle one; a request that continues none takes the
/// lowest-numbered idle instance.
#[test]
fn p13_a_conversation_goes_back_to_the_instance_that_has_its_prompt() {
    let (pool, locals) = pool_of(3, Scripted::new);
    // Two conversations at once: instances 0 and 1.
    let first = pool
        .start(req("Tell me about owls."), RunOptions::new())
        .unwrap();
    let second = pool
        .start(req("Tell me about bees."), RunOptions::new())
        .unwrap();
    assert_eq!((first.instance(), second.instance()), (0, 1));
    locals[0].next_task().complete("Owls hunt at night.");
    locals[1].next_task().complete("Bees make honey.");
    tokio_block(first.outcome()).unwrap();
    tokio_block(second.outcome()).unwrap();
    // The bees conversation's next turn: instance 1, though 0 is free.
    let next_turn = Request {
        messages: vec![
            ChatMessage::user("Tell me about bees."),
            ChatMessage::assistant("Bees make honey."),
            ChatMessage::user("How?"),
        ],
        ..req("unused")
    };
    let run = pool.start(next_turn, RunOptions::new()).unwrap();
    assert_eq!(run.instance(), 1);
    locals[1].next_task().complete("From nectar.");
    tokio_block(run.outcome()).unwrap();
    // Something new: the lowest-numbered idle instance.
    let other = pool.start(req("What is rain?"), RunOptions::new()).unwrap();
    assert_eq!(other.instance(), 0);
    locals[0].next_task().complete("Water.");
    tokio_block(other.outcome()).unwrap();
}

/// Bounded waits are served in order of arrival: the first waiter gets the
/// first instance that frees up (both waiters are woken by the release;
/// without the queue either could take it).
#[test]
fn p13_waiters_get_instances_in_order_of_arrival() {
    let (pool, locals) = pool_of(2, Scripted::new);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = pool.start(req("a"), RunOptions::new()).unwrap();
    let b = pool.start(req("b"), RunOptions::new()).unwrap();
    let (ta, tb) = (locals[0].next_task(), locals[1].next_task());
    let wait = |text: &'static str| {
        let pool = pool.clone();
        rt.spawn(async move { pool.start_within(req(text), RunOptions::new(), LONG).await })
    };
    let first = wait("first");
    while pool.pool_stats().waiting < 1 {
        std::thread::yield_now();
    }
    let second = wait("second");
    while pool.pool_stats().waiting < 2 {
        std::thread::yield_now();
    }
    // One instance frees up: the first waiter's, whoever looks first.
    ta.complete("a");
    tokio_block(a.outcome()).unwrap();
    let first = rt.block_on(first).unwrap().unwrap();
    assert_eq!(first.instance(), 0);
    assert_eq!(pool.pool_stats().waiting, 1, "the second still waits");
    // The next instance to free up is the second waiter's.
    tb.complete("b");
    tokio_block(b.outcome()).unwrap();
    let second = rt.block_on(second).unwrap().unwrap();
    assert_eq!(second.instance(), 1);
    locals[0].next_task().complete("one");
    locals[1].next_task().complete("two");
    tokio_block(first.outcome()).unwrap();
    tokio_block(second.outcome()).unwrap();
    assert_eq!(pool.pool_stats().waiting, 0);
}
